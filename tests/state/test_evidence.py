"""Audit records and crash-resumable erasure records."""

from __future__ import annotations

from datetime import timedelta

import pytest

from sidecar.reasons import Reason
from sidecar.state import StateError, StateStore
from tests.support.state import NOW, new_scope

PATH = ["fenced", "quiesced", "deleted", "verified"]


class TestAudit:
    async def test_records_are_content_free_and_newest_first(self, store: StateStore) -> None:
        """Audit rows carry a kind, a reason code, ids, a revision and a time — nothing else."""
        scope = await new_scope(store)
        await store.audit_log.audit("consent", "allowed", scope_id=scope.scope_id, policy_revision="ab12", now=NOW)
        await store.audit_log.audit(
            "denial",
            "stale_generation",
            decision_id="d_0123",
            operation="memory.save",
            scope_id=scope.scope_id,
            now=NOW + timedelta(seconds=1),
        )
        rows = await store.audit_log.audit_rows(scope_id=scope.scope_id)
        assert [(r["kind"], r["reason"], r["at"]) for r in rows] == [
            ("denial", "stale_generation", NOW + timedelta(seconds=1)),
            ("consent", "allowed", NOW),
        ]
        assert set(rows[0]) == {
            "at",
            "kind",
            "reason",
            "decision_id",
            "scope_id",
            "entry_id",
            "erasure_id",
            "operation",
            "policy_revision",
        }

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"kind": "consent", "reason": "the user said: my secret"},
            {"kind": "free text kind", "reason": "allowed"},
            {"kind": "consent", "reason": "allowed", "entry_id": "id with spaces"},
            {"kind": "consent", "reason": "allowed", "operation": "x" * 65},
        ],
    )
    async def test_free_text_is_refused(self, store: StateStore, kwargs: dict[str, str]) -> None:
        """Anything that is not a code or an opaque id cannot enter the audit trail."""
        with pytest.raises(ValueError):
            await store.audit_log.audit(now=NOW, **kwargs)  # type: ignore[arg-type]  # malformed values on purpose
        assert await store.audit_log.audit_rows() == []

    async def test_purge_removes_only_records_past_retention(self, store: StateStore) -> None:
        """The audit retention window deletes old records and keeps recent ones."""
        for days in (40, 31, 29):
            await store.audit_log.audit("denial", "rate_limited", now=NOW - timedelta(days=days))
        assert await store.audit_log.purge_audit(NOW - timedelta(days=30)) == 2
        assert [r["at"] for r in await store.audit_log.audit_rows()] == [NOW - timedelta(days=29)]


class TestErasure:
    async def test_an_erasure_walks_its_states_and_keeps_every_step(self, store: StateStore) -> None:
        """Each step is recorded with its time; a verified erasure is finished."""
        scope = await new_scope(store)
        erasure = await store.erasures.create_erasure(
            scope.scope_id, "forget_one", ["e2", "e1"], "kagent-db", "subject", NOW
        )
        assert (erasure.state, erasure.entry_ids, erasure.steps) == ("requested", ["e1", "e2"], [("requested", NOW)])
        for i, state in enumerate(PATH, start=1):
            erasure = await store.erasures.advance_erasure(erasure.erasure_id, state, NOW + timedelta(seconds=i))
        assert erasure.state == "verified" and erasure.updated_at == NOW + timedelta(seconds=4)
        assert [s for s, _ in erasure.steps] == ["requested", *PATH]
        assert await store.erasures.get_erasure(erasure.erasure_id) == erasure
        assert await store.erasures.unfinished_erasures() == []

    @pytest.mark.parametrize(
        ("done", "target"),
        [(0, "quiesced"), (0, "deleted"), (1, "fenced"), (2, "verified"), (4, "deleted"), (4, "fenced")],
    )
    async def test_states_cannot_be_skipped_repeated_or_left(self, store: StateStore, done: int, target: str) -> None:
        """Fence → quiesce → delete → verify is the only order; a finished erasure stays finished."""
        scope = await new_scope(store)
        erasure = await store.erasures.create_erasure(scope.scope_id, "forget_all", [], "rest", "subject", NOW)
        for state in PATH[:done]:
            await store.erasures.advance_erasure(erasure.erasure_id, state, NOW)
        with pytest.raises(StateError) as err:
            await store.erasures.advance_erasure(erasure.erasure_id, target, NOW)
        assert err.value.reason is Reason.INTERNAL_ERROR
        assert len((await store.erasures.get_erasure(erasure.erasure_id)).steps) == done + 1  # type: ignore[union-attr]  # the erasure exists

    async def test_failure_is_terminal_and_carries_a_reason_code(self, store: StateStore) -> None:
        """A failed erasure records a code-only reason and is no longer resumed."""
        scope = await new_scope(store)
        erasure = await store.erasures.create_erasure(scope.scope_id, "off", [], "rest", "subject", NOW)
        with pytest.raises(ValueError):
            await store.erasures.advance_erasure(erasure.erasure_id, "failed", NOW, failure_reason="kagent said: boom")
        with pytest.raises(ValueError):
            await store.erasures.advance_erasure(erasure.erasure_id, "failed", NOW)
        failed = await store.erasures.advance_erasure(
            erasure.erasure_id, "failed", NOW, failure_reason="verification_failed"
        )
        assert (failed.state, failed.failure_reason) == ("failed", "verification_failed")
        assert await store.erasures.unfinished_erasures() == []

    async def test_unfinished_erasures_are_listed_oldest_first(self, store: StateStore) -> None:
        """After a crash the engine resumes every erasure that is neither verified nor failed."""
        scope = await new_scope(store)
        first = await store.erasures.create_erasure(scope.scope_id, "off", [], "rest", "subject", NOW)
        second = await store.erasures.create_erasure(
            scope.scope_id, "offboard", [], "rest", "operator", NOW + timedelta(1)
        )
        done = await store.erasures.create_erasure(scope.scope_id, "off", [], "rest", "subject", NOW)
        await store.erasures.advance_erasure(first.erasure_id, "fenced", NOW)
        for state in PATH:
            await store.erasures.advance_erasure(done.erasure_id, state, NOW)
        assert [(e.erasure_id, e.state) for e in await store.erasures.unfinished_erasures()] == [
            (first.erasure_id, "fenced"),
            (second.erasure_id, "requested"),
        ]
        assert await store.erasures.get_erasure("e" + "0" * 24) is None

    async def test_a_scope_lists_its_own_erasures_newest_first(self, store: StateStore) -> None:
        """Status shows the scope's erasure history and nothing from other scopes."""
        scope = await new_scope(store)
        other = await new_scope(store, "!other:example.org")
        older = await store.erasures.create_erasure(scope.scope_id, "forget_one", ["e1"], "rest", "subject", NOW)
        newer = await store.erasures.create_erasure(
            scope.scope_id, "off", [], "rest", "subject", NOW + timedelta(seconds=1)
        )
        await store.erasures.create_erasure(other.scope_id, "off", [], "rest", "subject", NOW)
        assert [e.erasure_id for e in await store.erasures.erasures_of_scope(scope.scope_id)] == [
            newer.erasure_id,
            older.erasure_id,
        ]
        assert [e.erasure_id for e in await store.erasures.erasures_of_scope(scope.scope_id, limit=1)] == [
            newer.erasure_id
        ]
