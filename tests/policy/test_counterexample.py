"""Counterexamples mapped back from Cedar to decision inputs."""

from __future__ import annotations

import json

import pytest

from sidecar.policy.cases import build_input, load_bases
from sidecar.policy.cedar_input import entities, request
from sidecar.policy.counterexample import to_input
from sidecar.policy.minimize import changes
from sidecar.policy.pack import read_pack
from tests.support.policy import CASES_DIR, PACK_DIR

#: Fields of a decision input that memgov never hands Cedar, so a Cedar request cannot give them back.
NOT_IN_CEDAR = frozenset(
    {
        "request.caller_agent_name",
        "request.header_agent_name",
        "request.ttl_days",
        "request.limit",
        "request.is_prefetch",
        "scope.policy_version",
        "scope.purpose",
    }
)
PACK = read_pack(PACK_DIR)
BASES = load_bases(CASES_DIR, PACK)


class TestToInput:
    @pytest.mark.parametrize("base", sorted(BASES))
    def test_every_base_maps_back_to_itself(self, base: str) -> None:
        """Cedar's request and entities for a base give the base back, but for the fields Cedar never sees."""
        inp = build_input(BASES, base)
        found = {"request": json.loads(json.dumps(request(inp))), "entities": json.loads(json.dumps(entities(inp)))}
        back = to_input(found, PACK)
        lost = {c.path for c in changes(inp.model_dump(mode="json"), back.model_dump(mode="json"))}
        assert lost <= NOT_IN_CEDAR

    def test_a_definition_write_comes_back_with_its_facts(self) -> None:
        """A controller write's kind, verb, targets, flags and claims survive the round trip."""
        inp = build_input(
            BASES,
            "controller_write",
            {"request.write.kind": "modelconfigs", "request.write.governed": True, "request.write.claims": ["secret"]},
        )
        found = {"request": json.loads(json.dumps(request(inp))), "entities": json.loads(json.dumps(entities(inp)))}
        assert to_input(found, PACK).request.write == inp.request.write

    def test_a_value_past_the_inputs_bounds_is_refused(self) -> None:
        """A write verb no decision input can hold is a ValueError naming the field."""
        inp = build_input(BASES, "controller_write")
        found = {"request": json.loads(json.dumps(request(inp))), "entities": json.loads(json.dumps(entities(inp)))}
        found["request"]["context"]["write"]["verb"] = "D"
        with pytest.raises(ValueError, match=r"request\.write\.verb"):
            to_input(found, PACK)
