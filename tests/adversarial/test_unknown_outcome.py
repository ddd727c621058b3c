"""Family 5: fencing when a save's outcome is unknown (SPEC D4).

The attack (or plain bad luck): kagent is slower than memgov's timeout. The save answers 504,
yet kagent commits the row afterwards in the namespace the withdrawal has just retired. An
erasure that trusted the 504 reported ``verified`` while the row was still there.
"""

from __future__ import annotations

import asyncio

from tests.support.adversarial import Launch
from tests.support.sentinel import assert_absent, make_sentinel


class TestUnknownOutcome:
    async def test_a_save_that_commits_after_its_timeout_is_waited_for_and_cleared(self, launch: Launch) -> None:
        """The 504 carries a decision; the withdrawal's erasure defers verification until the write lease
        ends, then clears again and reads back: nothing is left, and the evidence says it re-checked."""
        # A write lease longer than the erasure's quiesce bound: the erasure cannot simply wait it out.
        t = await launch(
            gated=True,
            upstream={"memory_timeout_s": 0.5},
            enforce={"write_lease_s": 4},
            erasure={"quiesce_timeout_s": 0.5},
        )
        assert t.gate is not None
        scope_id = await t.consented_scope()
        key = await t.session_key()
        t.gate.hold = lambda r: r.method == "POST" and r.path == "/api/memories/sessions"
        fact = make_sentinel("late")
        status, body, headers = await t.save(key, f"likes green tea {fact}")
        assert (status, body["error"]) == (504, "upstream_unavailable")
        assert headers["X-Memgov-Decision"].startswith("deny; reason=upstream_unavailable")

        status, withdrawn, headers = await t.control_full("DELETE", f"/v1/scopes/{scope_id}/consent")
        assert status == 200 and withdrawn["enabled"] is False
        record = withdrawn["erasure"]
        assert record["state"] == "deleted" and record["not_before"] is not None
        assert record["verification"]["result"] == "pending"

        t.gate.hold = None
        t.gate.release.set()  # kagent now commits the late row into the retired namespace
        async with asyncio.timeout(10):
            while not await t.rows():
                await asyncio.sleep(0.05)
        evidence = record
        async with asyncio.timeout(30):
            while evidence["state"] != "verified":
                await asyncio.sleep(0.2)
                _, evidence = await t.control("GET", headers["Location"])
        assert evidence["verification"]["physically_absent"] is True
        assert evidence["verification"]["rechecked_after_possible_write"] is True
        assert await t.rows() == []
        async with t.http.get(t.gw.ops_url + "/metrics") as resp:
            metrics = await resp.text()
        assert_absent(fact, t.gateway_log(), metrics, t.state_dump(), repr(body), repr(evidence))
