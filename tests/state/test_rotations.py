"""Rotation's atomic steps in the state store, on SQLite and PostgreSQL: freeze, stage, switch, lineage."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sidecar.reasons import Reason
from sidecar.state import StateError, StateStore
from sidecar.state.types import Namespace, RunTaken
from tests.state.test_ledger import save
from tests.support.state import NOW, WEEK, new_scope, ns_of

LATER = NOW + timedelta(hours=1)


async def _rotation(store: StateStore, scope_id: str) -> str:
    erasure = await store.erasures.create_erasure(scope_id, "rotate", [], "rest", "sweeper", NOW)
    return erasure.erasure_id


async def _states(store: StateStore, scope_id: str) -> list[str]:
    return sorted(n.state for n in await store.namespaces.namespaces_of_scope(scope_id))


async def _copied(store: StateStore, scope_id: str, erasure_id: str, *entry_ids: str) -> Namespace:
    """Stage and record a copy of each entry (``c-<id>``), as the copy step does."""
    staged = await store.rotations.stage_namespace(scope_id, erasure_id, NOW)
    live = {e.entry_id: e for e in await store.ledger.entries_of_scope(scope_id)}
    await store.rotations.record_moves(
        erasure_id, staged.ns_id, [(e, f"c-{e}", live[e].created_at, live[e].expires_at) for e in entry_ids]
    )
    return staged


class TestFreeze:
    async def test_a_frozen_namespace_is_read_but_never_written(self, store: StateStore) -> None:
        """Saves are fenced as stale while a rotation holds the namespace; released, they write again."""
        scope = await new_scope(store)
        ns = await ns_of(store, scope.scope_id)
        rotation = await _rotation(store, scope.scope_id)
        frozen = await store.rotations.freeze_namespace(scope.scope_id, rotation)
        assert frozen is not None and frozen.ns_id == ns and frozen.frozen_by == rotation
        for write in (
            store.scopes.begin_write(scope.scope_id, 1, ns, 30, NOW),
            store.ledger.reserve_entries(scope.scope_id, 1, ns, 1, 100, NOW),
        ):
            with pytest.raises(StateError) as err:
                await write
            assert err.value.reason is Reason.STALE_GENERATION
        assert await ns_of(store, scope.scope_id) == ns  # still the namespace searches read
        await store.rotations.release_rotation(rotation, NOW)
        assert await store.scopes.begin_write(scope.scope_id, 1, ns, 30, NOW)

    async def test_one_rotation_at_a_time(self, store: StateStore) -> None:
        """A second rotation cannot freeze a namespace another holds; a disabled scope has none to freeze."""
        scope = await new_scope(store)
        first, second = await _rotation(store, scope.scope_id), await _rotation(store, scope.scope_id)
        assert await store.rotations.freeze_namespace(scope.scope_id, first) is not None
        assert await store.rotations.freeze_namespace(scope.scope_id, second) is None
        assert await store.rotations.freeze_namespace(scope.scope_id, first) is not None  # a resumed fence
        await store.scopes.withdraw(scope.scope_id, NOW)
        assert await store.rotations.freeze_namespace(scope.scope_id, first) is None


class TestSwitch:
    async def test_one_transaction_moves_the_scope_and_keeps_every_hard_expiry(self, store: StateStore) -> None:
        """After the switch: one live namespace (the staged one), copies with the original creation and expiry,
        originals tombstoned, and what was not copied listed as the rotation's erased entries."""
        scope = await new_scope(store)
        await save(store, scope.scope_id, "kept")
        await save(store, scope.scope_id, "gone", created=timedelta(minutes=1))
        await store.ledger.tombstone(scope.scope_id, ["gone"], NOW)
        rotation = await _rotation(store, scope.scope_id)
        old = (await store.rotations.freeze_namespace(scope.scope_id, rotation)).ns_id  # type: ignore[union-attr]  # the scope is live: freezing succeeds
        staged = await _copied(store, scope.scope_id, rotation, "kept")
        assert await _states(store, scope.scope_id) == ["live", "staged"]  # sorted
        assert await store.rotations.switch_rotation(rotation, staged.ns_id, LATER) == "switched"
        assert await _states(store, scope.scope_id) == ["live", "retired"]
        assert await ns_of(store, scope.scope_id) == staged.ns_id
        ledger = {e.entry_id: e for e in await store.ledger.entries_of_scope(scope.scope_id)}
        assert (ledger["c-kept"].created_at, ledger["c-kept"].expires_at) == (NOW, NOW + WEEK)
        assert ledger["c-kept"].ns_id == staged.ns_id and ledger["c-kept"].tombstoned_at is None
        assert ledger["kept"].tombstoned_at == LATER and ledger["kept"].ns_id == old
        erasure = await store.erasures.get_erasure(rotation)
        assert erasure is not None and erasure.ns_id == staged.ns_id
        assert erasure.entry_ids == ["gone"] and erasure.moves == [("kept", "c-kept")]
        assert await store.ledger.filter_live(scope.scope_id, staged.ns_id, ["c-kept"], LATER) == {"c-kept"}
        assert await store.lineage.lineage(scope.scope_id, "kept") == ["kept", "c-kept"]

    @pytest.mark.parametrize("since_copy", ["forgotten", "saved", "writing"])
    async def test_the_switch_waits_for_a_copy_that_missed_nothing(self, store: StateStore, since_copy: str) -> None:
        """An entry forgotten, a save landed or a write still running since the copy began: retry, no switch."""
        scope = await new_scope(store)
        await save(store, scope.scope_id, "a")
        rotation = await _rotation(store, scope.scope_id)
        ns = await ns_of(store, scope.scope_id)
        if since_copy == "writing":
            await store.scopes.begin_write(scope.scope_id, 1, ns, 7200, NOW)
        await store.rotations.freeze_namespace(scope.scope_id, rotation)
        staged = await _copied(store, scope.scope_id, rotation, "a")
        if since_copy == "forgotten":
            await store.lineage.tombstone_forgotten(scope.scope_id, "e" + "0" * 24, ["a"], NOW)
        elif since_copy == "saved":  # a slot reserved before the freeze, filled after the copy
            async with store.db.tx() as tx:
                await tx.execute(
                    "INSERT INTO ledger (slot_id, scope_id, generation, entry_id, created_us, expires_us,"
                    " ns_id) SELECT 'lz', scope_id, 1, 'late', created_us, expires_us, ns_id FROM ledger"
                    " WHERE entry_id = 'a'"
                )
        assert await store.rotations.switch_rotation(rotation, staged.ns_id, LATER) == "retry"
        assert await ns_of(store, scope.scope_id) == ns
        restaged = await _copied(store, scope.scope_id, rotation)
        states = await _states(store, scope.scope_id)
        assert states.count("live") == 1 and states.count("staged") == 1 and restaged.state == "staged"
        assert (await store.erasures.get_erasure(rotation)).moves == []  # type: ignore[union-attr]  # the erasure exists

    async def test_a_write_of_unknown_outcome_does_not_hold_the_switch(self, store: StateStore) -> None:
        """Its call has ended; the namespace is marked possibly written and deleted with the rest later."""
        scope = await new_scope(store)
        ns = await ns_of(store, scope.scope_id)
        op = await store.scopes.begin_write(scope.scope_id, 1, ns, 30, NOW)
        await store.scopes.write_outcome_unknown(op, NOW + timedelta(minutes=5))
        assert await store.scopes.inflight_count(scope.scope_id, NOW, ns_id=ns, running=True) == 0
        rotation = await _rotation(store, scope.scope_id)
        await store.rotations.freeze_namespace(scope.scope_id, rotation)
        staged = await _copied(store, scope.scope_id, rotation)
        assert await store.rotations.switch_rotation(rotation, staged.ns_id, LATER) == "switched"
        (old,) = [n for n in await store.namespaces.namespaces_of_scope(scope.scope_id) if n.ns_id == ns]
        assert old.possibly_until == NOW + timedelta(minutes=5)

    async def test_a_consent_change_supersedes_the_rotation(self, store: StateStore) -> None:
        """Withdrawal retires the frozen and the staged namespace; the switch never happens, copies are refused."""
        scope = await new_scope(store)
        rotation = await _rotation(store, scope.scope_id)
        await store.rotations.freeze_namespace(scope.scope_id, rotation)
        staged = await _copied(store, scope.scope_id, rotation)
        await store.scopes.withdraw(scope.scope_id, NOW)
        assert await store.rotations.switch_rotation(rotation, staged.ns_id, LATER) == "superseded"
        with pytest.raises(StateError):
            await store.rotations.begin_copy(rotation, staged.ns_id, 30, NOW)
        with pytest.raises(StateError):
            await store.rotations.stage_namespace(scope.scope_id, rotation, NOW)
        assert set(await _states(store, scope.scope_id)) == {"retired"}


class TestOneRunner:
    async def test_a_runner_whose_namespace_was_restaged_can_neither_copy_record_nor_switch(
        self, store: StateStore
    ) -> None:
        """Another runner restaged the rotation: the first runner's copies, moves and switch are refused
        (RunTaken), and only the moves into the namespace staged now enter the ledger at the switch."""
        scope = await new_scope(store)
        await save(store, scope.scope_id, "kept")
        rotation = await _rotation(store, scope.scope_id)
        await store.rotations.freeze_namespace(scope.scope_id, rotation)
        first = await store.rotations.stage_namespace(scope.scope_id, rotation, NOW)
        op, into = await store.rotations.begin_copy(rotation, first.ns_id, 30, NOW)
        assert into.ns_id == first.ns_id
        await store.scopes.end_write(op)
        second = await _copied(store, scope.scope_id, rotation, "kept")  # the other runner, from the start
        live = {e.entry_id: e for e in await store.ledger.entries_of_scope(scope.scope_id)}
        late = [("kept", "c-late", live["kept"].created_at, live["kept"].expires_at)]
        for refused in (
            store.rotations.begin_copy(rotation, first.ns_id, 30, NOW),
            store.rotations.record_moves(rotation, first.ns_id, late),
            store.rotations.switch_rotation(rotation, first.ns_id, LATER),
        ):
            with pytest.raises(RunTaken):
                await refused
        assert await store.rotations.switch_rotation(rotation, second.ns_id, LATER) == "switched"
        ledger = {e.entry_id: e.ns_id for e in await store.ledger.entries_of_scope(scope.scope_id)}
        assert ledger["c-kept"] == second.ns_id and "c-late" not in ledger
        (retired,) = [n for n in await store.namespaces.namespaces_of_scope(scope.scope_id) if n.ns_id == first.ns_id]
        assert retired.state == "retired"  # cleared whole by the sweeper, copies and all

    async def test_one_runner_holds_an_erasure_until_it_releases_or_its_lease_lapses(self, store: StateStore) -> None:
        """Claims are a compare-and-set: a second runner is refused while the lease runs, renewing needs the
        lease, a released or lapsed lease can be taken, and a finished erasure is never claimed."""
        scope = await new_scope(store)
        rotation = await _rotation(store, scope.scope_id)
        a, b = "r" + "a" * 24, "r" + "b" * 24
        assert await store.erasures.claim_erasure(rotation, a, NOW + timedelta(seconds=10), NOW)
        assert await store.erasures.claim_erasure(rotation, a, NOW + timedelta(seconds=20), NOW)  # its own: kept
        assert not await store.erasures.claim_erasure(
            rotation, b, NOW + timedelta(seconds=10), NOW + timedelta(seconds=19)
        )
        assert not await store.erasures.renew_erasure(rotation, b, NOW + timedelta(seconds=30))
        assert await store.erasures.renew_erasure(rotation, a, NOW + timedelta(seconds=30))
        assert await store.erasures.claim_erasure(rotation, b, NOW + timedelta(seconds=40), NOW + timedelta(seconds=30))
        assert not await store.erasures.renew_erasure(rotation, a, NOW + timedelta(seconds=50))  # lapsed and taken
        await store.erasures.release_erasure(rotation, a)  # not a's to release: b keeps it
        assert not await store.erasures.claim_erasure(
            rotation, a, NOW + timedelta(seconds=50), NOW + timedelta(seconds=31)
        )
        await store.erasures.release_erasure(rotation, b)
        assert await store.erasures.claim_erasure(rotation, a, NOW + timedelta(seconds=50), NOW + timedelta(seconds=31))
        for state in ("fenced", "quiesced", "deleted", "verified"):
            await store.erasures.advance_erasure(rotation, state, NOW)
        await store.erasures.release_erasure(rotation, a)
        assert not await store.erasures.claim_erasure(
            rotation, b, NOW + timedelta(seconds=60), NOW + timedelta(seconds=60)
        )


class TestLineage:
    async def test_forgetting_an_old_id_erases_its_copy_too(self, store: StateStore) -> None:
        """After a switch the forgotten original's copy is tombstoned in the same step and joins the erasure."""
        scope = await new_scope(store)
        await save(store, scope.scope_id, "a")
        rotation = await _rotation(store, scope.scope_id)
        await store.rotations.freeze_namespace(scope.scope_id, rotation)
        staged = await _copied(store, scope.scope_id, rotation, "a")
        assert await store.rotations.switch_rotation(rotation, staged.ns_id, NOW) == "switched"
        forget = await store.erasures.create_erasure(scope.scope_id, "forget_one", ["a"], "rest", "subject", NOW)
        assert await store.lineage.tombstone_forgotten(scope.scope_id, forget.erasure_id, ["a"], LATER) == [
            "a",
            "c-a",
        ]
        assert (await store.erasures.get_erasure(forget.erasure_id)).entry_ids == ["a", "c-a"]  # type: ignore[union-attr]  # the erasure exists
        assert (
            await store.ledger.filter_live(scope.scope_id, await ns_of(store, scope.scope_id), ["c-a"], LATER) == set()
        )


class TestCandidates:
    async def test_only_scopes_with_something_to_remove_are_candidates(self, store: StateStore) -> None:
        """Expired before the cut-off, tombstoned, or legacy: candidates; live-only, frozen or disabled: not."""
        quiet, expired, forgotten, legacy, frozen = [await new_scope(store, f"!r{i}:example.org") for i in range(5)]
        for scope in (quiet, forgotten, frozen):
            await save(store, scope.scope_id, f"e-{scope.scope_id}")
        await save(store, expired.scope_id, f"e-{expired.scope_id}", created=-WEEK)  # expires at NOW
        await store.ledger.tombstone(forgotten.scope_id, [f"e-{forgotten.scope_id}"], NOW)
        await store.ledger.tombstone(frozen.scope_id, [f"e-{frozen.scope_id}"], NOW)
        await store.rotations.freeze_namespace(frozen.scope_id, await _rotation(store, frozen.scope_id))
        async with store.db.tx() as tx:
            await tx.execute("UPDATE namespaces SET salt = '' WHERE scope_id = $1", legacy.scope_id)
        found = await store.lineage.rotation_candidates(LATER, LATER, 100)
        assert set(found) == {expired.scope_id, forgotten.scope_id, legacy.scope_id}
        assert set(await store.lineage.rotation_candidates(LATER, NOW - timedelta(seconds=1), 100)) == {
            forgotten.scope_id,
            legacy.scope_id,
        }
        await store.scopes.withdraw(forgotten.scope_id, NOW)
        assert forgotten.scope_id not in await store.lineage.rotation_candidates(LATER, LATER, 100)
