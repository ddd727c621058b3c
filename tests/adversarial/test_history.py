"""A scope's history is bounded: a subject who forgets often cannot grow the gateway's state without end.

Each forget-one over REST rotates the scope: a fresh namespace and a copy of every kept entry. The
attack is plain use, repeated: forty forget-ones in one scope. Once the sweeper compacts what is
final, the scope holds its live entries and its live namespace, and every evidence record still
reads as it did when it was returned.
"""

from __future__ import annotations

from typing import Any

from tests.support.adversarial import PINNED, Launch, Target, listed_entries
from tests.support.erasure import sweep
from tests.support.procs import governed_like

LIVE = 3
FORGETS = 40


def _scope_rows(t: Target, scope_id: str) -> tuple[int, int]:
    return (
        t.state_count(f"SELECT COUNT(*) FROM ledger WHERE scope_id = '{scope_id}'"),
        t.state_count(f"SELECT COUNT(*) FROM namespaces WHERE scope_id = '{scope_id}'"),
    )


class TestBoundedHistory:
    async def test_forty_forget_ones_leave_only_what_is_live(self, launch: Launch) -> None:
        """After 40 forget-ones and a sweep, the scope's ledger and namespaces hold what is live, status counts
        it, an id shown before the compacted rotations still forgets its entry, and every forget-one's evidence
        reads exactly as when it was answered."""
        t = await launch(agents=PINNED, erasure={"history_grace_s": 0})
        scope_id = await t.consented_scope()
        key = await t.session_key()
        for i in range(LIVE):
            assert (await t.save(key, f"fact {i}"))[0] == 201
        answered: list[dict[str, Any]] = []
        first_seen: dict[str, str] = {}
        for i in range(FORGETS):
            listed = await listed_entries(t, scope_id)
            first_seen.update({e["text"]: e["id"] for e in listed if e["text"] not in first_seen})
            oldest = listed[0]["id"]
            status, record = await t.control("DELETE", f"/v1/scopes/{scope_id}/entries/{oldest}")
            assert (status, record["physical_deletion"]) == (200, "complete"), record
            answered.append(record)
            assert (await t.save(key, f"fact {LIVE + i}"))[0] == 201
        ledger, namespaces = _scope_rows(t, scope_id)
        assert ledger > FORGETS * LIVE and namespaces > FORGETS  # what the history left before the sweep

        async with governed_like(t.gw.settings) as gov:
            report = await sweep(gov)
        assert report.history_compacted > 0 and report.failures == 0
        assert _scope_rows(t, scope_id) == (LIVE, 1)
        status, body = await t.control("GET", f"/v1/scopes/{scope_id}")
        assert status == 200 and body["entries"]["live"] == LIVE and body["entries"]["pending_physical_deletion"] == 0
        assert [e["text"] for e in await listed_entries(t, scope_id)] == [f"fact {FORGETS + i}" for i in range(LIVE)]
        # An id shown before the rotations in between (whose rows are compacted) still forgets the entry.
        status, record = await t.control("DELETE", f"/v1/scopes/{scope_id}/entries/{first_seen[f'fact {FORGETS}']}")
        assert (status, record["physical_deletion"]) == (200, "complete"), record
        assert record["verification"]["physically_absent"] is True
        assert [e["text"] for e in await listed_entries(t, scope_id)] == [f"fact {FORGETS + i}" for i in range(1, LIVE)]
        for record in answered:
            status, again = await t.control("GET", f"/v1/erasures/{record['erasure_id']}")
            assert status == 200
            assert {k: (v, again.get(k)) for k, v in record.items() if again.get(k) != v} == {}
