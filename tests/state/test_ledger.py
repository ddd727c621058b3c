"""The entry ledger: cap reservations, immutable expiry, live filtering, erasure bookkeeping."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sidecar.reasons import Reason
from sidecar.state import StateError, StateStore
from sidecar.state.types import WriteAsk
from tests.support.state import NOW, WEEK, new_scope, ns_of


async def save(
    store: StateStore, scope_id: str, entry_id: str, *, generation: int = 1, created: timedelta = timedelta(0)
) -> None:
    """Reserve one slot and fill it, the way the gateway records a save."""
    (slot,) = await store.ledger.reserve_entries(
        scope_id, generation, await ns_of(store, scope_id), 1, 100, NOW + created
    )
    await store.ledger.fill_entry(slot, entry_id, NOW + created, NOW + created + WEEK)


class TestReserveEntries:
    async def test_cap_is_never_exceeded_and_refusal_does_not_evict(self, store: StateStore) -> None:
        """Writes beyond the cap are refused whole; the existing entries stay live."""
        scope = await new_scope(store)
        assert (
            len(await store.ledger.reserve_entries(scope.scope_id, 1, await ns_of(store, scope.scope_id), 3, 5, NOW))
            == 3
        )
        with pytest.raises(StateError) as err:
            await store.ledger.reserve_entries(scope.scope_id, 1, await ns_of(store, scope.scope_id), 3, 5, NOW)
        assert err.value.reason is Reason.ENTRY_CAP_REACHED
        assert (
            len(await store.ledger.reserve_entries(scope.scope_id, 1, await ns_of(store, scope.scope_id), 2, 5, NOW))
            == 2
        )
        assert (await store.stats())["ledger_pending"] == 5

    @pytest.mark.parametrize(
        ("freed_by", "later"),
        [("release", timedelta(0)), ("tombstone", timedelta(0)), ("expiry", WEEK), ("lapse", timedelta(minutes=5))],
    )
    async def test_released_erased_expired_and_lapsed_entries_free_the_cap(
        self, store: StateStore, freed_by: str, later: timedelta
    ) -> None:
        """Only live entries and unexpired pending slots count toward the cap."""
        scope = await new_scope(store)
        slots = await store.ledger.reserve_entries(scope.scope_id, 1, await ns_of(store, scope.scope_id), 2, 2, NOW)
        with pytest.raises(StateError):
            await store.ledger.reserve_entries(scope.scope_id, 1, await ns_of(store, scope.scope_id), 1, 2, NOW)
        if freed_by == "release":
            await store.ledger.release_entries(slots)
        elif freed_by in ("tombstone", "expiry"):
            for i, slot in enumerate(slots):
                await store.ledger.fill_entry(slot, f"e{i}", NOW, NOW + WEEK)
            if freed_by == "tombstone":
                assert await store.ledger.tombstone(scope.scope_id, ["e0", "e1"], NOW) == 2
        ns = await ns_of(store, scope.scope_id)
        if later:
            with pytest.raises(StateError):
                await store.ledger.reserve_entries(scope.scope_id, 1, ns, 1, 2, NOW + later - timedelta(microseconds=1))
        assert len(await store.ledger.reserve_entries(scope.scope_id, 1, ns, 2, 2, NOW + later)) == 2

    @pytest.mark.parametrize(("generation", "reason"), [(0, Reason.STALE_GENERATION), (2, Reason.STALE_GENERATION)])
    async def test_reservation_is_fenced(self, store: StateStore, generation: int, reason: Reason) -> None:
        """A save under a stale generation cannot take a slot."""
        scope = await new_scope(store)
        with pytest.raises(StateError) as err:
            await store.ledger.reserve_entries(
                scope.scope_id, generation, await ns_of(store, scope.scope_id), 1, 100, NOW
            )
        assert err.value.reason is reason

    async def test_withdrawn_scope_cannot_reserve(self, store: StateStore) -> None:
        """After withdrawal the new generation is disabled, so no slot is handed out."""
        scope = await new_scope(store)
        await store.scopes.withdraw(scope.scope_id, NOW)
        with pytest.raises(StateError) as err:
            await store.ledger.reserve_entries(scope.scope_id, 2, await ns_of(store, scope.scope_id), 1, 100, NOW)
        assert err.value.reason is Reason.CONSENT_DISABLED


class TestFillEntry:
    async def test_a_slot_is_filled_once(self, store: StateStore) -> None:
        """The second fill of a slot fails and the first expiry stands."""
        scope = await new_scope(store)
        (slot,) = await store.ledger.reserve_entries(scope.scope_id, 1, await ns_of(store, scope.scope_id), 1, 100, NOW)
        await store.ledger.fill_entry(slot, "e1", NOW, NOW + WEEK)
        with pytest.raises(StateError):
            await store.ledger.fill_entry(slot, "e1", NOW, NOW + WEEK * 2)
        (entry,) = await store.ledger.entries_of_scope(scope.scope_id)
        assert entry.expires_at == NOW + WEEK

    async def test_a_lapsed_slot_cannot_be_filled(self, store: StateStore) -> None:
        """A slot whose lease ran out no longer counts toward the cap, so it cannot become an entry."""
        scope = await new_scope(store)
        ns = await ns_of(store, scope.scope_id)
        (slot,) = await store.ledger.reserve_entries(scope.scope_id, 1, ns, 1, 100, NOW, lease_s=30)
        with pytest.raises(StateError) as err:
            await store.ledger.fill_entry(slot, "e1", NOW + timedelta(seconds=30), NOW + WEEK)
        assert err.value.reason is Reason.INTERNAL_ERROR

    @pytest.mark.parametrize(
        "sql",
        [
            "UPDATE ledger SET expires_us = expires_us + 86400000000",
            "UPDATE ledger SET expires_us = NULL",
            "UPDATE ledger SET entry_id = 'other'",
            "UPDATE ledger SET created_us = created_us + 1",
        ],
    )
    async def test_filled_rows_are_immutable_in_the_database(self, store: StateStore, sql: str) -> None:
        """Hard expiry is never extended: even a direct statement cannot change a filled row."""
        scope = await new_scope(store)
        await save(store, scope.scope_id, "e1")
        with pytest.raises(StateError):
            async with store.db.tx() as tx:
                await tx.execute(sql)
        (entry,) = await store.ledger.entries_of_scope(scope.scope_id)
        assert (entry.entry_id, entry.created_at, entry.expires_at) == ("e1", NOW, NOW + WEEK)

    async def test_tombstoning_a_filled_row_is_allowed(self, store: StateStore) -> None:
        """Erasure bookkeeping columns stay writable after the row is filled."""
        scope = await new_scope(store)
        await save(store, scope.scope_id, "e1")
        await store.ledger.mark_physically_deleted(["e1"], NOW)
        await store.ledger.mark_verified(["e1"], NOW + timedelta(seconds=1))
        (entry,) = await store.ledger.entries_of_scope(scope.scope_id)
        assert (entry.physically_deleted_at, entry.verified_at) == (NOW, NOW + timedelta(seconds=1))


class TestLiveFiltering:
    async def test_only_known_current_unerased_unexpired_ids_pass(self, store: StateStore) -> None:
        """Search and list results keep only ids this scope's namespace may read right now."""
        scope = await new_scope(store)
        other = await new_scope(store, "!other:example.org")
        first = await ns_of(store, scope.scope_id)
        await save(store, scope.scope_id, "live")
        await save(store, scope.scope_id, "erased")
        await save(store, scope.scope_id, "old", created=-WEEK)
        await save(store, other.scope_id, "foreign")
        await store.ledger.tombstone(scope.scope_id, ["erased"], NOW)
        await store.scopes.withdraw(scope.scope_id, NOW)
        await store.scopes.grant(scope.scope_id, "remember preferences", "v1", NOW)
        second = await ns_of(store, scope.scope_id)
        await save(store, scope.scope_id, "newgen", generation=3)
        asked = ["live", "erased", "old", "foreign", "unknown", "newgen", "bad id!"]
        assert first != second
        assert await store.ledger.filter_live(scope.scope_id, first, asked, NOW) == {"live"}
        assert await store.ledger.filter_live(scope.scope_id, second, asked, NOW) == {"newgen"}
        assert await store.ledger.filter_live(scope.scope_id, first, ["live"], NOW + WEEK) == set()
        assert await store.ledger.live_count(scope.scope_id, NOW) == 2

    async def test_tombstone_touches_only_the_named_scope(self, store: StateStore) -> None:
        """One scope's erasure cannot tombstone another scope's entry, and repeats count zero."""
        scope = await new_scope(store)
        other = await new_scope(store, "!other:example.org")
        await save(store, scope.scope_id, "mine")
        await save(store, other.scope_id, "theirs")
        assert await store.ledger.tombstone(scope.scope_id, ["mine", "theirs"], NOW) == 1
        assert await store.ledger.tombstone(scope.scope_id, ["mine"], NOW) == 0
        other_ns = await ns_of(store, other.scope_id)
        assert await store.ledger.filter_live(other.scope_id, other_ns, ["theirs"], NOW) == {"theirs"}

    async def test_pages_walk_every_live_entry_in_order(self, store: StateStore) -> None:
        """Inspect pages are ordered by creation time and id, without gaps or repeats."""
        scope = await new_scope(store)
        ids = [f"e{i}" for i in range(7)]
        for i, entry_id in enumerate(reversed(ids)):
            await save(store, scope.scope_id, entry_id, created=timedelta(seconds=i // 2))
        await store.ledger.tombstone(scope.scope_id, ["e3"], NOW)
        seen, cursor = [], None
        for _ in range(10):
            page = await store.ledger.live_entries(scope.scope_id, NOW + timedelta(seconds=5), cursor, 2)
            if not page:
                break
            seen += page
            cursor = page[-1].entry_id
        keys = [(e.created_at, e.entry_id) for e in seen]
        assert keys == sorted(keys) and len(seen) == 6 and "e3" not in {e.entry_id for e in seen}
        assert await store.ledger.live_entries(scope.scope_id, NOW, "unknown", 2) == []

    async def test_entries_of_scope_includes_erased_and_expired(self, store: StateStore) -> None:
        """Erasure and evidence see every entry the scope ever had, not just live ones."""
        scope = await new_scope(store)
        await save(store, scope.scope_id, "a")
        await save(store, scope.scope_id, "b", created=-WEEK)
        await store.ledger.tombstone(scope.scope_id, ["a"], NOW)
        await store.ledger.reserve_entries(scope.scope_id, 1, await ns_of(store, scope.scope_id), 1, 100, NOW)
        assert sorted(e.entry_id for e in await store.ledger.entries_of_scope(scope.scope_id)) == ["a", "b"]


class TestSweep:
    async def test_expired_entries_are_listed_until_physically_deleted(self, store: StateStore) -> None:
        """The sweeper finds entries at or past expiry and stops seeing them once deleted."""
        scope = await new_scope(store)
        await save(store, scope.scope_id, "old", created=-WEEK)
        await save(store, scope.scope_id, "older", created=-WEEK - timedelta(hours=1))
        await save(store, scope.scope_id, "fresh")
        due = await store.ledger.expired_unswept(NOW, 10)
        assert [e.entry_id for e in due] == ["older", "old"]
        await store.ledger.mark_physically_deleted(["older"], NOW)
        assert [e.entry_id for e in await store.ledger.expired_unswept(NOW, 10)] == ["old"]
        assert [e.entry_id for e in await store.ledger.expired_unswept(NOW, 0)] == []

    async def test_retired_namespaces_are_listed_until_cleared(self, store: StateStore) -> None:
        """Namespaces a scope can never write again are found for the sweeper until marked cleared."""
        scope = await new_scope(store)
        live = await new_scope(store, "!live:example.org")
        first = await ns_of(store, scope.scope_id)
        await save(store, scope.scope_id, "old-gen")
        await save(store, live.scope_id, "current")
        await store.scopes.withdraw(scope.scope_id, NOW)
        await store.scopes.grant(scope.scope_id, "remember preferences", "v1", NOW)
        second = await ns_of(store, scope.scope_id)
        assert [n.ns_id for n in await store.namespaces.sweepable_namespaces(NOW, 10)] == [first]
        await store.namespaces.mark_cleared([first], NOW)
        # Cleared, yet the ledger still knows a row there (a late write): it is swept again.
        assert [n.ns_id for n in await store.namespaces.sweepable_namespaces(NOW, 10)] == [first]
        await store.ledger.mark_physically_deleted(["old-gen"], NOW)
        assert await store.namespaces.sweepable_namespaces(NOW, 10) == []
        await store.scopes.withdraw(scope.scope_id, NOW)
        assert [n.ns_id for n in await store.namespaces.sweepable_namespaces(NOW, 10)] == [second]
        states = {n.ns_id: n.state for n in await store.namespaces.namespaces_of_scope(scope.scope_id)}
        assert states == {first: "cleared", second: "retired"}


class TestAdmitSave:
    """A save's admission counts, checks the cap and writes its slots and in-flight record (on
    PostgreSQL in one statement), or writes nothing."""

    async def test_a_batch_fits_whole_or_writes_nothing(self, store: StateStore) -> None:
        scope = await new_scope(store)

        async def admit(n: int) -> tuple[int, str | None, Reason | None, int]:
            adm = await store.admission.admit(
                scope.scope_id, scope.generation, lambda _scope, _window: [], NOW, write=WriteAsk(n, 3, 600)
            )
            return len(adm.slots), adm.op_id and "op", adm.blocked, adm.live_count

        assert await admit(2) == (2, "op", None, 0)
        assert await admit(2) == (0, None, Reason.ENTRY_CAP_REACHED, 0)
        stats = await store.stats()
        assert (stats["ledger_pending"], stats["inflight"]) == (2, 1)
        assert await admit(1) == (1, "op", None, 0)
        assert await admit(1) == (0, None, Reason.ENTRY_CAP_REACHED, 0)

    async def test_the_live_count_is_reported_up_to_the_cap_plus_one(self, store: StateStore) -> None:
        scope = await new_scope(store)
        for i in range(3):
            await save(store, scope.scope_id, f"e{i}")
        adm = await store.admission.admit(
            scope.scope_id, scope.generation, lambda _scope, _window: [], NOW, write=WriteAsk(1, 1, 600)
        )
        assert (adm.live_count, adm.blocked, adm.slots) == (2, Reason.ENTRY_CAP_REACHED, [])
        adm = await store.admission.admit(
            scope.scope_id, scope.generation, lambda _scope, _window: [], NOW, write=WriteAsk(1, 4, 600)
        )
        assert (adm.live_count, adm.blocked, len(adm.slots)) == (3, None, 1)


class TestFinishWrite:
    """A save's finish binds its slot and ends its in-flight record only in the live namespace."""

    async def _admitted(self, store: StateStore) -> tuple[str, str, str, str]:
        scope = await new_scope(store)
        adm = await store.admission.admit(
            scope.scope_id, scope.generation, lambda _scope, _window: [], NOW, write=WriteAsk(1, 100, 600)
        )
        assert adm.op_id is not None and adm.scope is not None and adm.scope.namespace is not None
        return scope.scope_id, adm.scope.namespace.ns_id, adm.op_id, adm.slots[0]

    async def test_in_the_live_namespace_the_record_ends(self, store: StateStore) -> None:
        scope_id, ns_id, op_id, slot = await self._admitted(store)
        assert await store.admission.finish_write(op_id, scope_id, ns_id, [(slot, "e1", NOW, NOW + WEEK)])
        assert (await store.stats())["inflight"] == 0
        assert [e.entry_id for e in await store.ledger.entries_of_scope(scope_id)] == ["e1"]

    async def test_after_a_withdrawal_the_record_stays_for_the_undo(self, store: StateStore) -> None:
        scope_id, ns_id, op_id, slot = await self._admitted(store)
        await store.scopes.withdraw(scope_id, NOW)
        assert not await store.admission.finish_write(op_id, scope_id, ns_id, [(slot, "e1", NOW, NOW + WEEK)])
        # SECURITY: the withdrawal's erasure waits on this record until the write is undone.
        assert (await store.stats())["inflight"] == 1

    async def test_a_record_already_gone_in_the_live_namespace_still_finishes(self, store: StateStore) -> None:
        scope_id, ns_id, op_id, slot = await self._admitted(store)
        await store.scopes.end_write(op_id)
        assert await store.admission.finish_write(op_id, scope_id, ns_id, [(slot, "e1", NOW, NOW + WEEK)])
        assert [e.entry_id for e in await store.ledger.entries_of_scope(scope_id)] == ["e1"]

    async def test_a_batch_fills_every_slot_and_ends_its_record_once(self, store: StateStore) -> None:
        scope = await new_scope(store)
        adm = await store.admission.admit(
            scope.scope_id, scope.generation, lambda _scope, _window: [], NOW, write=WriteAsk(3, 100, 600)
        )
        assert adm.op_id is not None and adm.scope is not None and adm.scope.namespace is not None
        fills = [(slot, f"e{i}", NOW, NOW + WEEK) for i, slot in enumerate(adm.slots)]
        assert await store.admission.finish_write(adm.op_id, scope.scope_id, adm.scope.namespace.ns_id, fills)
        assert (await store.stats())["inflight"] == 0
        assert sorted(e.entry_id for e in await store.ledger.entries_of_scope(scope.scope_id)) == ["e0", "e1", "e2"]

    async def test_a_slot_that_cannot_fill_fails_and_keeps_the_record(self, store: StateStore) -> None:
        """A slot already filled (or gone) is an internal error, and the in-flight record stays: the
        erasure fence never loses a write whose outcome memgov did not record."""
        scope_id, ns_id, op_id, slot = await self._admitted(store)
        assert await store.admission.finish_write(op_id, scope_id, ns_id, [(slot, "e1", NOW, NOW + WEEK)])
        scope = await store.scopes.get_scope(scope_id)
        assert scope is not None
        adm = await store.admission.admit(
            scope_id, scope.generation, lambda _scope, _window: [], NOW, write=WriteAsk(1, 100, 600)
        )
        assert adm.op_id is not None
        with pytest.raises(StateError) as err:
            await store.admission.finish_write(
                adm.op_id, scope_id, ns_id, [(adm.slots[0], "e2", NOW, NOW + WEEK), (slot, "e3", NOW, NOW + WEEK)]
            )
        assert err.value.reason is Reason.INTERNAL_ERROR
        assert (await store.stats())["inflight"] == 1
        assert "e3" not in {e.entry_id for e in await store.ledger.entries_of_scope(scope_id)}
