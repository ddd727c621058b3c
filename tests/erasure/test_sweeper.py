"""Sweepers: physical deletion after hard expiry and of anything that lands in a dead generation (R-9, D2)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from sidecar.dev.devstack.store import NewMemory
from sidecar.dev.devstack.vectors import embed_text
from tests.support.erasure import sweep
from tests.support.harness import APP, Harness, harness

DAY = 86400


async def _plant(h: Harness, scope_id: str, generation: int, text: str, *, age: timedelta = timedelta(0)) -> str:
    """Write a row straight into kagent's table, as a save that escaped every fence would."""
    store = h.stack.store
    base = store.now
    store.now = lambda: base() - age
    try:
        key = (await h.namespace(scope_id, generation)).storage_key
        return await store.insert(NewMemory(APP, key, text, embed_text(text), "{}", None))
    finally:
        store.now = base


class TestHardExpiry:
    async def test_rest_clears_a_namespace_once_all_its_entries_expired(self, sh: Harness) -> None:
        """Over REST an expired entry waits while its namespace holds live memory, then goes with the namespace."""
        scope_id = await sh.scope()
        first = await sh.saved(scope_id, "likes green tea")
        sh.advance(3 * DAY)
        await sh.saved(scope_id, "lives in Lisbon")
        sh.advance(5 * DAY)  # the first entry is past its 7 days, the second is not
        report = await sweep(sh.parts)
        assert (report.expired_pending, report.expired_deleted) == (1, 0)
        assert len(await sh.rows(scope_id)) == 2
        sh.advance(3 * DAY)
        report = await sweep(sh.parts)
        assert report.expired_deleted == 2 and await sh.rows(scope_id) == []
        ledger = {e.entry_id: e for e in await sh.parts.store.ledger.entries_of_scope(scope_id)}
        assert ledger[first].physically_deleted_at is not None and ledger[first].verified_at is not None

    @pytest.mark.kagent
    async def test_kagent_db_deletes_each_expired_entry_by_id(self, kdb: Harness) -> None:
        """With the exact adapter the expired row goes at the next pass and its live neighbour stays."""
        scope_id = await kdb.scope()
        expired = await kdb.saved(scope_id, "likes green tea")
        kdb.advance(3 * DAY)
        live = await kdb.saved(scope_id, "lives in Lisbon")
        kdb.advance(4 * DAY)
        report = await sweep(kdb.parts)
        assert report.expired_deleted == 1
        assert [r.id for r in await kdb.rows(scope_id)] == [live]
        (gone,) = [e for e in await kdb.parts.store.ledger.entries_of_scope(scope_id) if e.entry_id == expired]
        assert gone.verified_at is not None

    async def test_the_periodic_sweeper_runs_on_its_own(self, tmp_path: Path) -> None:
        """With a short interval the running gateway deletes expired memory without being asked."""
        async with harness(tmp_path, store_url=None, erasure={"sweep_interval_s": 0.05}) as h:
            scope_id = await h.scope()
            await h.saved(scope_id, "likes green tea")
            h.advance(8 * DAY)
            while await h.rows(scope_id):
                h.sweepers.swept.clear()
                await h.sweepers.swept.wait()
            assert h.sweepers.last is not None


class TestDeadGenerations:
    @pytest.mark.kagent
    async def test_a_save_that_outlived_the_quiesce_bound_is_deleted_by_the_sweeper(self, any_adapter: Harness) -> None:
        """A write of the old generation that lands after the verified withdrawal is cleared at the next pass."""
        h = any_adapter
        scope_id = await h.scope()
        await h.saved(scope_id, "likes green tea")
        now = h.parts.clock()
        ns = await h.namespace(scope_id, 1)
        (slot,) = await h.parts.store.ledger.reserve_entries(scope_id, 1, ns.ns_id, 1, 1000, now)
        op = await h.begin_write(scope_id, 1, 1.0)  # lease lapses: the erasure stops waiting
        h.advance(2)
        record = (await h.client().withdraw(scope_id))["erasure"]
        assert record["state"] == "verified" and await h.rows(scope_id) == []
        late = await _plant(h, scope_id, 1, "late background save")
        await h.parts.store.ledger.fill_entry(slot, late, h.parts.clock(), h.parts.clock() + timedelta(days=7))
        await h.parts.store.scopes.end_write(op)
        report = await sweep(h.parts)
        assert report.dead_cleared == 1 and await h.rows(scope_id) == []
        assert await h.parts.store.namespaces.sweepable_namespaces(h.parts.clock(), 10) == []

    @pytest.mark.kagent
    async def test_a_reconsented_scope_loses_the_previous_generation(self, any_adapter: Harness) -> None:
        """Consent given again moves the generation; the old rows, never readable again, are swept."""
        h = any_adapter
        scope_id = await h.scope()
        await h.saved(scope_id, "likes green tea")
        await h.client().grant(scope_id, "remember my preferences", "v2")
        fresh = await h.saved(scope_id, "lives in Lisbon")
        await sweep(h.parts)
        assert [r.id for r in await h.rows(scope_id)] == [fresh]


class TestOrphans:
    @pytest.mark.kagent
    async def test_kagent_db_removes_unrecorded_rows_past_any_expiry(self, kdb: Harness) -> None:
        """A row in a memgov namespace the ledger never knew goes once it is older than any hard expiry."""
        scope_id = await kdb.scope()
        kept = await kdb.saved(scope_id, "likes green tea")
        await _plant(kdb, scope_id, 1, "crash between save and ledger", age=timedelta(days=9))
        report = await sweep(kdb.parts)
        assert report.orphans_deleted == 1
        assert [r.id for r in await kdb.rows(scope_id)] == [kept]

    async def test_rest_cannot_see_orphans_and_says_so(self, sh: Harness) -> None:
        """Over REST the orphan pass does not run (reported as None), so nothing is claimed."""
        assert (await sweep(sh.parts)).orphans_deleted is None


class TestAuditRetention:
    async def test_audit_rows_older_than_the_retention_window_are_purged(self, sh: Harness) -> None:
        """Audit records keep their own window: a sweep drops rows older than audit.retention_days."""
        store = sh.parts.store
        old = sh.parts.clock() - timedelta(days=sh.parts.settings.audit.retention_days + 1)
        await store.audit_log.audit("decision", "consent_missing", decision_id="d_0000000000000001", now=old)
        await store.audit_log.audit(
            "decision", "consent_missing", decision_id="d_0000000000000002", now=sh.parts.clock()
        )
        await sweep(sh.parts)  # the periodic pass may get there first; either way the old row goes
        assert [
            r["decision_id"]
            for r in await store.audit_log.audit_rows(limit=1000)
            if r["decision_id"] in {"d_0000000000000001", "d_0000000000000002"}
        ] == ["d_0000000000000002"]
