"""Forget one, forget all and off through the control API over the REST adapter (SPEC R-6, D4)."""

from __future__ import annotations

import pytest

from sidecar.control.client import ControlError
from sidecar.dev.devstack import DbFault
from tests.support.harness import ALICE, BOB, BOB_ROOM, Harness
from tests.support.sentinel import capture_sinks, make_sentinel


class TestForgetOne:
    @pytest.mark.kagent
    async def test_the_entry_is_unreadable_at_once_and_pending_until_its_namespace_is_cleared(self, h: Harness) -> None:
        """REST cannot delete one row: the evidence says so until forget-all clears the namespace, then complete."""
        scope_id = await h.scope()
        doomed, kept = await h.saved(scope_id, "likes green tea"), await h.saved(scope_id, "lives in Lisbon")
        record = await h.client().forget(scope_id, doomed)
        assert (record["state"], record["kind"], record["physical_deletion"]) == (
            "verified",
            "forget_one",
            "pending_namespace_clear",
        )
        assert record["verification"] == {
            "result": "passed",
            "readable_through_memgov": False,
            "physically_absent": False,
            "rechecked_after_possible_write": False,
        }
        assert "pending_namespace_clear" in record["residuals"]
        assert [e["id"] for e in (await h.client().inspect(scope_id, h.context()))["entries"]] == [kept]
        assert (await h.client().status(scope_id))["entries"]["pending_physical_deletion"] == 1
        await h.client().confirm_and_run(scope_id, "forget-all")
        later = await h.client().erasure(record["erasure_id"])
        assert (later["physical_deletion"], later["verification"]["physically_absent"]) == ("complete", True)
        assert await h.rows(scope_id) == []

    @pytest.mark.parametrize("which", ["unknown", "other_scope", "already_forgotten"])
    async def test_only_a_live_entry_of_this_scope_can_be_forgotten(self, sh: Harness, which: str) -> None:
        """An id the ledger does not hold for this scope (or holds as erased) is not_found."""
        scope_id = await sh.scope()
        mine = await sh.saved(scope_id, "likes green tea")
        bobs_scope = await sh.scope(BOB, BOB_ROOM)
        bobs = await sh.saved(bobs_scope, "bob's fact")
        if which == "already_forgotten":
            await sh.client().forget(scope_id, mine)
        target = {"unknown": "no-such-entry", "other_scope": bobs, "already_forgotten": mine}[which]
        with pytest.raises(ControlError) as err:
            await sh.client().forget(scope_id, target)
        assert (err.value.status, err.value.reason) == (404, "not_found")
        assert len(await sh.rows(bobs_scope)) == 1


class TestConfirmation:
    @pytest.mark.parametrize("action", ["forget-all", "off"])
    async def test_the_first_call_only_issues_a_token(self, h: Harness, action: str) -> None:
        """Without confirmation nothing is erased or disabled; the answer is 202 with a token and its expiry."""
        scope_id = await h.scope()
        await h.saved(scope_id, "likes green tea")
        status, issued = await h.client().call("POST", f"/v1/scopes/{scope_id}/{action}")
        assert status == 202 and issued["action"] == action.replace("-", "_") and issued["confirm_token"]
        assert (await h.client().status(scope_id))["enabled"] is True
        assert len(await h.rows(scope_id)) == 1

    @pytest.mark.parametrize("misuse", ["reused", "other_action", "other_subject", "other_scope", "expired", "made_up"])
    async def test_a_token_works_once_for_its_subject_scope_and_action(self, sh: Harness, misuse: str) -> None:
        """Tokens are single use, expire, and are bound to subject, scope and action."""
        scope_id = await sh.scope()
        bobs_scope = await sh.scope(BOB, BOB_ROOM)
        api = sh.client()
        token = (await api.confirmed(scope_id, "forget-all"))["confirm_token"]
        if misuse == "reused":
            await api.confirmed(scope_id, "forget-all", token)
            call = api.confirmed(scope_id, "forget-all", token)
        elif misuse == "other_action":
            call = api.confirmed(scope_id, "off", token)
        elif misuse == "other_subject":
            bob_token = (await sh.client(sh.subject_token(BOB)).confirmed(bobs_scope, "forget-all"))["confirm_token"]
            call = sh.client(sh.subject_token(BOB)).confirmed(bobs_scope, "forget-all", token)
            assert bob_token != token
        elif misuse == "other_scope":
            other = await sh.scope(ALICE, "!second:example.org")
            call = api.confirmed(other, "forget-all", token)
        elif misuse == "expired":
            sh.advance(301)
            call = sh.client().confirmed(scope_id, "forget-all", token)
        else:
            call = api.confirmed(scope_id, "forget-all", "made-up-token")
        with pytest.raises(ControlError) as err:
            await call
        assert (err.value.status, err.value.reason) == (409, "confirmation_required")


class TestForgetAllAndOff:
    @pytest.mark.kagent
    async def test_forget_all_keeps_consent_but_fences_the_old_generation(self, h: Harness) -> None:
        """Everything is erased and verified; the scope stays enabled at a new generation; old keys are stale."""
        scope_id = await h.scope()
        for text in ("likes green tea", "lives in Lisbon"):
            await h.saved(scope_id, text)
        record = await h.client().confirm_and_run(scope_id, "forget-all")
        assert (record["state"], record["physical_deletion"], len(record["entries"])) == ("verified", "complete", 2)
        assert all(e["physically_deleted_at"] and e["verified_at"] for e in record["entries"])
        status = await h.client().status(scope_id)
        assert (status["enabled"], status["generation"], status["entries"]["live"]) == (True, 2, 0)
        assert await h.rows(scope_id) == []
        stale_status, stale = await h.save(scope_id, "late save", generation=1)
        assert (stale_status, stale["error"]) == (403, "stale_generation")
        assert (await h.save(scope_id, "new memory"))[0] == 201

    @pytest.mark.kagent
    async def test_off_disables_before_clearing(self, h: Harness) -> None:
        """Off: the scope is disabled at a new generation (fenced step) and every row is gone after."""
        scope_id = await h.scope()
        await h.saved(scope_id, "likes green tea")
        record = await h.client().confirm_and_run(scope_id, "off")
        assert [s["state"] for s in record["steps"]] == ["requested", "fenced", "quiesced", "deleted", "verified"]
        status = await h.client().status(scope_id)
        assert (status["enabled"], status["generation"]) == (False, 2)
        assert await h.rows(scope_id) == []
        assert (await h.save(scope_id, "after off", generation=2))[1]["error"] == "consent_disabled"
        assert not await h.parts.store.scopes.receipts(scope_id) or all(
            r.action == "grant" for r in await h.parts.store.scopes.receipts(scope_id)
        )


class TestFailures:
    async def test_a_failed_erasure_leaves_the_scope_disabled_and_blocks_consent(self, h: Harness) -> None:
        """kagent failing the delete: 500 erasure_failed with the evidence location, scope disabled, no re-grant."""
        scope_id = await h.scope()
        await h.saved(scope_id, "likes green tea")
        h.stack.store.fault = DbFault(ops=frozenset({"delete"}))
        api = h.client()
        token = (await api.confirmed(scope_id, "forget-all"))["confirm_token"]
        with pytest.raises(ControlError) as err:
            await api.confirmed(scope_id, "forget-all", token)
        assert (err.value.status, err.value.reason) == (500, "erasure_failed")
        assert err.value.location is not None
        record = await api.erasure(err.value.location.rsplit("/", 1)[1])
        assert (record["state"], record["failure_reason"], record["physical_deletion"]) == (
            "failed",
            "erasure_failed",
            "incomplete",
        )
        assert (await api.status(scope_id))["enabled"] is False
        with pytest.raises(ControlError) as regrant:
            await api.grant(scope_id, "remember my preferences", "v1")
        assert (regrant.value.status, regrant.value.reason) == (409, "erasure_failed")
        h.stack.store.fault = None
        retried = await api.confirm_and_run(scope_id, "off")
        assert retried["state"] == "verified" and await h.rows(scope_id) == []
        assert (await api.grant(scope_id, "remember my preferences", "v2"))["enabled"] is True

    async def test_kagent_down_fails_a_withdrawal_but_consent_is_gone(self, sh: Harness) -> None:
        """If kagent cannot be reached the withdrawal still disables; the erasure fails with upstream_unavailable."""
        scope_id = await sh.scope()
        await sh.saved(scope_id, "likes green tea")
        await sh.stack.stop()
        with pytest.raises(ControlError) as err:
            await sh.client().withdraw(scope_id)
        assert (err.value.status, err.value.reason) == (502, "upstream_unavailable")
        scope = await sh.parts.store.scopes.get_scope(scope_id)
        assert scope is not None and not scope.enabled
        assert [r.action for r in await sh.parts.store.scopes.receipts(scope_id)] == ["grant", "withdraw"]


class TestBoundary:
    async def test_erasure_paths_leak_no_content(self, h: Harness) -> None:
        """Stored text and kagent's failing error text never reach logs, metrics, audit rows or answers."""
        stored, upstream = make_sentinel("erase"), make_sentinel("kagent")
        with capture_sinks() as sinks:
            scope_id = await h.scope()
            entry = await h.saved(scope_id, f"secret {stored}")
            await h.saved(scope_id, f"second {stored}")
            answers = [await h.client().forget(scope_id, entry), await h.client().status(scope_id)]
            h.stack.store.fault = DbFault(message=f"boom {upstream} {stored}", ops=frozenset({"delete"}))
            with pytest.raises(ControlError) as err:
                await h.client().confirm_and_run(scope_id, "forget-all")
            h.stack.store.fault = None
            answers.append(await h.client().erasure(err.value.location.rsplit("/", 1)[1]))  # type: ignore[union-attr]  # the refusal carries the evidence's location
            answers.append((await h.client().withdraw(scope_id))["erasure"])
            for answer in answers:
                sinks.record(200, [], repr(answer))
            sinks.record(err.value.status, [], f"{err.value.reason} {err.value.decision_id}")
            sinks.extra.append(await h.audit_text())
        assert answers[-1]["state"] == "verified" and await h.rows(scope_id) == []
        sinks.assert_clean(stored, upstream)
