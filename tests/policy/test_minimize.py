"""Counterexamples reduced to the fewest fields away from a base case."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.policy.cases import build_input, load_bases
from sidecar.policy.minimize import Change, changes, nearest, nearest_batch
from sidecar.policy.model import DecisionInput
from sidecar.policy.pack import read_pack
from tests.support.policy import CASES_DIR, PACK_DIR

BIG = 2**53


@pytest.fixture(scope="module")
def bases() -> dict[str, dict[str, Any]]:
    """The reference tables' base inputs."""
    return load_bases(CASES_DIR, read_pack(PACK_DIR))


def _ops_bot_in_a_bad_room(inp: DecisionInput) -> bool:
    """What a room-state exemption for ops-bot admits: ops-bot, a room that is not the control room,
    and a server ACL that names the deployment's own server (so server names must stay consistent)."""
    room = inp.room
    if inp.agent is None or room is None or room.server_acl is None:
        return False
    bad_room = room.encrypted or room.room_version != "12"
    return inp.agent.ref == "kagent/ops-bot" and bad_room and room.server_acl.allow == [inp.deployment.server_name]


def _solver_like(bases: dict[str, dict[str, Any]]) -> DecisionInput:
    """The kind of input a solver returns: every string it could choose renamed, counts at their bound."""
    return build_input(
        bases,
        "invoke",
        {
            "deployment.server_name": "A",
            "principal.server_name": "A",
            "principal.mxid": "B",
            "scope.principal_mxid": "B",
            "room.members": ["B", "@bridge:example.org", "@agent-helper:example.org"],
            "room.server_acl.allow": ["A"],
            "audience.servers": ["A"],
            "agent.ref": "kagent/ops-bot",
            "room.encrypted": True,
            "entries.count": BIG,
            "now": BIG,
            "budget.hourly_operations_used": BIG,
        },
    )


class TestNearest:
    def test_strings_renamed_and_fields_reverted(self, bases: dict[str, dict[str, Any]]) -> None:
        """Only the two facts that make it a counterexample are left; the solver's names are the base's."""
        found = nearest(_solver_like(bases), bases, _ops_bot_in_a_bad_room)
        assert found is not None
        assert found.base == "invoke"
        assert [str(c) for c in found.changes] == [
            'agent.ref: "team/helper" -> "kagent/ops-bot"',
            "room.encrypted: false -> true",
        ]
        assert found.inp.deployment.server_name == "example.org"

    def test_a_row_seeds_a_simpler_counterexample(self, bases: dict[str, dict[str, Any]]) -> None:
        """The solver's violation (room version 9, members of its own) is traded for a row's (encrypted)."""
        messy = build_input(
            bases,
            "invoke",
            {
                "agent.ref": "kagent/ops-bot",
                "room.room_version": "9",
                "room.members": ["x", "y"],
                "room.invited": ["z"],
            },
        )

        def still(inp: DecisionInput) -> bool:
            room, agent = inp.room, inp.agent
            ops = agent is not None and agent.ref == "kagent/ops-bot"
            return ops and room is not None and (room.encrypted or room.room_version != "12")

        alone = nearest(messy, bases, still)
        seeded = nearest(messy, bases, still, [("invoke", build_input(bases, "invoke", {"room.encrypted": True}))])
        assert alone is not None and seeded is not None
        assert len(seeded.changes) <= len(alone.changes) == 2

    def test_no_base_of_the_operation(self, bases: dict[str, dict[str, Any]]) -> None:
        """Without a base of its operation there is nothing to reduce towards."""
        only_saves = {"save": bases["save"]}
        assert nearest(_solver_like(bases), only_saves, _ops_bot_in_a_bad_room) is None

    def test_changes_name_each_differing_field_once(self, bases: dict[str, dict[str, Any]]) -> None:
        """A nulled object is one change, not one per field it held."""
        base = build_input(bases, "invoke").model_dump(mode="json")
        doc = build_input(bases, "invoke", {"room": None, "now": 1}).model_dump(mode="json")
        found = changes(base, doc)
        assert [c.path for c in found] == ["now", "room"]
        assert found[1].after is None
        assert str(Change("now", 1800000000, 1)) == "now: 1800000000 -> 1"


class TestNearestBatch:
    async def test_batches_reduce_like_single_calls(self, bases: dict[str, dict[str, Any]]) -> None:
        """Asking many inputs per call reaches the same two changes in a few calls."""
        calls = []

        async def still_many(inputs: list[DecisionInput]) -> list[bool]:
            calls.append(len(inputs))
            return [_ops_bot_in_a_bad_room(i) and i.principal is not None for i in inputs]

        messy = build_input(
            bases, "invoke", {"agent.ref": "kagent/ops-bot", "room.encrypted": True, "now": 5, "entries.count": 7}
        )
        found = await nearest_batch(messy, bases, still_many)
        assert found is not None and found.base == "invoke"
        assert [c.path for c in found.changes] == ["agent.ref", "room.encrypted"]
        assert len(calls) < 10
