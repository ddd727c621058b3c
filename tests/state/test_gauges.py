"""The state figures an operator alerts on: erasures by state and age, the expiry backlog."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from sidecar.sampler import sample_once
from sidecar.state import StateStore, open_store
from sidecar.state.gauges import read_gauges
from sidecar.state.store import pending_store
from tests.support.pg import start_pg
from tests.support.sentinel import capture_sinks
from tests.support.state import NOW, new_scope, ns_of


def _sample(name: str, labels: dict[str, str] | None = None) -> float | None:
    return REGISTRY.get_sample_value(name, labels or {})


async def _expired_entry(store: StateStore, expired_for: timedelta, *, deleted: bool) -> None:
    scope = await new_scope(store, room=f"!r{int(expired_for.total_seconds())}:example.org")
    created = NOW - expired_for - timedelta(days=7)
    ns_id = await ns_of(store, scope.scope_id)
    (slot,) = await store.ledger.reserve_entries(scope.scope_id, scope.generation, ns_id, 1, 100, created)
    entry = str(uuid.uuid4())
    await store.ledger.fill_entry(slot, entry, created, NOW - expired_for)
    if deleted:
        await store.ledger.mark_physically_deleted([entry], NOW)


class TestReadGauges:
    async def test_empty_store_reads_zero(self, store: StateStore) -> None:
        """A fresh store has no erasures in any state and no backlog."""
        gauges = await read_gauges(store.db, NOW)
        assert set(gauges.erasures.values()) == {0} and "failed" in gauges.erasures
        assert (gauges.oldest_unfinished_erasure_s, gauges.oldest_overdue_expiry_s) == (0.0, 0.0)

    async def test_erasures_by_state_and_oldest_unfinished(self, store: StateStore) -> None:
        """Each erasure counts under its state; the oldest one not verified or failed gives the age."""
        scope = await new_scope(store)
        old = await store.erasures.create_erasure(
            scope.scope_id, "forget_all", [], "rest", "subject", NOW - timedelta(hours=2)
        )
        await store.erasures.create_erasure(
            scope.scope_id, "forget_all", [], "rest", "subject", NOW - timedelta(minutes=5)
        )
        done = await store.erasures.create_erasure(
            scope.scope_id, "forget_all", [], "rest", "subject", NOW - timedelta(days=3)
        )
        await store.erasures.advance_erasure(
            done.erasure_id, "failed", NOW - timedelta(days=3), failure_reason="erasure_failed"
        )
        await store.erasures.advance_erasure(old.erasure_id, "fenced", NOW - timedelta(hours=1))
        gauges = await read_gauges(store.db, NOW)
        assert (gauges.erasures["requested"], gauges.erasures["fenced"], gauges.erasures["failed"]) == (1, 1, 1)
        assert gauges.oldest_unfinished_erasure_s == 2 * 3600

    @pytest.mark.parametrize(
        ("failed_kind", "later_kind", "retry", "counted"),
        [
            ("forget_all", "forget_all", True, 0),
            ("forget_one", "forget_one", True, 0),
            ("forget_one", "off", False, 0),
            ("withdraw", "offboard", False, 0),
            ("rotate", "rotate", False, 0),
            ("forget_one", "forget_one", False, 1),
            ("forget_one", "rotate", False, 1),
            ("off", "rotate", False, 1),
        ],
        ids=[
            "retried",
            "forget-one-retried",
            "whole-scope-after",
            "offboard-after-withdraw",
            "rotation-after-rotation",
            "other-forget-one",
            "rotation-after-forget-one",
            "rotation-after-off",
        ],
    )
    async def test_a_failure_counts_until_a_later_verified_erasure_supersedes_it(
        self, store: StateStore, failed_kind: str, later_kind: str, retry: bool, counted: int
    ) -> None:
        """Failed counts only while no retry of it and no later whole-scope (or, for rotations, rotation) verified."""
        scope = await new_scope(store)
        failed = await store.erasures.create_erasure(
            scope.scope_id, failed_kind, ["e1"] if failed_kind == "forget_one" else [], "rest", "subject", NOW
        )
        failed = await store.erasures.advance_erasure(failed.erasure_id, "failed", NOW, failure_reason="erasure_failed")
        assert (await read_gauges(store.db, NOW)).erasures["failed"] == 1
        later_at = NOW + timedelta(minutes=1)
        if retry:
            later = await store.erasures.create_retry(failed, failed.entry_ids, "rest", "operator", later_at)
            assert later is not None and later.retry_of == failed.erasure_id
        else:
            later = await store.erasures.create_erasure(scope.scope_id, later_kind, ["e2"], "rest", "subject", later_at)
        for state in ("fenced", "quiesced", "deleted", "verified"):
            await store.erasures.advance_erasure(later.erasure_id, state, later_at)
        assert (await read_gauges(store.db, NOW)).erasures["failed"] == counted
        expected = None if counted else later.erasure_id
        assert await store.erasures.superseded_by(failed.erasure_id) == expected
        assert await store.erasures.open_failures(scope.scope_id) == counted

    async def test_a_whole_scope_erasure_before_the_failure_does_not_supersede_it(self, store: StateStore) -> None:
        """Only an erasure created after the failure covers it."""
        scope = await new_scope(store)
        earlier = await store.erasures.create_erasure(scope.scope_id, "off", [], "rest", "subject", NOW)
        failed = await store.erasures.create_erasure(
            scope.scope_id, "forget_all", [], "rest", "subject", NOW + timedelta(seconds=1)
        )
        await store.erasures.advance_erasure(failed.erasure_id, "failed", NOW, failure_reason="erasure_failed")
        for state in ("fenced", "quiesced", "deleted", "verified"):
            await store.erasures.advance_erasure(earlier.erasure_id, state, NOW + timedelta(seconds=2))
        assert (await read_gauges(store.db, NOW)).erasures["failed"] == 1

    async def test_a_chain_has_one_unfinished_retry(self, store: StateStore) -> None:
        """A second retry of the same failure while the first is unfinished is not recorded (two replicas, one run)."""
        scope = await new_scope(store)
        failed = await store.erasures.create_erasure(scope.scope_id, "off", [], "rest", "subject", NOW)
        failed = await store.erasures.advance_erasure(failed.erasure_id, "failed", NOW, failure_reason="erasure_failed")
        first = await store.erasures.create_retry(failed, [], "rest", "operator", NOW)
        assert first is not None
        assert await store.erasures.create_retry(failed, [], "rest", "operator", NOW) is None
        assert (await store.erasures.retry_head(failed)).erasure_id == first.erasure_id
        first = await store.erasures.advance_erasure(first.erasure_id, "failed", NOW, failure_reason="erasure_failed")
        second = await store.erasures.create_retry(first, [], "rest", "operator", NOW + timedelta(seconds=1))
        assert second is not None and second.retry_of == failed.erasure_id
        assert (await store.erasures.retry_head(failed)).erasure_id == second.erasure_id

    async def test_expiry_backlog_is_the_oldest_overdue_undeleted_entry(self, store: StateStore) -> None:
        """Entries past expiry and not physically deleted form the backlog; deleted ones do not count."""
        await _expired_entry(store, timedelta(hours=30), deleted=True)
        await _expired_entry(store, timedelta(hours=3), deleted=False)
        assert (await read_gauges(store.db, NOW)).oldest_overdue_expiry_s == 3 * 3600


class TestSampler:
    async def test_reading_is_published(self, store: StateStore) -> None:
        """A reading publishes the figures as metrics."""
        await _expired_entry(store, timedelta(hours=25), deleted=False)
        assert await sample_once(store, NOW)
        assert _sample("memgov_expiry_overdue_seconds") == 25 * 3600
        assert _sample("memgov_erasures", {"state": "verified"}) == 0.0

    async def test_unreachable_store_is_reported_down(self) -> None:
        """With PostgreSQL stopped the sampler does not raise, keeps the last figures and warns once the
        store it counted as available fails a reading."""
        pg = start_pg(max_connections=20)
        try:
            store = await open_store(pg.create_database("gauges"))
        finally:
            pg.stop()
        before = _sample("memgov_expiry_overdue_seconds")
        try:
            with capture_sinks() as sinks:
                assert not await sample_once(store, NOW)
            assert _sample("memgov_expiry_overdue_seconds") == before
            assert '"state.sample_failed"' in sinks.log_stream.getvalue()
        finally:
            await store.close()

    async def test_a_store_not_connected_yet_is_not_sampled(self, tmp_path: Path) -> None:
        """At start, before the store connects, no reading is tried and nothing is logged: the store's own
        lines report it; once connected, readings publish."""
        store = pending_store(f"sqlite:///{tmp_path}/state.db")
        try:
            with capture_sinks() as sinks:
                assert not await sample_once(store, NOW)
            assert "sample_failed" not in sinks.log_stream.getvalue()
            await store.connect_once()
            assert await sample_once(store, NOW)
        finally:
            await store.close()
