"""Operator offboarding (SPEC R-7) and erasure evidence (R-15) through the control API."""

from __future__ import annotations

import pytest

from sidecar.control.client import ControlError
from tests.support.harness import ALICE, BOB, BOB_ROOM, Harness


class TestOffboard:
    @pytest.mark.kagent
    async def test_every_scope_of_the_principal_is_disabled_erased_and_verified(self, h: Harness) -> None:
        """Two scopes of Alice end disabled and empty with one verified erasure each; Bob's scope is untouched."""
        first, second = await h.scope(), await h.scope(ALICE, "!second:example.org")
        bobs = await h.scope(BOB, BOB_ROOM)
        for scope_id in (first, second, bobs):
            await h.saved(scope_id, "a fact")
        result = await h.client(h.operator_token()).offboard(ALICE)
        assert result["complete"] is True
        assert {(s["scope_id"], s["agent"], s["state"], s["physical_deletion"]) for s in result["scopes"]} == {
            (first, "team/helper", "verified", "complete"),
            (second, "team/helper", "verified", "complete"),
        }
        for scope_id in (first, second):
            assert await h.rows(scope_id) == []
            assert (await h.parts.store.scopes.get_scope(scope_id)).enabled is False
        assert len(await h.rows(bobs)) == 1 and (await h.parts.store.scopes.get_scope(bobs)).enabled is True

    async def test_every_scope_is_fenced_before_any_deletion(self, sh: Harness) -> None:
        """Each scope's fenced step precedes the first deleted step of any scope (disable first, R-7)."""
        scope_ids = [await sh.scope(ALICE, f"!room{i}:example.org") for i in range(3)]
        result = await sh.client(sh.operator_token()).offboard(ALICE)
        records = [await sh.client(sh.operator_token()).erasure(s["erasure_id"]) for s in result["scopes"]]
        fenced = max(step["at"] for r in records for step in r["steps"] if step["state"] == "fenced")
        deleted = min(step["at"] for r in records for step in r["steps"] if step["state"] == "deleted")
        assert len(records) == len(scope_ids) and fenced <= deleted

    @pytest.mark.parametrize("mxid", ["@nobody:example.org", "@bridged/user=x:example.org"])
    async def test_a_principal_without_scopes_is_complete_and_empty(self, sh: Harness, mxid: str) -> None:
        """Offboarding someone memgov never saw answers complete with no scopes (any localpart character)."""
        assert await sh.client(sh.operator_token()).offboard(mxid) == {"complete": True, "scopes": []}

    @pytest.mark.parametrize(
        ("who", "mxid", "status", "reason"),
        [
            ("subject", ALICE, 403, "route_denied"),
            ("none", ALICE, 401, "auth_required"),
            ("operator", "alice", 400, "principal_invalid"),
        ],
    )
    async def test_only_operators_offboard_complete_mxids(
        self, sh: Harness, who: str, mxid: str, status: int, reason: str
    ) -> None:
        """A subject token is not enough, and a localpart is not a principal."""
        scope_id = await sh.scope()
        token = {"subject": sh.subject_token(), "none": None, "operator": sh.operator_token()}[who]
        api = sh.client()
        api.token = token
        with pytest.raises(ControlError) as err:
            await api.offboard(mxid)
        assert (err.value.status, err.value.reason) == (status, reason)
        assert (await sh.parts.store.scopes.get_scope(scope_id)).enabled is True


class TestEvidence:
    @pytest.mark.kagent
    async def test_evidence_is_content_free_and_fetchable_by_subject_and_operator(self, h: Harness) -> None:
        """Ids, steps with times, adapter, verification and residuals; the stored text is nowhere in it."""
        scope_id = await h.scope()
        entry = await h.saved(scope_id, "likes green tea")
        record = await h.client().forget(scope_id, entry)
        by_operator = await h.client(h.operator_token()).erasure(record["erasure_id"])
        assert by_operator == await h.client().erasure(record["erasure_id"]) == record
        assert record["format"] == "memgov.erasure.v1" and record["adapter"] == "rest"
        assert [e["entry_id"] for e in record["entries"]] == [entry]
        assert {"database_backups", "delivered_inspect_pages", "rows_written_around_memgov"} <= set(record["residuals"])
        assert "green tea" not in repr(record)

    @pytest.mark.parametrize(
        ("who", "erasure", "status", "reason"),
        [
            ("bob", "real", 403, "not_subject"),
            ("alice", "e000000000000000000000000", 404, "not_found"),
            ("alice", "bad id!", 404, "not_found"),
        ],
    )
    async def test_evidence_is_private_to_subject_and_operators(
        self, sh: Harness, who: str, erasure: str, status: int, reason: str
    ) -> None:
        """Another subject cannot read it; unknown ids are not_found."""
        scope_id = await sh.scope()
        record = await sh.client().confirm_and_run(scope_id, "forget-all")
        token = sh.subject_token(BOB) if who == "bob" else sh.subject_token()
        with pytest.raises(ControlError) as err:
            await sh.client(token).erasure(record["erasure_id"] if erasure == "real" else erasure)
        assert (err.value.status, err.value.reason) == (status, reason)
