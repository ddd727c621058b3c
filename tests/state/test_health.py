"""The store's health: fail fast while it is down, come back by itself, and lose no audit record uncounted."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from sidecar.reasons import Reason
from sidecar.state import StateError, StateStore, open_store
from sidecar.state.health import StoreHealth
from sidecar.state.spool import AuditSpool
from tests.support.pg import PgServer
from tests.support.sentinel import assert_absent, make_sentinel
from tests.support.state import NOW, new_scope


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


class TestOutage:
    async def test_outage_is_detected_spooled_and_replayed(self, own_pg: PgServer) -> None:
        """With PostgreSQL stopped, calls fail at once, audit rows and counts wait in the spool, and both
        land with their original times once it answers again; memgov_state_available follows."""
        store = await open_store(own_pg.create_database("health"))
        try:
            scope = await new_scope(store)
            async with store.watched(0.2):
                assert _sample("memgov_state_available") == 1.0
                own_pg.halt()
                with pytest.raises(StateError):
                    await store.scopes.get_scope(scope.scope_id)  # the failure that starts the check at once
                await store.health.wait_for(False)
                assert _sample("memgov_state_available") == 0.0
                with pytest.raises(StateError) as refused:
                    await store.scopes.get_scope(scope.scope_id)  # known down: no connection attempt at all
                assert refused.value.reason is Reason.STATE_UNAVAILABLE
                await store.audit_log.audit("decision", "state_unavailable", decision_id="d_00000000000000aa", now=NOW)
                await store.audit_log.audit("control", "state_unavailable", scope_id=scope.scope_id, now=NOW)
                for _ in range(3):
                    await store.audit_log.count_refusal("memory.search", "state_unavailable", NOW)
                assert len(store.spool) == 5 and _sample("memgov_audit_spool_records") == 5.0
                own_pg.resume()
                await store.health.wait_for(True)
                assert len(store.spool) == 0 and _sample("memgov_audit_spool_records") == 0.0
                assert (await store.scopes.get_scope(scope.scope_id)) is not None
            rows = await store.audit_log.audit_rows()
            assert {(r["kind"], r["decision_id"], r["scope_id"]) for r in rows if r["at"] == NOW} == {
                ("decision", "d_00000000000000aa", None),
                ("control", None, scope.scope_id),
            }
            counts = await store.audit_log.refusal_counts()
            assert (NOW.replace(minute=0), "memory.search", "state_unavailable", 3) in counts
        finally:
            await store.close()

    async def test_records_left_at_shutdown_are_counted(self, own_pg: PgServer) -> None:
        """A process that stops while the store is still down counts what it could not write as dropped."""
        store = await open_store(own_pg.create_database("shutdown"))
        before = _sample("memgov_audit_spool_dropped_total", {"kind": "audit"})
        own_pg.halt()
        try:
            await store.audit_log.audit("decision", "state_unavailable", decision_id="d_00000000000000bb", now=NOW)
            assert len(store.spool) == 1
        finally:
            await store.close()
        assert _sample("memgov_audit_spool_dropped_total", {"kind": "audit"}) == before + 1


class TestSpool:
    def test_full_spool_counts_what_it_refuses(self) -> None:
        """Beyond its bound the spool keeps nothing more, and every refused record is counted by kind."""
        spool = AuditSpool(max_rows=2)
        before = {k: _sample("memgov_audit_spool_dropped_total", {"kind": k}) for k in ("audit", "refusal_count")}
        for i in range(3):
            spool.add_row((i, "decision", "state_unavailable", None, None, None, None, None, None))
        hour = 0
        spool.add_count((hour, "memory.search", "state_unavailable"))
        spool.add_count((hour, "memory.search", "state_unavailable"))  # same key: absorbed, not a new entry
        spool.add_count((hour, "memory.save", "state_unavailable"))
        spool.add_count((hour, "a2a.invoke", "state_unavailable"))  # a third key: over the bound
        assert len(spool) == 2 + 3
        after = {k: _sample("memgov_audit_spool_dropped_total", {"kind": k}) for k in ("audit", "refusal_count")}
        assert (after["audit"] - before["audit"], after["refusal_count"] - before["refusal_count"]) == (1, 1)

    async def test_spool_holds_no_memory_content(self, tmp_path) -> None:
        """A spooled record is a checked audit row: a value that could carry text is refused before it is kept."""
        store = await open_store(f"sqlite:///{tmp_path}/s.db")
        sentinel = make_sentinel("spool")
        try:
            store.health.set(False)  # as the health check would after an outage
            with pytest.raises(ValueError):
                await store.audit_log.audit("decision", "state_unavailable", decision_id=sentinel, now=NOW)
            with pytest.raises(ValueError):
                await store.audit_log.count_refusal(sentinel, "state_unavailable", NOW)
            await store.audit_log.audit("decision", "state_unavailable", decision_id="d_00000000000000cc", now=NOW)
            assert len(store.spool) == 1
            assert_absent(sentinel, repr(store.spool.snapshot()))
            store.health.set(True)
            assert await store.spool.flush(store.db) == 1
            assert [r["decision_id"] for r in await store.audit_log.audit_rows()] == ["d_00000000000000cc"]
        finally:
            await store.close()


class TestGuard:
    async def test_known_down_store_is_not_asked(self, store: StateStore) -> None:
        """While the health check says down, every call fails with state_unavailable; once up, calls pass again."""
        scope = await new_scope(store)
        store.health.set(False)
        with pytest.raises(StateError) as refused:
            await store.scopes.get_scope(scope.scope_id)
        assert refused.value.reason is Reason.STATE_UNAVAILABLE
        with pytest.raises(StateError):
            await store.ledger.reserve_entries(scope.scope_id, scope.generation, "n" + "0" * 24, 1, 100, NOW)
        store.health.set(True)
        assert (await store.scopes.get_scope(scope.scope_id)) is not None
        await store.purge_expired(NOW + timedelta(days=1))


class TestWatcher:
    async def test_an_unexpected_failure_of_a_check_counts_as_down_and_the_watcher_keeps_going(self) -> None:
        """A check that raises something other than an outage error leaves the store unavailable, not the
        watcher dead with the store reported available for ever; the next passing check brings it back."""
        health = StoreHealth()
        failures = 2

        async def ping() -> None:
            nonlocal failures
            if failures:
                failures -= 1
                raise RuntimeError("driver state the store layer does not translate")

        async def recovered() -> None:
            return None

        watcher = asyncio.create_task(health.watch(ping, 0.01, recovered))
        try:
            async with asyncio.timeout(30):
                await health.wait_for(False)
                await health.wait_for(True)
            assert not watcher.done()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
