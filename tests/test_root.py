"""The gateway's long-lived handles are opened in one exit stack: a failure at any step closes what was opened.

The state store opens first and keeps at least one PostgreSQL connection; a secret that cannot be
loaded afterwards (here the bridge key, a placeholder) must not leave that pool behind. Counted on
the real server, from its own ``pg_stat_activity``.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from sidecar.dev.devstack.deployment import write_keys
from sidecar.identity.tokens import SecretError
from sidecar.ops import Readiness
from sidecar.root import open_parts
from sidecar.settings import load_settings
from tests.support.harness import overrides, policy_pack


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
