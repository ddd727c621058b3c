"""Every erasure path over HTTP with the kagent-db adapter on a real PostgreSQL (SPEC D4 primary adapter)."""

from __future__ import annotations

import asyncpg
import pytest

from sidecar.control.client import ControlError
from tests.support.harness import ALICE, Harness


class TestKagentDbErasure:
    @pytest.mark.kagent
    async def test_forget_one_deletes_the_row_itself_and_verifies_it(self, kdb: Harness) -> None:
        """Exact: the one row is gone from kagent at once, its neighbour stays, evidence is complete."""
        scope_id = await kdb.scope()
        doomed, kept = await kdb.saved(scope_id, "likes green tea"), await kdb.saved(scope_id, "lives in Lisbon")
        record = await kdb.client().forget(scope_id, doomed)
        assert (record["adapter"], record["state"], record["physical_deletion"]) == (
            "kagent-db",
            "verified",
            "complete",
        )
        assert record["verification"] == {
            "result": "passed",
            "readable_through_memgov": False,
            "physically_absent": True,
            "rechecked_after_possible_write": False,
        }
        (entry,) = record["entries"]
        assert entry["physically_deleted_at"] and entry["verified_at"]
        assert "pending_namespace_clear" not in record["residuals"]
        assert [r.id for r in await kdb.rows(scope_id)] == [kept]
        assert (await kdb.client().status(scope_id))["entries"]["pending_physical_deletion"] == 0

    @pytest.mark.kagent
    @pytest.mark.parametrize("action", ["forget-all", "off", "withdraw", "offboard"])
    async def test_whole_scope_erasures_leave_no_row(self, kdb: Harness, action: str) -> None:
        """Forget-all, off, withdrawal and offboarding all end verified with zero rows in kagent's table."""
        scope_id = await kdb.scope()
        for text in ("likes green tea", "lives in Lisbon", "has a cat"):
            await kdb.saved(scope_id, text)
        api = kdb.client()
        if action == "withdraw":
            record = (await api.withdraw(scope_id))["erasure"]
        elif action == "offboard":
            (result,) = (await kdb.client(kdb.operator_token()).offboard(ALICE))["scopes"]
            record = await api.erasure(result["erasure_id"])
        else:
            record = await api.confirm_and_run(scope_id, action)
        assert (record["state"], record["physical_deletion"], len(record["entries"])) == ("verified", "complete", 3)
        assert await kdb.rows(scope_id) == []

    @pytest.mark.kagent
    async def test_a_role_that_lost_its_delete_grant_fails_closed(self, kdb: Harness, pg_url: str) -> None:
        """Permission denied on DELETE: erasure_failed, the scope disabled, nothing claimed as erased."""
        scope_id = await kdb.scope()
        entry = await kdb.saved(scope_id, "likes green tea")
        conn = await asyncpg.connect(kdb.stack.real.db_url if kdb.stack.real is not None else pg_url)
        try:
            await conn.execute("REVOKE DELETE ON memory FROM memgov_eraser")
        finally:
            await conn.close()
        with pytest.raises(ControlError) as err:
            await kdb.client().forget(scope_id, entry)
        assert (err.value.status, err.value.reason) == (500, "erasure_failed")
        record = await kdb.client().erasure(err.value.location.rsplit("/", 1)[1])  # type: ignore[union-attr]  # the refusal carries the evidence's location
        assert record["entries"][0]["physically_deleted_at"] is None
        assert (await kdb.client().status(scope_id))["enabled"] is False
        assert len(await kdb.rows(scope_id)) == 1
