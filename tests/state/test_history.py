"""Bounded history on SQLite and PostgreSQL: compaction keeps what is live and every erasure's evidence."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from sidecar.erasure.evidence import build_evidence
from sidecar.state import StateStore, open_store
from sidecar.state.codec import to_us
from sidecar.state.ledger import COUNTS
from sidecar.state.types import Erasure
from tests.support.state import NOW, WEEK, new_scope, ns_of

#: The grace the sweeper gives a final row before compacting it.
DAY = timedelta(hours=24)
PATH = ["fenced", "quiesced", "deleted", "verified"]
LIVE = 5


async def _rows(store: StateStore, scope_id: str) -> tuple[int, int]:
    """(ledger rows, namespaces) the scope holds, whatever their state."""
    async with store.db.tx("read") as tx:
        ledger = await tx.fetchrow("SELECT COUNT(*) FROM ledger WHERE scope_id = $1", scope_id)
        namespaces = await tx.fetchrow("SELECT COUNT(*) FROM namespaces WHERE scope_id = $1", scope_id)
    assert ledger is not None and namespaces is not None
    return int(ledger[0]), int(namespaces[0])


async def _counts(store: StateStore, scope_id: str, at: datetime) -> tuple[tuple[int, int], tuple[int, int]]:
    """(the trigger-kept counts, the same counted row by row) of live entries and of live entries + slots."""
    held = "tombstoned_us IS NULL AND deleted_us IS NULL"
    held += " AND (expires_us > $2 OR (expires_us IS NULL AND lease_us > $2))"
    async with store.db.tx("read") as tx:
        kept = await tx.fetchrow(COUNTS, scope_id, to_us(at))
        full = await tx.fetchrow(
            "SELECT SUM(CASE WHEN expires_us IS NOT NULL THEN 1 ELSE 0 END), COUNT(*)"
            f" FROM ledger WHERE scope_id = $1 AND {held}",
            scope_id,
            to_us(at),
        )
    assert kept is not None and full is not None
    return (int(kept[0]), int(kept[1])), (int(full[0] or 0), int(full[1]))


async def _save(store: StateStore, scope_id: str, entry_id: str, at: datetime) -> None:
    (slot,) = await store.ledger.reserve_entries(scope_id, 1, await ns_of(store, scope_id), 1, 100, at)
    await store.ledger.fill_entry(slot, entry_id, at, at + WEEK)


async def _finish(store: StateStore, erasure_id: str, at: datetime) -> None:
    for state in PATH:
        await store.erasures.advance_erasure(erasure_id, state, at)


async def _forget(store: StateStore, scope_id: str, entry_id: str, at: datetime) -> str:
    """A forget-one as the engine runs it over REST: tombstone, then verified (physically pending)."""
    chain = await store.lineage.lineage(scope_id, entry_id)
    erasure = await store.erasures.create_erasure(scope_id, "forget_one", chain, "rest", "subject", at)
    await store.lineage.tombstone_forgotten(scope_id, erasure.erasure_id, chain, at)
    await _finish(store, erasure.erasure_id, at)
    return erasure.erasure_id


async def _rotate(store: StateStore, scope_id: str, at: datetime, *, finish: bool = True) -> str:
    """A rotation as the engine runs it: freeze, copy every live entry, switch, read back, stamp, clear."""
    erasure = await store.erasures.create_erasure(scope_id, "rotate", [], "rest", "subject", at)
    eid = erasure.erasure_id
    await store.erasures.advance_erasure(eid, "fenced", at)
    frozen = await store.rotations.freeze_namespace(scope_id, eid)
    assert frozen is not None
    staged = await store.rotations.stage_namespace(scope_id, eid, at)
    kept = [e for e in await store.history.unswept_entries(scope_id, [frozen.ns_id]) if e.tombstoned_at is None]
    await store.rotations.record_moves(
        eid, staged.ns_id, [(e.entry_id, f"{e.entry_id}.r", e.created_at, e.expires_at) for e in kept]
    )
    assert await store.rotations.switch_rotation(eid, staged.ns_id, at) == "switched"
    if not finish:
        return eid
    await store.erasures.record_readback(eid, frozen.ns_id, 0, "namespace", at)
    gone = [e.entry_id for e in await store.history.unswept_entries(scope_id, [frozen.ns_id])]
    await store.ledger.mark_physically_deleted(gone, at)
    await store.ledger.mark_verified(gone, at)
    await store.namespaces.mark_cleared([frozen.ns_id], at)
    for state in PATH[1:]:
        await store.erasures.advance_erasure(eid, state, at)
    return eid


async def _history(store: StateStore, rounds: int) -> tuple[str, list[str], datetime]:
    """A scope of LIVE entries forgotten one at a time, each forget followed by a rotation and a new save."""
    scope = await new_scope(store)
    for i in range(LIVE):
        await _save(store, scope.scope_id, f"e{i}", NOW)
    erasures = []
    at = NOW
    for i in range(rounds):
        at = NOW + timedelta(minutes=i + 1)
        oldest = (await store.ledger.live_entries(scope.scope_id, at, None, 1))[0]
        erasures.append(await _forget(store, scope.scope_id, oldest.entry_id, at))
        erasures.append(await _rotate(store, scope.scope_id, at))
        await _save(store, scope.scope_id, f"n{i}", at)
    return scope.scope_id, erasures, at


async def _evidence(store: StateStore, erasure: Erasure) -> dict[str, Any]:
    """The evidence record exactly as the control API builds it."""
    ledger = await store.history.evidence_entries(erasure.erasure_id)
    namespaces = [] if erasure.kind == "forget_one" else await store.namespaces.namespaces_of_scope(erasure.scope_id)
    rotations = await store.erasures.rotations_after(erasure) if erasure.kind == "forget_one" else []
    return build_evidence(erasure, ledger, namespaces, rotations)


class TestBoundedHistory:
    async def test_forty_forget_ones_leave_only_live_rows(self, store: StateStore) -> None:
        """After 40 forget-ones (each rotated out), compaction leaves the live entries and the live namespace."""
        scope_id, _, last = await _history(store, 40)
        ledger, namespaces = await _rows(store, scope_id)
        assert ledger > 40 * LIVE and namespaces == 41  # what the scope carried before
        report = await store.history.compact_history(last + DAY, last, 500)
        assert (report.scopes, report.skipped_unfinished) == (1, 0)
        assert await _rows(store, scope_id) == (LIVE, 1)
        assert len(await store.ledger.live_entries(scope_id, last, None, 100)) == LIVE
        assert await store.history.entry_counts(scope_id, await ns_of(store, scope_id), last) == (LIVE, 0)

    async def test_every_evidence_record_reads_the_same_after_compaction(self, store: StateStore) -> None:
        """Stamps, read-backs with their generation, and rotation sources outlive the rows they came from."""
        _, erasures, last = await _history(store, 6)
        before = [await _evidence(store, e) for e in [await store.erasures.get_erasure(i) for i in erasures] if e]
        assert all(r["verification"]["physically_absent"] for r in before)
        assert all(r["physical_deletion"] == "complete" for r in before)
        assert (await store.history.compact_history(last + DAY, last, 500)).ledger_rows > 0
        after = [await _evidence(store, e) for e in [await store.erasures.get_erasure(i) for i in erasures] if e]
        assert after == before
        assert all(r["read_back"][0]["generation"] == 1 for r in after if r["kind"] == "rotate")

    async def test_rows_final_for_less_than_the_grace_are_kept(self, store: StateStore) -> None:
        """Only rows final before the cut-off go: the most recent round's stay until their day has passed."""
        scope_id, _, last = await _history(store, 3)
        await store.history.compact_history(last + DAY, last - timedelta(seconds=30), 500)
        ledger, namespaces = await _rows(store, scope_id)
        assert (ledger, namespaces) == (LIVE + LIVE, 2)  # the last rotation's originals and source namespace
        await store.history.compact_history(last + DAY, last, 500)
        assert await _rows(store, scope_id) == (LIVE, 1)

    async def test_an_old_id_still_leads_to_its_current_copy(self, store: StateStore) -> None:
        """An id shown before several rotations still names the entry after the copies between are compacted."""
        scope_id, _, last = await _history(store, 3)
        first_kept = f"e{LIVE - 1}"
        await store.history.compact_history(last + DAY, last, 500)
        chain = await store.lineage.lineage(scope_id, first_kept)
        assert chain == [first_kept, f"{first_kept}.r", f"{first_kept}.r.r", f"{first_kept}.r.r.r"]
        assert [e.entry_id for e in await store.history.entries_by_id(scope_id, chain)] == [chain[-1]]

    async def test_the_kept_counts_match_a_full_count_after_every_kind_of_change(self, store: StateStore) -> None:
        """Saves, slots given back or lapsed, forgets, rotations, expiry and compaction keep the counts exact."""
        scope_id, _, last = await _history(store, 4)
        checks = [await _counts(store, scope_id, last)]
        (slot,) = await store.ledger.reserve_entries(scope_id, 1, await ns_of(store, scope_id), 1, 100, last)
        await store.ledger.reserve_entries(scope_id, 1, await ns_of(store, scope_id), 1, 100, last)  # left to lapse
        checks.append(await _counts(store, scope_id, last))
        await store.ledger.release_entries([slot])
        checks.append(await _counts(store, scope_id, last + timedelta(hours=1)))  # the other slot lapsed
        await store.purge_expired(last + timedelta(hours=1))
        # A week on, the entries saved (or copied from saves) at NOW have expired; the later saves have not.
        checks.append(await _counts(store, scope_id, NOW + WEEK + timedelta(seconds=30)))
        await store.history.compact_history(last + DAY, last + DAY, 500)
        checks.append(await _counts(store, scope_id, last))
        assert all(kept == full for kept, full in checks), checks
        assert [c[0] for c in checks] == [(LIVE, LIVE), (LIVE, LIVE + 2), (LIVE, LIVE), (4, 4), (LIVE, LIVE)]

    async def test_evidence_past_its_retention_goes_unless_it_still_decides_something(self, store: StateStore) -> None:
        """Past the audit retention, complete forget-ones and finished rotations are purged; a forget-one still
        waiting for physical deletion, a failed erasure and a whole-scope erasure stay."""
        scope_id, erasures, last = await _history(store, 2)
        waiting = await _forget(
            store, scope_id, (await store.ledger.live_entries(scope_id, last, None, 1))[0].entry_id, last
        )
        whole = await store.erasures.create_erasure(scope_id, "forget_all", [], "rest", "subject", last)
        await _finish(store, whole.erasure_id, last)
        failed = await store.erasures.create_erasure(scope_id, "off", [], "rest", "subject", last)
        await store.erasures.advance_erasure(failed.erasure_id, "failed", last, failure_reason="erasure_failed")
        await store.history.compact_history(last + DAY, last, 500)
        assert await store.lineage.purge_erasures(last + DAY) == len(erasures)
        kept = {e.erasure_id for e in await store.erasures.erasures_of_scope(scope_id)}
        assert kept == {waiting, whole.erasure_id, failed.erasure_id}


class TestUnfinishedErasures:
    async def test_a_scope_with_an_unfinished_erasure_is_left_whole(self, store: StateStore) -> None:
        """While any erasure of the scope runs, nothing of it is compacted; afterwards it is."""
        scope_id, _, last = await _history(store, 3)
        pending = await store.erasures.create_erasure(scope_id, "forget_all", [], "rest", "subject", last)
        before = await _rows(store, scope_id)
        report = await store.history.compact_history(last + DAY, last, 500)
        assert (report.scopes, report.skipped_unfinished, report.ledger_rows) == (0, 0, 0)
        assert await _rows(store, scope_id) == before
        await store.erasures.advance_erasure(pending.erasure_id, "failed", last, failure_reason="erasure_failed")
        assert (await store.history.compact_history(last + DAY, last, 500)).scopes == 1
        assert await _rows(store, scope_id) == (LIVE, 1)

    async def test_a_switched_rotation_still_verifying_keeps_its_source(self, store: StateStore) -> None:
        """A rotation between its switch and its read-back keeps the namespace and rows it must still verify."""
        scope_id, _, last = await _history(store, 2)
        at = last + timedelta(minutes=1)
        eid = await _rotate(store, scope_id, at, finish=False)
        kept = await _rows(store, scope_id)
        await store.history.compact_history(at + DAY, at + DAY, 500)
        assert await _rows(store, scope_id) == kept
        erasure = await store.erasures.get_erasure(eid)
        assert erasure is not None and erasure.from_ns_id is not None
        assert [n.ns_id for n in await store.namespaces.namespaces_by_id(scope_id, [erasure.from_ns_id])] == [
            erasure.from_ns_id
        ]

    async def test_a_cleared_namespace_a_write_may_still_reach_is_kept(self, store: StateStore) -> None:
        """An in-flight record or a pending slot naming a cleared namespace keeps it, so a late write is swept."""
        scope_id, _, last = await _history(store, 1)
        old = await ns_of(store, scope_id)
        op_id = await store.scopes.begin_write(scope_id, 1, old, 60, last)
        (slot,) = await store.ledger.reserve_entries(scope_id, 1, old, 1, 100, last)
        scope = await store.scopes.advance_generation(scope_id, last)  # forget-all's fence: a fresh namespace
        gone = [e.entry_id for e in await store.history.unswept_entries(scope_id, [old])]
        for stamp in (store.ledger.mark_physically_deleted, store.ledger.mark_verified):
            await stamp(gone, last)
        await store.namespaces.mark_cleared([old], last)
        await store.history.compact_history(last + DAY, last + DAY, 500)
        assert [n.ns_id for n in await store.namespaces.namespaces_by_id(scope_id, [old])] == [old]
        await store.scopes.end_write(op_id)
        await store.history.compact_history(last + DAY, last + DAY, 500)
        assert [n.ns_id for n in await store.namespaces.namespaces_by_id(scope_id, [old])] == [
            old
        ]  # the slot still names it
        await store.ledger.release_entries([slot])
        await store.history.compact_history(last + DAY, last + DAY, 500)
        assert await store.namespaces.namespaces_by_id(scope_id, [old]) == []
        assert scope.namespace is not None
        assert [n.ns_id for n in await store.namespaces.open_namespaces(scope_id)] == [scope.namespace.ns_id]


class TestConcurrency:
    async def test_two_replicas_compacting_at_once_take_each_row_once(self, store: StateStore, state_url: str) -> None:
        """Two stores on the same database compact the same scope at once: one takes it, the other finds
        nothing left; the scope ends with its live rows, and no evidence is lost."""
        scope_id, erasures, last = await _history(store, 5)
        before = [await _evidence(store, e) for e in [await store.erasures.get_erasure(i) for i in erasures] if e]
        other = await open_store(state_url)
        try:
            reports = await asyncio.gather(
                store.history.compact_history(last + DAY, last, 500),
                other.history.compact_history(last + DAY, last, 500),
            )
        finally:
            await other.close()
        ledger, namespaces = await _rows(store, scope_id)
        assert (ledger, namespaces) == (LIVE, 1)
        assert sum(r.ledger_rows for r in reports) == 5 * LIVE and sum(r.namespaces for r in reports) == 5
        after = [await _evidence(store, e) for e in [await store.erasures.get_erasure(i) for i in erasures] if e]
        assert after == before

    async def test_an_erasure_starting_during_compaction_sees_the_scope_before_or_after(
        self, store: StateStore, state_url: str
    ) -> None:
        """An erasure requested while another replica compacts either holds the compaction off (nothing goes)
        or starts on the compacted scope; it never reads a scope half compacted."""
        scope_id, _, last = await _history(store, 4)
        before = await _rows(store, scope_id)
        other = await open_store(state_url)
        try:
            report, erasure = await asyncio.gather(
                other.history.compact_history(last + DAY, last, 500),
                store.erasures.create_erasure(scope_id, "forget_all", [], "rest", "subject", last),
            )
        finally:
            await other.close()
        assert await _rows(store, scope_id) in (before, (LIVE, 1))
        assert (report.ledger_rows == 0) == (await _rows(store, scope_id) == before)
        assert (await store.erasures.get_erasure(erasure.erasure_id)) is not None
