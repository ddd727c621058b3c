"""Scopes, consent receipts and the generation fence."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from sidecar.reasons import Reason
from sidecar.state import StateError, StateStore
from tests.support.state import NOW, new_scope, ns_of

TRIPLE = ("@alice:example.org", "native", "team/helper", "control_room", "!room:example.org")


class TestCreateScope:
    async def test_new_scope_is_disabled_at_generation_zero(self, store: StateStore) -> None:
        """A freshly created scope collects nothing until consent is given."""
        scope, created = await store.scopes.create_scope(*TRIPLE, NOW)
        assert created is True
        assert (scope.enabled, scope.generation, scope.purpose, scope.consented_at) == (False, 0, None, None)
        assert re.fullmatch(r"s[0-9a-f]{24}", scope.scope_id)

    async def test_same_triple_returns_the_existing_scope(self, store: StateStore) -> None:
        """Creating the same triple twice yields one scope, reported as not new."""
        first, _ = await store.scopes.create_scope(*TRIPLE, NOW)
        again, created = await store.scopes.create_scope(*TRIPLE, NOW + timedelta(hours=1))
        assert (again.scope_id, created, again.created_at) == (first.scope_id, False, NOW)

    @pytest.mark.parametrize(
        ("index", "other"),
        [
            (0, "@alice:other.org"),
            (1, "appservice"),
            (2, "team/helper2"),
            (3, "cross_room"),
            (4, "!other:example.org"),
        ],
    )
    async def test_any_differing_element_is_a_different_scope(self, store: StateStore, index: int, other: str) -> None:
        """Principal, origin, agent, scope kind and room each separate scopes (appservice ≠ native)."""
        first, _ = await store.scopes.create_scope(*TRIPLE, NOW)
        changed = list(TRIPLE)
        changed[index] = other
        second, created = await store.scopes.create_scope(*changed, NOW)  # type: ignore[arg-type]  # malformed values on purpose
        assert created and second.scope_id != first.scope_id
        assert await store.scopes.find_scope(*TRIPLE) == first

    @pytest.mark.parametrize(
        ("index", "bad"),
        [
            (0, "@" + "a" * 250 + ":x.org"),
            (0, "@" + "é" * 127 + ":x"),
            (0, ""),
            (0, "@alice:example.org\n"),
            (0, "@alice\ud800:example.org"),
            (1, "Native"),
            (2, "n/" + "a" * 320),
            (3, "control room"),
            (4, "!" + "r" * 255),
        ],
    )
    async def test_unbounded_or_malformed_values_are_refused(self, store: StateStore, index: int, bad: str) -> None:
        """Values beyond their byte bound or shape never reach the database."""
        values = list(TRIPLE)
        values[index] = bad
        with pytest.raises(ValueError) as err:
            await store.scopes.create_scope(*values, NOW)  # type: ignore[arg-type]  # malformed values on purpose
        assert not bad or bad not in str(err.value)
        assert (await store.stats())["scopes"] == 0

    async def test_lookups_by_principal_and_agent(self, store: StateStore) -> None:
        """Offboarding finds every scope of a principal; agents report whether any scope is enabled."""
        a = await new_scope(store, "!a:example.org")
        b = await new_scope(store, "!b:example.org", granted=False)
        await store.scopes.create_scope(
            "@bob:example.org", "native", "team/other", "control_room", "!c:example.org", NOW
        )
        assert {s.scope_id for s in await store.scopes.scopes_for_principal("@alice:example.org")} == {
            a.scope_id,
            b.scope_id,
        }
        assert await store.scopes.has_enabled_scope("team/helper") is True
        assert await store.scopes.has_enabled_scope("team/other") is False
        assert await store.scopes.get_scope("not-a-scope-id") is None


class TestConsent:
    async def test_grant_enables_advances_and_records_a_receipt(self, store: StateStore) -> None:
        """Consent enables the scope, bumps the generation and leaves a matching receipt."""
        scope, _ = await store.scopes.create_scope(*TRIPLE, NOW)
        later = NOW + timedelta(minutes=5)
        granted, receipt = await store.scopes.grant(scope.scope_id, "remember preferences", "v3", later)
        assert (granted.enabled, granted.generation, granted.purpose, granted.policy_version) == (
            True,
            1,
            "remember preferences",
            "v3",
        )
        assert granted.consented_at == later
        assert (receipt.action, receipt.generation_after, receipt.purpose, receipt.policy_version, receipt.at) == (
            "grant",
            1,
            "remember preferences",
            "v3",
            later,
        )
        assert await store.scopes.get_scope(scope.scope_id) == granted

    async def test_withdraw_disables_advances_and_records_a_receipt(self, store: StateStore) -> None:
        """Withdrawal disables and bumps the generation in the same step, with a withdraw receipt."""
        scope = await new_scope(store)
        withdrawn, receipt = await store.scopes.withdraw(scope.scope_id, NOW)
        assert (withdrawn.enabled, withdrawn.generation) == (False, 2)
        assert (receipt.action, receipt.generation_after, receipt.purpose) == ("withdraw", 2, "remember preferences")
        assert [r.action for r in await store.scopes.receipts(scope.scope_id)] == ["grant", "withdraw"]

    async def test_disable_fences_without_a_receipt(self, store: StateStore) -> None:
        """The erasure/offboarding fence disables and advances but is not a consent change."""
        scope = await new_scope(store)
        disabled = await store.scopes.disable(scope.scope_id, NOW)
        assert (disabled.enabled, disabled.generation) == (False, 2)
        assert [r.action for r in await store.scopes.receipts(scope.scope_id)] == ["grant"]

    @pytest.mark.parametrize("op", ["grant", "withdraw", "disable"])
    async def test_unknown_scope_is_not_found(self, store: StateStore, op: str) -> None:
        """Consent changes on a scope that does not exist fail with not_found."""
        args = {
            "grant": ("s" + "0" * 24, "p", "v1", NOW),
            "withdraw": ("s" + "0" * 24, NOW),
            "disable": ("s" + "0" * 24, NOW),
        }[op]
        with pytest.raises(StateError) as err:
            await getattr(store.scopes, op)(*args)
        assert err.value.reason is Reason.NOT_FOUND

    @pytest.mark.parametrize("purpose", ["", "x" * 257, "two\nlines"])
    async def test_unbounded_purpose_is_refused(self, store: StateStore, purpose: str) -> None:
        """The purpose is operator-authored, printable and at most 256 bytes."""
        scope = await new_scope(store, granted=False)
        with pytest.raises(ValueError):
            await store.scopes.grant(scope.scope_id, purpose, "v1", NOW)
        assert (await store.scopes.get_scope(scope.scope_id)) == scope

    @pytest.mark.parametrize("sql", ["UPDATE receipts SET purpose = 'changed'", "DELETE FROM receipts"])
    async def test_receipts_are_append_only_in_the_database(self, store: StateStore, sql: str) -> None:
        """Even a direct statement cannot rewrite or remove consent evidence."""
        scope = await new_scope(store)
        with pytest.raises(StateError):
            async with store.db.tx() as tx:
                await tx.execute(sql)
        assert [r.purpose for r in await store.scopes.receipts(scope.scope_id)] == ["remember preferences"]


class TestBeginWrite:
    @pytest.mark.parametrize(
        ("granted", "withdrawn", "generation", "reason"),
        [
            (False, False, 0, Reason.CONSENT_DISABLED),
            (True, False, 0, Reason.STALE_GENERATION),
            (True, False, 2, Reason.STALE_GENERATION),
            (True, True, 1, Reason.STALE_GENERATION),
            (True, True, 2, Reason.CONSENT_DISABLED),
        ],
    )
    async def test_fence_refuses_disabled_and_stale_generations(
        self, store: StateStore, granted: bool, withdrawn: bool, generation: int, reason: Reason
    ) -> None:
        """A write is recorded only for an enabled scope at its current generation."""
        scope = await new_scope(store, granted=granted)
        if withdrawn:
            await store.scopes.withdraw(scope.scope_id, NOW)
        with pytest.raises(StateError) as err:
            await store.scopes.begin_write(scope.scope_id, generation, await ns_of(store, scope.scope_id), 30, NOW)
        assert err.value.reason is reason
        assert await store.scopes.inflight_count(scope.scope_id, NOW) == 0

    @pytest.mark.parametrize("scope_id", ["s" + "0" * 24, "mg1.bad", ""])
    async def test_unknown_scope_is_consent_missing(self, store: StateStore, scope_id: str) -> None:
        """A scope id that names no scope is refused as missing consent."""
        with pytest.raises(StateError) as err:
            await store.scopes.begin_write(scope_id, 1, await ns_of(store, scope_id), 30, NOW)
        assert err.value.reason is Reason.CONSENT_MISSING

    async def test_in_flight_writes_are_counted_until_ended_or_lapsed(self, store: StateStore) -> None:
        """Erasure sees unexpired in-flight writes per namespace; ended and lapsed ones drop out."""
        scope = await new_scope(store)
        short = await store.scopes.begin_write(scope.scope_id, 1, await ns_of(store, scope.scope_id), 10, NOW)
        long = await store.scopes.begin_write(scope.scope_id, 1, await ns_of(store, scope.scope_id), 60, NOW)
        assert short != long
        assert await store.scopes.inflight_count(scope.scope_id, NOW) == 2
        ns = await ns_of(store, scope.scope_id)
        assert await store.scopes.inflight_count(scope.scope_id, NOW, ns_id=ns) == 2
        assert await store.scopes.inflight_count(scope.scope_id, NOW, except_ns=ns) == 0
        assert await store.scopes.inflight_count(scope.scope_id, NOW + timedelta(seconds=10)) == 1
        await store.scopes.end_write(long)
        assert await store.scopes.inflight_count(scope.scope_id, NOW) == 1


class TestAdvanceGeneration:
    async def test_forget_all_fences_without_changing_consent(self, store: StateStore) -> None:
        """Advancing the generation refuses work under the old key while the scope stays enabled."""
        scope = await new_scope(store)
        advanced = await store.scopes.advance_generation(scope.scope_id, NOW)
        assert (advanced.enabled, advanced.generation) == (True, 2)
        assert [r.action for r in await store.scopes.receipts(scope.scope_id)] == ["grant"]
        with pytest.raises(StateError) as err:
            await store.scopes.begin_write(scope.scope_id, 1, await ns_of(store, scope.scope_id), 30, NOW)
        assert err.value.reason is Reason.STALE_GENERATION
        assert await store.scopes.begin_write(scope.scope_id, 2, await ns_of(store, scope.scope_id), 30, NOW)

    async def test_unknown_scope_is_not_found(self, store: StateStore) -> None:
        """Fencing a scope that does not exist fails with not_found."""
        with pytest.raises(StateError) as err:
            await store.scopes.advance_generation("s" + "0" * 24, NOW)
        assert err.value.reason is Reason.NOT_FOUND
