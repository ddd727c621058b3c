"""The gateway's long-lived handles are opened in one exit stack: a failure at any step closes what was opened;
key files are read again when they change.

The state store opens first and keeps at least one PostgreSQL connection; a secret that cannot be
loaded afterwards (here the bridge key, a placeholder) must not leave that pool behind. Counted on
the real server, from its own ``pg_stat_activity``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path

import asyncpg
import pytest
from prometheus_client import REGISTRY

from sidecar import evloop
from sidecar.dev.devstack.deployment import write_keys
from sidecar.identity import IdentityError
from sidecar.identity.keys import SessionKeys
from sidecar.identity.tokens import KeySet, SecretError, mint_operator, verify_operator_token
from sidecar.ops import Readiness
from sidecar.root import open_parts, reload_keys, trusted_keys
from sidecar.settings import load_settings
from tests.support.harness import overrides, policy_pack
from tests.support.identity import NOW
from tests.support.sentinel import capture_sinks
from tests.support.wait import until


async def _connections(pg_url: str) -> int:
    database = pg_url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(pg_url.rsplit("/", 1)[0] + "/postgres")
    try:
        count = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", database
        )
    finally:
        await admin.close()
    return int(count)


class TestExitStack:
    async def test_a_bad_key_after_the_store_opened_leaves_no_connection(self, tmp_path: Path, pg_url: str) -> None:
        keys = write_keys(tmp_path / "keys")
        settings = load_settings(**overrides(keys, policy_pack(tmp_path), "http://127.0.0.1:9", pg_url))
        readiness = Readiness()
        async with open_parts(settings, readiness):  # the good case opens connections and closes them
            assert await _connections(pg_url) >= 1
            assert {"policy", "state", "rotation"} <= set(readiness.checks)
        assert await _connections(pg_url) == 0
        assert not {"policy", "state", "rotation"} & set(readiness.checks)

        keys.bridge_file.write_bytes(b"changeme-changeme-changeme-changeme")
        with pytest.raises(SecretError):
            async with open_parts(settings, readiness):
                pytest.fail("a placeholder bridge key must not start a gateway")
        assert await _connections(pg_url) == 0
        assert not {"policy", "state", "rotation"} & set(readiness.checks)


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class TestKeyReload:
    async def test_keys_changed_in_place_are_used_and_a_broken_change_is_not(self, tmp_path: Path) -> None:
        """Session and operator key files updated in place (as a mounted Secret is) are read again: the next
        session secret and a new operator key id verify without a restart; a placeholder written meanwhile
        is rejected, counted and logged, and the keys in use stay."""
        session = tmp_path / "session"
        session.mkdir()
        (session / "current").write_bytes(b"old-session-secret-0123456789abcdef")
        operators = tmp_path / "operators"
        operators.mkdir()
        (operators / "2026-a").write_bytes(b"operator-key-a-0123456789abcdefghij")
        settings = load_settings(
            secrets={
                "session_key_file": str(session / "current"),
                "previous_session_key_file": str(session / "previous"),
                "next_session_key_file": str(session / "next"),
                "reload_interval_s": 0.05,
            },
            trust={"operator_keys_dir": str(operators)},
        )
        keys, bridge, ring = trusted_keys(settings)
        assert bridge is None and ring is not None and keys.slots == ("current",)
        new_session = b"new-session-secret-abcdefghijklmnop"
        minted = SessionKeys(new_session).session_key("s" + "a" * 24, 1)
        token = mint_operator("ops-oncall", b"operator-key-b-klmnopqrstuvwxyz0123", "HS256", now=NOW, kid="2026-b")
        loaded, rejected = (
            _sample("memgov_key_reloads_total", {"outcome": "loaded"}),
            _sample("memgov_key_reloads_total", {"outcome": "rejected"}),
        )
        with capture_sinks() as sinks:
            async with evloop.background(reload_keys(settings, keys, bridge, ring)):
                await asyncio.sleep(0.1)  # the first reading is taken before anything changes
                (session / "next").write_bytes(new_session)
                (operators / "2026-b").write_bytes(b"operator-key-b-klmnopqrstuvwxyz0123")
                await until(lambda: _verifies(keys, minted), timeout_s=10)
                await until(lambda: _operator_ok(ring, token), timeout_s=10)
                before = _sample("memgov_key_verifications_total", {"purpose": "session", "slot": "next"})
                assert keys.verify(minted)[1] == 1
                after = _sample("memgov_key_verifications_total", {"purpose": "session", "slot": "next"})
                assert after == before + 1
                (operators / "2026-c").write_bytes(b"changeme")
                await until(lambda: _above("memgov_key_reloads_total", {"outcome": "rejected"}, rejected), timeout_s=10)
                assert await _operator_ok(ring, token) and ring.ids == ("2026-a", "2026-b")
                (operators / "2026-c").unlink()
                (operators / "2026-b").unlink()
                await until(lambda: _not(_operator_ok(ring, token)), timeout_s=10)
        assert _sample("memgov_key_reloads_total", {"outcome": "loaded"}) >= loaded + 2
        text = sinks.log_stream.getvalue()
        assert '"keys.reload_failed"' in text and "changeme" not in text and "new-session" not in text


async def _verifies(keys: SessionKeys, key: str) -> bool:
    try:
        keys.verify(key)
    except IdentityError:
        return False
    return True


async def _operator_ok(ring: KeySet, token: str) -> bool:
    try:
        verify_operator_token(token, ring, now=NOW)
    except IdentityError:
        return False
    return True


async def _above(name: str, labels: dict[str, str], value: float) -> bool:
    return _sample(name, labels) > value


async def _not(check: Awaitable[bool]) -> bool:
    return not await check
