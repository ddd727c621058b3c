"""Reports for reviews and CI: diff ordered by direction with a summary, JSON, Markdown and SARIF."""

from __future__ import annotations

import json
from pathlib import Path

from sidecar.policy.check import Step
from sidecar.policy.contract import LOOSER, STRICTER, ContractChange
from sidecar.policy.counterexample import Example
from sidecar.policy.minimize import Change as FieldChange
from sidecar.policy.prove import Outcome, ProofReport
from sidecar.policy.reports import (
    DiffView,
    check_json,
    check_markdown,
    check_sarif,
    diff_json,
    diff_markdown,
    diff_text,
    prove_json,
    prove_markdown,
)
from sidecar.policy.review import Change, DiffReport
from sidecar.policy.symcc import Verdict

OLD, NEW = Path("old"), Path("new")

STEPS = [
    Step("data files", True),
    Step(
        "rules read their own limits (typed keys)",
        False,
        'rego/memgov/decision/limits.rego:38: deny["embedding_item_too_large"] reads limit max_fact_bytes',
    ),
    Step("agent_limits name configured agents", True, "data/limits.yaml: agent_limits names kagent/x", warning=True),
    Step("regal lint", True, "skipped: regal not found", skipped=True),
]


def _diff() -> DiffReport:
    changes = [
        Change("cedar", "mutant save ~ x=1", "forward ['allowed']", "deny ['fact_too_large']", "memory.save"),
        Change("opa", "mutant save ~ x=1", "forward ['allowed']", "deny ['fact_too_large']", "memory.save"),
        Change("cedar", "case room::a", "rewrite_disabled ['room_state_invalid']", "forward ['allowed']", "a2a.invoke"),
        Change("opa", "case room::a", "rewrite_disabled ['room_state_invalid']", "forward ['allowed']", "a2a.invoke"),
        Change(
            "opa",
            "case room::b ~ agent=null",
            "deny ['agent_mismatch', 'x']",
            "deny ['agent_mismatch']",
            "control.inspect",
        ),
    ]
    contract = [
        ContractChange("data/limits.yaml", "max_entries", STRICTER, "100 -> 50"),
        ContractChange("properties.yaml", "room-state-valid", LOOSER, "removed: nothing proves it any more"),
    ]
    return DiffReport(changes, 100, 0, contract)


class TestCheckFormats:
    def test_json(self) -> None:
        """Each step with its status and detail lines; ok only when every step passed."""
        data = json.loads(check_json(STEPS, require_tools=False))
        assert data["ok"] is False
        assert [s["status"] for s in data["steps"]] == ["ok", "fail", "warn", "skip"]

    def test_markdown(self) -> None:
        """A table and the detail of failing and warning steps, fenced."""
        text = check_markdown(STEPS, require_tools=False)
        assert text.startswith("### memgov policy check: **failed**")
        assert "| rules read their own limits (typed keys) | fail |" in text
        assert "**agent_limits name configured agents** (warn)" in text

    def test_sarif_locates_each_finding(self) -> None:
        """Each failing or warning line naming a file and line is a result at that location."""
        run = json.loads(check_sarif(STEPS, require_tools=False))["runs"][0]
        located = [r for r in run["results"] if "locations" in r]
        assert located[0]["locations"][0]["physicalLocation"] == {
            "artifactLocation": {"uri": "rego/memgov/decision/limits.rego"},
            "region": {"startLine": 38},
        }
        assert {r["level"] for r in run["results"]} == {"error", "warning"}


class TestDiffReports:
    def test_loosenings_first_once_per_change_with_a_summary(self) -> None:
        """Both engines' copies of a change are one line; loosened before tightened before reasons."""
        text = diff_text(DiffView(_diff(), OLD, NEW))
        assert "3 change(s): 1 loosened, 1 tightened, 1 with other reasons" in text
        assert text.index("LOOSENED") < text.index("tightened:") < text.index("other reasons:")
        assert (
            "  [cedar+opa] case room::a\n      rewrite_disabled ['room_state_invalid']  ->  forward ['allowed']" in text
        )
        assert "  a2a.invoke                  1         0       0" in text
        assert "LOOSER   properties.yaml: room-state-valid: removed" in text

    def test_loosening_only(self) -> None:
        """Only what admits more: the loosened decision and the looser contract change."""
        text = diff_text(DiffView(_diff(), OLD, NEW, loosening_only=True))
        assert "case room::a" in text
        assert "mutant save" not in text and "room::b" not in text
        assert "max_entries" not in text

    def test_json(self) -> None:
        """Structured changes with direction, engines and operation; the summary per operation."""
        data = json.loads(diff_json(DiffView(_diff(), OLD, NEW)))
        assert data["loosened"] is True
        assert data["summary"]["memory.save"] == {"loosened": 0, "tightened": 1, "reasons": 0}
        assert data["changes"][0] == {
            "direction": "loosened",
            "engines": ["cedar", "opa"],
            "operation": "a2a.invoke",
            "input": "case room::a",
            "before": "rewrite_disabled ['room_state_invalid']",
            "after": "forward ['allowed']",
        }

    def test_markdown_for_a_pull_request(self) -> None:
        """The verdict, the contract table, the summary, loosenings listed and the rest folded away."""
        text = diff_markdown(DiffView(_diff(), OLD, NEW))
        assert text.startswith("### memgov policy diff `old` → `new`: **loosens** the pack")
        assert "| ⚠ looser | properties.yaml | `room-state-valid` |" in text
        assert "- `case room::a` (cedar+opa): `rewrite_disabled ['room_state_invalid']` → `forward ['allowed']`" in text
        assert "<details><summary>2 other change(s)</summary>" in text

    def test_a_long_diff_says_how_many_it_left_out(self) -> None:
        """A comment lists 50 loosenings and folds 200 other changes, and counts the rest it leaves out."""
        changes = [
            Change("cedar", f"case a::{i}", "deny ['fact_too_large']", "forward ['allowed']", "memory.save")
            for i in range(53)
        ] + [
            Change("cedar", f"case b::{i}", "forward ['allowed']", "deny ['fact_too_large']", "memory.save")
            for i in range(204)
        ]
        text = diff_markdown(DiffView(DiffReport(changes, 300, 0, []), OLD, NEW))
        assert "- … and 3 more (`--format text` lists them all)" in text
        assert "- … and 4 more (`--format text` lists them all)" in text
        assert text.count("\n- `case a::") == 50 and text.count("\n- tightened: `case b::") == 200


class TestProveReports:
    def _report(self) -> ProofReport:
        verdict = Verdict("room-state-valid", "a2a.invoke", None, False, None)
        example = Example(
            verdict,
            None,
            raw={"request": {"action": "a2a.invoke"}},
            problem="not a decision input (now)",
        )
        return ProofReport(
            "abc",
            [
                Outcome("consent-and-generation", ["memory.save"], []),
                Outcome("room-state-valid", ["a2a.invoke", "control.inspect"], ["a2a.invoke"], "pack", example=example),
            ],
        )

    def test_json(self) -> None:
        """Each property with its verdict and, when it fails, its counterexample."""
        data = json.loads(prove_json(self._report()))
        assert data["ok"] is False
        assert [p["proved"] for p in data["properties"]] == [True, False]
        assert data["properties"][1]["counterexample"]["problem"] == "not a decision input (now)"

    def test_markdown(self) -> None:
        """A table of the properties and each counterexample fenced under it."""
        text = prove_markdown(self._report())
        assert "(1 of 2 properties proved)" in text
        assert "| `room-state-valid` | **fails** | a2a.invoke |" in text
        assert "counterexample outside the decision input's bounds" in text

    def test_a_change_reads_as_before_and_after(self) -> None:
        """A counterexample's field prints as path: before -> after, in JSON spelling."""
        assert str(FieldChange("room.encrypted", False, True)) == "room.encrypted: false -> true"
