"""Withdrawal racing hundreds of background saves from two gateway processes sharing PostgreSQL (SPEC D2, R-4).

Over two hundred saves of the old generation (single saves and auto-save batches) are in flight
through two ``memgov serve`` processes when the subject withdraws on one of them. A gate in front
of kagent lets the first saves through and holds the rest until the withdrawal has fenced the
scope, so the race happens whatever kagent's speed. After the withdrawal's verified erasure and
one sweeper pass, nothing of the scope is left in kagent's table (the stand-in's, and kagent
v0.9.11's own) and nothing is readable through memgov, even after consent is given again.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sidecar.dev.devstack import start_devstack
from sidecar.dev.devstack.deployment import write_keys
from sidecar.dev.devstack.vectors import embed_text
from sidecar.identity.keys import SessionKeys
from sidecar.state import open_store
from tests.support.erasure import kagent_table, sweep
from tests.support.harness import AGENT, APP, context_token, install_role, policy_pack, role_url
from tests.support.process import gate
from tests.support.procs import governed_like, process_settings, two_gateways
from tests.support.upstream import Upstream, runtime_headers, start_stack
from tests.support.wait import until

SINGLE_SAVES = 160
BATCHES = 10
BATCH_SIZE = 5
WITHDRAW_AFTER = 40
_dbs = itertools.count()


async def _post(http: aiohttp.ClientSession, url: str, key: str, body: dict[str, Any], upstream: Upstream) -> int:
    headers = {"X-Agent-Name": APP, "X-User-Id": key, **runtime_headers(upstream, AGENT)}
    async with http.post(url, json=body, headers=headers) as resp:
        await resp.read()
        return resp.status


def _item(key: str, text: str) -> dict[str, Any]:
    return {"agent_name": APP, "user_id": key, "content": text, "vector": embed_text(text)}


@pytest.fixture(params=["rest", "kagent-db"])
def adapter(request: pytest.FixtureRequest) -> str:
    """The erasure adapter both gateways use."""
    return str(request.param)


@pytest.fixture
async def race_setup(tmp_path: Path, pg_server: Any, adapter: str, upstream: Upstream) -> AsyncIterator[dict[str, Any]]:
    """A PostgreSQL memory table (the stand-in's or the real kagent's) and a PostgreSQL state store."""
    n = next(_dbs)
    state_url = pg_server.create_database(f"race_state_{n}")
    if upstream.real:
        stack = await start_stack(upstream, pg_server=pg_server, log_dir=tmp_path / "kagent", stream_delay_s=0)
        assert stack.real is not None
        await install_role(stack.real.db_url)
        eraser = role_url(stack.real.db_url)
    else:
        memory_url = pg_server.create_database(f"race_memory_{n}")
        eraser = await kagent_table(memory_url)
        stack = await start_devstack(store_url=memory_url, stream_delay_s=0)
    store = await open_store(state_url)
    try:
        async with gate(stack.kagent_url) as g:
            yield {
                "stack": stack,
                "gate": g,
                "store": store,
                "state_url": state_url,
                "eraser": eraser,
                "keys": write_keys(tmp_path / "keys"),
                "pack": policy_pack(tmp_path),
                "tmp": tmp_path,
            }
    finally:
        await store.close()
        await stack.stop()


class TestWithdrawalRace:
    @pytest.mark.kagent
    async def test_nothing_survives_a_withdrawal_during_two_hundred_saves(
        self, race_setup: dict[str, Any], adapter: str, upstream: Upstream
    ) -> None:
        """Zero rows in kagent's table and zero readable entries after the verified erasure and a sweep."""
        r = race_setup
        # Every save comes from this one test client, far above a real pod's concurrency: they queue for
        # state connections longer than a gateway's default bound on a loaded machine.
        extra: dict[str, Any] = {
            "erasure": {"quiesce_timeout_s": 20.0},
            "listen": {"max_concurrent_per_client": 1000},
            "state": {"acquire_timeout_s": 60.0},
        }
        if adapter == "kagent-db":
            extra = {"adapter": "kagent-db", "kagent_db_url": r["eraser"], **extra}
        first, second = (
            process_settings(r["keys"], r["pack"], r["gate"].url, r["state_url"], upstream=upstream, **extra)
            for _ in range(2)
        )
        async with two_gateways(r["tmp"], r["keys"], first, second) as pair:
            a, b, http, api, scope_id, key = pair.a, pair.b, pair.http, pair.api, pair.scope_id, pair.key

            done = 0
            enough = asyncio.Event()

            def hold_late_saves(request: web.Request) -> bool:
                # Once enough saves are through, every further one kagent would get waits for the fence.
                return enough.is_set() and request.method == "POST" and request.path.startswith("/api/memories/")

            r["gate"].hold = hold_late_saves

            async def save(gateway_url: str, path: str, body: dict[str, Any]) -> int:
                nonlocal done
                status = await _post(http, gateway_url + path, key, body, upstream)
                done += 1
                if done >= WITHDRAW_AFTER:
                    enough.set()
                return status

            urls = itertools.cycle([a.data_url, b.data_url])
            saves = [
                save(next(urls), "/api/memories/sessions", _item(key, f"fact {i} about tea"))
                for i in range(SINGLE_SAVES)
            ]
            saves += [
                save(
                    next(urls),
                    "/api/memories/sessions/batch",
                    {"items": [_item(key, f"batch {j} fact {i}") for i in range(BATCH_SIZE)]},
                )
                for j in range(BATCHES)
            ]
            in_flight = [asyncio.create_task(s) for s in saves]
            await enough.wait()
            withdrawing = asyncio.create_task(api.withdraw(scope_id))

            async def fenced() -> bool:
                return any(e.state != "requested" for e in await r["store"].erasures.erasures_of_scope(scope_id))

            await until(fenced)
            r["gate"].release.set()  # the held saves now land in kagent after the fence
            withdrawal = await withdrawing
            statuses = await asyncio.gather(*in_flight)

            assert withdrawal["erasure"]["state"] == "verified"
            assert SINGLE_SAVES + BATCHES * BATCH_SIZE >= 200
            # Saves landed before the fence and were refused after it: the withdrawal really raced them.
            assert statuses.count(201) >= WITHDRAW_AFTER // 2 and statuses.count(403) > 0
            assert set(statuses) <= {201, 403}
            async with governed_like(first) as gov:
                assert (await sweep(gov)).failures == 0
                assert await gov.store.namespaces.sweepable_namespaces(gov.clock(), 10) == []

            rows = [row for row in await r["stack"].store.rows() if (row.user_id or "").startswith(f"mgs1.{scope_id}.")]
            assert rows == []
            await api.grant(scope_id, "remember my preferences", "v2")
            assert (await api.inspect(scope_id, context_token(r["keys"], int(time.time()))))["entries"] == []
            search = {"agent_name": APP, "user_id": key, "vector": embed_text("fact about tea"), "limit": 50}
            runtime = runtime_headers(upstream, AGENT)
            async with http.post(
                b.data_url + "/api/memories/search",
                json=search,
                headers={"X-Agent-Name": APP, "X-User-Id": key, **runtime},
            ) as resp:
                assert resp.status == 200 and await resp.json() == []
            fresh = SessionKeys(r["keys"].session_file.read_bytes().strip()).session_key(scope_id, 3)
            search["user_id"] = fresh
            async with http.post(
                a.data_url + "/api/memories/search",
                json=search,
                headers={"X-Agent-Name": APP, "X-User-Id": fresh, **runtime},
            ) as resp:
                assert resp.status == 200 and await resp.json() == []
