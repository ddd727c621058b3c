"""Coverage per condition: a new exemption branch shows as never taken, not as a fired rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.policy.cases import load_cases
from sidecar.policy.conditions import cedar_uncovered, rego_uncovered, rego_unevaluated
from sidecar.policy.pack import read_pack
from sidecar.policy.rego_eval import RegoEval
from tests.support.policy import CASES_DIR, PACK_DIR

DECISION = "rego/memgov/decision"
_UNLESS = 'unless { action == Action::"a2a.invoke" && !context.agent.memoryEnabled };'

#: What no row can exercise in the reference pack: counts below 0 and unknown operations, which the
#: decision input's model refuses, and agent caps through an org list, which the schema's empty Org
#: type cannot carry.
REFERENCE_CEDAR = [
    "cedar cedar/limits.cedar:5 @id entry-cap-reached: when part is never true: context.entries.count < 0",
    "cedar cedar/limits.cedar:5 @id entry-cap-reached: when part is never true: context.request.itemCount < 0",
]
REFERENCE_REGO = [
    f"opa   {DECISION}/decision.rego:30 allow: the line is never false: known_operation",
    f"opa   {DECISION}/decision.rego:35 known_operation: the line is never false: input.operation in known_operations",
    f"opa   {DECISION}/limits.rego:79 within_cap: the line is never false: input.entries.count >= 0",
    f"opa   {DECISION}/limits.rego:80 within_cap: the line is never false: input.request.item_count >= 0",
]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _ops_bot(pack: Path) -> None:
    _edit(
        pack / "cedar" / "room.cedar",
        "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n" + _UNLESS,
        "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n"
        'unless {\n  (action == Action::"a2a.invoke" && !context.agent.memoryEnabled) ||\n'
        '  context.agent.ref == "kagent/ops-bot"\n};',
    )
    _edit(
        pack / DECISION / "room.rego",
        "\tattested\n\tnot room_ok\n",
        '\tattested\n\tinput.agent.ref != "kagent/ops-bot"\n\tnot room_ok\n',
    )


@pytest.fixture
def rego() -> RegoEval:
    """The reference pack's Rego half, evaluated offline."""
    return RegoEval(read_pack(PACK_DIR))


class TestCedarConditions:
    def test_reference_tables_reach_every_reachable_condition(self) -> None:
        """Only the two conditions the input model makes unreachable are left."""
        pack = read_pack(PACK_DIR)
        found = cedar_uncovered(pack, [c.inp for c in load_cases(CASES_DIR, pack)])
        assert [str(u) for u in found] == REFERENCE_CEDAR

    def test_an_exemption_no_row_takes_is_reported(self, pack_copy: Path) -> None:
        """The ops-bot part of the unless is never true on any row: it is named as such."""
        _ops_bot(pack_copy)
        pack = read_pack(pack_copy)
        found = [str(u) for u in cedar_uncovered(pack, [c.inp for c in load_cases(CASES_DIR, pack)])]
        assert (
            "cedar cedar/room.cedar:6 @id room-state-invalid: unless part is never true:"
            ' context.agent.ref == "kagent/ops-bot"' in found
        )


class TestRegoConditions:
    def test_reference_tables_stop_every_reachable_line(self, rego: RegoEval) -> None:
        """Every body line but the model-unreachable ones stops its rule on some row."""
        pack = read_pack(PACK_DIR)
        try:
            found = rego_uncovered(pack, rego, [c.inp for c in load_cases(CASES_DIR, pack)])
        finally:
            rego.close()
        assert [str(u) for u in found] == REFERENCE_REGO

    def test_an_exemption_line_that_never_stops_the_rule_is_reported(self, pack_copy: Path) -> None:
        """The Rego half of the exemption is evaluated on every attested row and never false."""
        _ops_bot(pack_copy)
        pack = read_pack(pack_copy)
        evaluator = RegoEval(pack)
        try:
            found = [str(u) for u in rego_uncovered(pack, evaluator, [c.inp for c in load_cases(CASES_DIR, pack)])]
        finally:
            evaluator.close()
        assert (
            f'opa   {DECISION}/room.rego:13 deny["room_state_invalid"]: the line is never false:'
            ' input.agent.ref != "kagent/ops-bot"' in found
        )

    def test_lines_opa_never_evaluates(self, rego: RegoEval) -> None:
        """OPA's coverage: the org-list branch of the agent caps runs on no row of the reference tables."""
        pack = read_pack(PACK_DIR)
        try:
            _, _, covered = rego.covered([c.inp.model_dump(mode="json") for c in load_cases(CASES_DIR, pack)])
        finally:
            rego.close()
        assert rego_unevaluated(pack, covered) == [
            f"{DECISION}/limits.rego:116: input.agent.ref in input.deployment.org[name]"
        ]
