"""A PostgreSQL that hangs without an error (behind a frozen relay: connections are accepted, nothing
is answered, nothing is reset) holds no call.

Every statement and every connection hand-out is bounded (``state.statement_timeout_s``,
``state.acquire_timeout_s``): a hung store turns into ``state_unavailable``, the health check
takes it as down, and once it answers again everything works as before. ``asyncio.timeout`` here
only catches a hang (tens of times the configured bound), it measures no speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from sidecar.reasons import Reason
from sidecar.state import StateError, StateStore, open_store
from sidecar.state.lanes import data_lane
from sidecar.state.spool import INSERT_AUDIT
from tests.support.blackhole import Blackhole, blackhole
from tests.support.pg import PgServer
from tests.support.state import NOW, new_scope

BOUND_S = 0.5
HANG_S = 30.0  # far beyond every bound: reaching it means a call hung


@pytest.fixture
async def relay(pg_server: PgServer) -> AsyncIterator[Blackhole]:
    async with blackhole(pg_server.port) as r:
        yield r


@pytest.fixture
async def store(pg_url: str, relay: Blackhole) -> AsyncIterator[StateStore]:
    s = await open_store(relay.url(pg_url), pool_size=4, statement_timeout_s=BOUND_S, acquire_timeout_s=BOUND_S)
    try:
        yield s
    finally:
        relay.thaw()
        await s.close()


async def _unavailable(call: object) -> None:
    async with asyncio.timeout(HANG_S):
        with pytest.raises(StateError) as refused:
            await call  # type: ignore[misc]
    assert refused.value.reason is Reason.STATE_UNAVAILABLE


class TestHungStore:
    async def test_a_statement_out_of_time_leaves_nothing_of_its_transaction(
        self, store: StateStore, pg_url: str
    ) -> None:
        """A write transaction whose second statement runs out of time is rolled back whole: its first
        statement's row is not there, and the pool serves the next call on a good connection."""
        values = (1, "decision", "allowed", "d_00000000000000ab", None, None, None, None, None)

        async def write() -> None:
            async with store.db.tx("write") as tx:
                await tx.execute(INSERT_AUDIT, *values)
                await tx.execute("SELECT pg_sleep(60)")

        await _unavailable(write())
        con = await asyncpg.connect(pg_url)
        try:
            assert await con.fetchval("SELECT COUNT(*) FROM audit WHERE decision_id = $1", values[3]) == 0
        finally:
            await con.close()
        assert (await new_scope(store)).scope_id  # the next call works

    async def test_a_hung_server_degrades_every_call_and_recovers(self, store: StateStore, relay: Blackhole) -> None:
        """Hung: reads, writes and more waiting calls than the pool has connections all end as
        state_unavailable; the health check says down and audit rows are spooled. Answering again: the check
        says up, the spool is written, and the calls work again."""
        scope = await new_scope(store)
        async with store.watched(0.2):
            relay.freeze()
            await _unavailable(store.scopes.get_scope(scope.scope_id))

            async def in_lane() -> None:
                with data_lane():
                    await store.scopes.get_scope(scope.scope_id)

            async with asyncio.timeout(HANG_S):
                results = await asyncio.gather(*(in_lane() for _ in range(12)), return_exceptions=True)
            assert all(isinstance(r, StateError) and r.reason is Reason.STATE_UNAVAILABLE for r in results)
            async with asyncio.timeout(HANG_S):
                await store.health.wait_for(False)
            await store.audit_log.audit("decision", "state_unavailable", decision_id="d_00000000000000ac", now=NOW)
            assert len(store.spool) == 1
            relay.thaw()
            async with asyncio.timeout(HANG_S):
                await store.health.wait_for(True)
            assert len(store.spool) == 0
            assert (await store.scopes.get_scope(scope.scope_id)) is not None
        rows = await store.audit_log.audit_rows()
        assert [r["decision_id"] for r in rows if r["at"] == NOW] == ["d_00000000000000ac"]

    async def test_an_erasure_step_that_runs_out_of_time_is_not_taken_and_runs_again(
        self, store: StateStore, relay: Blackhole
    ) -> None:
        """An erasure's step written while the store hangs fails as state_unavailable and leaves the
        erasure where it was (the server rolls back what reached it once it answers again); the same
        step then goes through as on any retry."""
        scope = await new_scope(store)
        erasure = await store.erasures.create_erasure(scope.scope_id, "forget_all", [], "rest", "subject", NOW)
        relay.freeze()
        await _unavailable(store.erasures.advance_erasure(erasure.erasure_id, "fenced", NOW))
        relay.thaw()
        current = await store.erasures.get_erasure(erasure.erasure_id)  # no watcher here: the store is asked at once
        assert current is not None
        assert (current.state, [s for s, _ in current.steps]) == ("requested", ["requested"])
        moved = await store.erasures.advance_erasure(erasure.erasure_id, "fenced", NOW)
        assert [s for s, _ in moved.steps] == ["requested", "fenced"]
