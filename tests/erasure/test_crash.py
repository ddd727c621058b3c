"""Crash safety (SPEC D4): SIGKILL a gateway process between two erasure steps, restart it, the erasure completes.

Each crash point is made deterministic without any hook in the gateway: the state store's scope
row is locked (stuck before ``fenced``), an in-flight write lease is held (stuck in ``fenced``),
or the gate in front of kagent holds the delete (``quiesced``) or the read-after-delete
(``deleted``). The test checks the recorded state, kills the process, lifts the obstacle and
starts a new process on the same state store. The kill-and-resume proof also runs with kagent
v0.9.11 itself behind the gate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from sidecar.control.client import ControlClient, ControlError, JsonAnswers
from sidecar.dev.devstack import Devstack
from sidecar.dev.devstack.deployment import Keys, write_keys
from sidecar.dev.devstack.vectors import embed_text
from sidecar.identity.keys import SessionKeys
from sidecar.state import StateStore, open_store
from tests.support.harness import AGENT, ALICE, APP, ROOM, policy_pack, subject_token, with_embedding
from tests.support.process import Gate, GatewayProcess, Hold, gate, gateway_process
from tests.support.procs import process_settings
from tests.support.upstream import Upstream, runtime_headers, start_stack
from tests.support.wait import until


@dataclass
class Crash:
    """One gateway process with its state store, the stand-in behind a gate, and the bridge's keys."""

    gp: GatewayProcess
    store: StateStore
    stack: Devstack
    gate: Gate
    keys: Keys
    state_url: str
    http: aiohttp.ClientSession
    upstream: Upstream

    def api(self) -> JsonAnswers:
        token = lambda: subject_token(self.keys, int(time.time()))  # noqa: E731 - a fresh token per call
        return JsonAnswers(ControlClient(self.gp.control_url, token, session=self.http))

    async def save(self, scope_id: str, generation: int, text: str) -> None:
        key = SessionKeys(self.keys.session_file.read_bytes().strip()).session_key(scope_id, generation)
        body = {"agent_name": APP, "user_id": key, "content": text, "vector": embed_text(text)}
        headers = {"X-Agent-Name": APP, "X-User-Id": key, **runtime_headers(self.upstream, AGENT)}
        async with self.http.post(self.gp.data_url + "/api/memories/sessions", json=body, headers=headers) as resp:
            assert resp.status == 201, await resp.text()

    async def rows(self, scope_id: str) -> int:
        return sum(1 for r in await self.stack.store.rows() if (r.user_id or "").startswith(f"mgs1.{scope_id}."))

    async def state_of(self, erasure_kind: str) -> str | None:
        for e in await self.store.erasures.unfinished_erasures():
            if e.kind == erasure_kind:
                return e.state
        return None


@asynccontextmanager
async def crashing(
    tmp_path: Path,
    pg_url: str,
    upstream: Upstream,
    request: pytest.FixtureRequest,
    *,
    rotation: bool = False,
    **extra: Any,
) -> AsyncIterator[Crash]:
    """A gateway process on a PostgreSQL state store, in front of a gated SQLite stand-in (or real kagent);
    ``rotation``: with the embedding provider and the agent's model pinned."""
    keys = write_keys(tmp_path / "keys")
    stack = await start_stack(
        upstream,
        pg_server=request.getfixturevalue("pg_server") if upstream.real else None,
        log_dir=tmp_path / "kagent",
        stream_delay_s=0,
    )
    store = await open_store(pg_url)
    try:
        async with gate(stack.kagent_url) as g, aiohttp.ClientSession() as http:
            settings = process_settings(
                keys,
                policy_pack(tmp_path),
                g.url,
                pg_url,
                upstream=upstream,
                erasure={"quiesce_timeout_s": 120.0},
                **extra,
            )
            if rotation:
                with_embedding(settings, stack.embedding_url, pinned=True)
            async with gateway_process(tmp_path / "gw", settings) as gp:
                yield Crash(gp, store, stack, g, keys, pg_url, http, upstream)
    finally:
        await store.close()
        await stack.stop()


@pytest.fixture
async def crash(
    tmp_path: Path, pg_url: str, upstream: Upstream, request: pytest.FixtureRequest
) -> AsyncIterator[Crash]:
    """A gateway process on a PostgreSQL state store, in front of a gated SQLite stand-in (or real kagent)."""
    async with crashing(tmp_path, pg_url, upstream, request) as c:
        yield c


async def _scope_with_memory(c: Crash) -> str:
    api = c.api()
    scope_id: str = (await api.create_scope(ALICE, AGENT, ROOM))["scope_id"]
    await api.grant(scope_id, "remember my preferences", "v1")
    for text in ("likes green tea", "lives in Lisbon"):
        await c.save(scope_id, 1, text)
    return scope_id


async def locked_scope_row(state_url: str, scope_id: str, lock: str) -> asyncpg.Connection:
    """A connection holding ``lock`` (e.g. ``FOR SHARE``) on the scope's row in an open transaction; closing it
    releases the lock."""
    conn = await asyncpg.connect(state_url)
    await conn.execute("BEGIN")
    await conn.execute(f"SELECT 1 FROM scopes WHERE scope_id = $1 {lock}", scope_id)
    return conn


def _read_after_delete(c: Crash) -> Hold:
    """Hold the verification read of a namespace that was already deleted (the ``deleted`` state)."""

    def hold(request: web.Request) -> bool:
        return request.method == "GET" and ("DELETE", request.path_qs) in c.gate.seen[:-1]

    return hold


async def _finished(c: Crash, scope_id: str) -> bool:
    return all(e.state in ("verified", "failed") for e in await c.store.erasures.erasures_of_scope(scope_id))


class TestKillBetweenSteps:
    @pytest.mark.kagent
    @pytest.mark.parametrize("stuck_in", ["requested", "fenced", "quiesced", "deleted"])
    async def test_a_killed_withdrawal_completes_after_restart(self, crash: Crash, stuck_in: str) -> None:
        """Whatever step the process died in, the restarted gateway finishes: verified, disabled, no rows."""
        c = crash
        scope_id = await _scope_with_memory(c)
        lock: asyncpg.Connection | None = None
        op = None
        if stuck_in == "requested":
            # The lock an UPDATE of the row needs, but not the one the erasure row's foreign key takes.
            lock = await locked_scope_row(c.state_url, scope_id, "FOR NO KEY UPDATE")
        elif stuck_in == "fenced":
            live = (await c.store.scopes.get_scope(scope_id)).namespace  # type: ignore[union-attr]  # the scope exists
            op = await c.store.scopes.begin_write(scope_id, 1, live.ns_id, 600.0, datetime.now(UTC))
        elif stuck_in == "quiesced":
            c.gate.hold = lambda r: r.method == "DELETE"
        else:
            c.gate.hold = _read_after_delete(c)
        withdrawal = asyncio.create_task(c.api().withdraw(scope_id))

        async def reached() -> bool:
            return await c.state_of("withdraw") == stuck_in and (
                stuck_in not in ("quiesced", "deleted") or c.gate.arrived.is_set()
            )

        await until(reached)
        await c.gp.kill()
        with pytest.raises(aiohttp.ClientError):
            await withdrawal
        if lock is not None:
            await lock.close()
        if op is not None:
            await c.store.scopes.end_write(op)
        c.gate.hold = None
        c.gate.release.set()
        await c.gp.start()
        await until(lambda: _finished(c, scope_id))  # resumed once the restarted gateway's store answers

        (erasure,) = await c.store.erasures.erasures_of_scope(scope_id)
        assert erasure.state == "verified"
        assert [s for s, _ in erasure.steps] == ["requested", "fenced", "quiesced", "deleted", "verified"]
        scope = await c.store.scopes.get_scope(scope_id)
        assert scope is not None and (scope.enabled, scope.generation) == (False, 2)
        assert [r.action for r in await c.store.scopes.receipts(scope_id)] == ["grant", "withdraw"]
        assert await c.rows(scope_id) == 0
        record = await c.api().erasure(erasure.erasure_id)
        assert (record["state"], record["physical_deletion"]) == ("verified", "complete")

    async def test_an_erasure_that_cannot_complete_after_restart_fails_closed(self, crash: Crash) -> None:
        """Killed mid-delete and restarted while kagent refuses deletes: failed, reason recorded, scope disabled."""
        c = crash
        scope_id = await _scope_with_memory(c)
        c.gate.hold = lambda r: r.method == "DELETE"
        token = (await c.api().confirmed(scope_id, "forget-all"))["confirm_token"]
        erasing = asyncio.create_task(c.api().confirmed(scope_id, "forget-all", token))

        async def reached() -> bool:
            return c.gate.arrived.is_set() and await c.state_of("forget_all") == "quiesced"

        await until(reached)
        await c.gp.kill()
        with pytest.raises(aiohttp.ClientError):
            await erasing
        c.gate.fail = lambda r: r.method == "DELETE"  # the held delete too: it never reaches kagent
        c.gate.hold = None
        c.gate.release.set()
        await c.gp.start()
        await until(lambda: _finished(c, scope_id))

        (erasure,) = await c.store.erasures.erasures_of_scope(scope_id)
        assert (erasure.state, erasure.failure_reason) == ("failed", "erasure_failed")
        scope = await c.store.scopes.get_scope(scope_id)
        assert scope is not None and not scope.enabled
        with pytest.raises(ControlError) as err:
            await c.api().grant(scope_id, "remember my preferences", "v2")
        assert (err.value.status, err.value.reason) == (409, "erasure_failed")
