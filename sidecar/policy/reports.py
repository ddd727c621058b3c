"""What ``check``, ``test``, ``prove`` and ``diff`` print: text for a terminal, JSON for tools, Markdown
for a pull-request comment, and SARIF (``check``) for code-scanning views.

Every report is built from the commands' result objects; nothing here decides anything. Reports
carry file names, rule names, reason codes and decision inputs (identifiers, flags and counts):
never memory text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sidecar.policy.check import Step
from sidecar.policy.contract import LOOSER, ContractChange
from sidecar.policy.prove import BASELINE, ProofReport, example_json, example_lines, proof_json, render_proof
from sidecar.policy.review import LOOSENED, REASONS, TIGHTENED, DiffReport
from sidecar.policy.semantic import LOOSENS, RULES, TIGHTENS, ActionDiff
from sidecar.policy.suite import SuiteReport, input_diff, render

FORMATS: Final = ("text", "json", "markdown")
_LOCATION: Final = re.compile(r"^(?P<file>[\w./-]+\.(?:cedar|cedarschema|rego|yaml)):(?P<line>\d+)(?::(?P<col>\d+))?")


def _fence(lines: list[str]) -> list[str]:
    return ["```", *lines, "```"]


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=str)


# ---------------------------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------------------------


def check_text(steps: list[Step], require_tools: bool) -> str:
    """One line per step (FAIL, SKIP, warn, ok) and its detail, indented."""
    marks = {"fail": "FAIL", "skip": "SKIP", "warn": "warn", "ok": "ok  "}
    lines = []
    for step in steps:
        mark = "FAIL" if step.skipped and require_tools else marks[step.status]
        lines.append(f"{mark} {step.name}")
        if step.detail:
            lines.append("     " + step.detail.replace("\n", "\n     "))
    skipped = [s.name for s in steps if s.skipped]
    if skipped:
        lines.append(
            f"{len(skipped)} check(s) not run for want of a tool"
            + (": --require-tools makes that a failure" if not require_tools else "")
        )
    return "\n".join(lines)


def check_ok(steps: list[Step], require_tools: bool) -> bool:
    """Every step passed (a skipped one fails under ``--require-tools``)."""
    return all(s.ok for s in steps) and not (require_tools and any(s.skipped for s in steps))


def check_json(steps: list[Step], require_tools: bool) -> str:
    """The steps as JSON: name, status and detail lines."""
    return _dump(
        {
            "ok": check_ok(steps, require_tools),
            "steps": [
                {"name": s.name, "status": s.status, "detail": s.detail.splitlines() if s.detail else []} for s in steps
            ],
        }
    )


def check_markdown(steps: list[Step], require_tools: bool) -> str:
    """A table of the steps and, under it, the detail of each one that failed or warned."""
    verdict = "passed" if check_ok(steps, require_tools) else "**failed**"
    lines = [f"### memgov policy check: {verdict}", "", "| step | result |", "|---|---|"]
    lines += [f"| {s.name} | {s.status} |" for s in steps]
    for s in steps:
        if s.detail and s.status in ("fail", "warn"):
            lines += ["", f"**{s.name}** ({s.status})", "", *_fence(s.detail.splitlines())]
    return "\n".join(lines)


def check_sarif(steps: list[Step], require_tools: bool) -> str:
    """SARIF 2.1.0: each failing or warning step's lines that name a file (and line) as a result."""
    results = []
    for s in steps:
        if s.status not in ("fail", "warn") and not (require_tools and s.skipped):
            continue
        for line in s.detail.splitlines() or [s.name]:
            where = _LOCATION.match(line.strip())
            result: dict[str, Any] = {
                "ruleId": s.name,
                "level": "warning" if s.status == "warn" else "error",
                "message": {"text": line.strip()},
            }
            if where:
                region = {"startLine": int(where["line"])}
                if where["col"]:
                    region["startColumn"] = int(where["col"])
                result["locations"] = [
                    {"physicalLocation": {"artifactLocation": {"uri": where["file"]}, "region": region}}
                ]
            results.append(result)
    tool = {"driver": {"name": "memgov policy check", "rules": [{"id": s.name} for s in steps]}}
    return _dump(
        {
            "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
            "version": "2.1.0",
            "runs": [{"tool": tool, "results": results}],
        }
    )


# ---------------------------------------------------------------------------------------------
# test
# ---------------------------------------------------------------------------------------------


def test_json(report: SuiteReport) -> str:
    """The run as JSON: verdict, failures with their input diff, disagreements, coverage gaps."""
    return _dump(
        {
            "ok": report.ok,
            "cases": len(report.cases),
            "full_run": report.full,
            "engines": list(report.results),
            "problems": report.problems(),
            "failures": [
                {
                    "case": r.case.id,
                    "engine": r.engine,
                    "got": {"action": r.action, "reasons": list(r.reasons)},
                    "want": {"action": r.case.action.value, "reasons": list(r.case.reasons)},
                    "base": r.case.base,
                    "input_diff": input_diff(report.bases[r.case.base], r.case.inp),
                }
                for r in report.failures()
            ],
            "disagreements": [
                {"case": c.id, "answers": {r.engine: [r.action, list(r.reasons)] for r in answers}}
                for c, answers in report.disagreements()
            ],
            "mutants": report.mutants,
            "differences": [
                {"input": m.label, "answers": {e: [r.action, list(r.reasons)] for e, r in said.items()}}
                for m, said in report.differences
            ],
            "codes_without_allow_and_deny": report.uncovered(),
            "rules_never_fired": [f"{s.where} {s.name}" for s in report.unfired()],
            "conditions_not_exercised": [str(u) for u in report.conditions],
            "lines_never_evaluated": report.unevaluated,
        }
    )


def test_markdown(report: SuiteReport) -> str:
    """The verdict, what failed and the conditions no case exercises, for a pull-request comment."""
    verdict = "passed" if report.ok else "**failed**: " + "; ".join(report.problems())
    lines = [
        f"### memgov policy test: {verdict}",
        "",
        f"{len(report.cases)} cases on {', '.join(report.results)}, {report.mutants} mutated inputs.",
    ]
    if report.failures():
        lines += ["", "**Failing cases**", ""]
        for r in report.failures():
            lines.append(
                f"- `{r.case.id}` on {r.engine}: got `{r.action} {list(r.reasons)}`,"
                f" want `{r.case.action.value} {list(r.case.reasons)}`"
            )
    if report.disagreements() or report.differences:
        lines += ["", "**Engines disagree**", ""]
        lines += [f"- `{c.id}`: " + "; ".join(f"{r.engine} `{r.action}`" for r in a) for c, a in report.disagreements()]
        lines += [
            f"- `{m.label}`: " + "; ".join(f"{e} `{r.action} {list(r.reasons)}`" for e, r in said.items())
            for m, said in report.differences[:25]
        ]
    if report.conditions or report.unevaluated:
        lines += ["", "<details><summary>Conditions no case exercises</summary>", ""]
        lines += _fence([str(u) for u in report.conditions] + [f"opa   {u}" for u in report.unevaluated])
        lines += ["", "</details>"]
    return "\n".join(lines)


def test_text(report: SuiteReport, cases: Path) -> str:
    """The terminal report (suite.render)."""
    return render(report, cases)


# ---------------------------------------------------------------------------------------------
# prove
# ---------------------------------------------------------------------------------------------


def prove_text(report: ProofReport, root: Path) -> str:
    """The terminal report: one line per property, one counterexample per failing one."""
    return f"prove {root} (revision {report.revision})\n" + render_proof(report)


def prove_json(report: ProofReport) -> str:
    """The proof as JSON."""
    return _dump(proof_json(report))


def prove_markdown(report: ProofReport) -> str:
    """A table of the properties and each counterexample, for a pull-request comment."""
    proved = sum(o.proved for o in report.outcomes)
    verdict = "passed" if report.ok else "**failed**"
    lines = [
        f"### memgov policy prove: {verdict} ({proved} of {len(report.outcomes)} properties proved)",
        "",
        "| property | result | actions |",
        "|---|---|---|",
    ]
    for o in report.outcomes:
        what = "proved" if o.proved else "**fails**" + (" (baseline)" if o.name.endswith(BASELINE) else "")
        lines.append(f"| `{o.name}` | {what} | {', '.join(o.failed or o.actions)} |")
    for o in report.outcomes:
        if o.example is not None:
            lines += ["", f"**{o.name}**", "", *_fence(example_lines(o.example, None, ", ".join(o.codes)))]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# diff
# ---------------------------------------------------------------------------------------------


def _semantic_lines(diffs: list[ActionDiff]) -> list[str]:
    by: dict[str, list[ActionDiff]] = {}
    for d in diffs:
        by.setdefault(d.action, []).append(d)
    lines = []
    for action, mine in sorted(by.items()):
        changed = sorted((d for d in mine if d.changed), key=lambda d: (d.direction != LOOSENS, d.question != RULES))
        if not changed:
            lines.append(f"equivalent  {action}")
            continue
        for direction in (LOOSENS, TIGHTENS):
            found = [d for d in changed if d.direction == direction]
            if found:
                lines.append(f"{direction.upper():<11} {action} ({', '.join(d.question for d in found)})")
                if found[0].example is not None:
                    lines += example_lines(found[0].example, None, "the rules")
    alike = sum(1 for mine in by.values() if not any(d.changed for d in mine))
    lines.append(f"{alike} of {len(by)} actions decide every request alike")
    return lines


def loosens(report: DiffReport, semantic: list[ActionDiff] | None) -> bool:
    """Anything admits more than before: a decision, the contract, or a request the proof found."""
    return report.loosened() or any(d.changed and d.direction == LOOSENS for d in semantic or [])


def changes_anything(report: DiffReport, semantic: list[ActionDiff] | None) -> bool:
    """Any decision, contract or proved difference at all (``--exit-code``)."""
    return bool(report.changes or report.contract or any(d.changed for d in semantic or []))


@dataclass(frozen=True)
class DiffView:
    """One ``policy diff`` as its reports show it: the two packs, what changed between them, and whether
    only what admits more than before is shown (``loosening_only``)."""

    report: DiffReport
    old: Path
    new: Path
    semantic: list[ActionDiff] | None = None
    loosening_only: bool = False

    def contract(self) -> list[ContractChange]:
        """The contract changes shown: only the looser ones with ``loosening_only``."""
        return [c for c in self.report.contract if c.direction == LOOSER or not self.loosening_only]


def diff_text(view: DiffView) -> str:
    """Contract changes, the per-action proof, then every changed decision: loosenings first, with a
    per-action summary; ``loosening_only`` leaves out everything that admits no more than before."""
    report, old, new, semantic = view.report, view.old, view.new, view.semantic
    lines = []
    if report.contract:
        lines.append(f"contract: {len(report.contract)} change(s) to properties.yaml and the data files")
        lines += [f"  {c.direction.upper() if c.direction == LOOSER else c.direction:<8} {c}" for c in view.contract()]
    if semantic is not None:
        lines.append(
            f"semantic diff {old} -> {new} (Cedar, every request; rules under any data, then each pack's data):"
        )
        lines += _semantic_lines(semantic)
    groups = report.grouped()
    loose = sum(1 for c, _ in groups if c.direction == LOOSENED)
    tight = sum(1 for c, _ in groups if c.direction == TIGHTENED)
    lines.append(
        f"policy diff {old} -> {new}: {report.compared} inputs (cases, their null variants, pairs of cases of one"
        f" base, mutated base inputs and data variants), {len(groups)} change(s):"
        f" {loose} loosened, {tight} tightened, {len(groups) - loose - tight} with other reasons"
    )
    if report.one_sided:
        # An input only one pack can build (its data adds a field) has nothing to compare with.
        lines.append(f"  {report.one_sided} input(s) exist for one pack only and are not compared")
    summary = report.summary()
    if summary:
        lines.append(f"  {'operation':<20}{'loosened':>9}{'tightened':>10}{'reasons':>8}")
        lines += [f"  {op:<20}{row[LOOSENED]:>9}{row[TIGHTENED]:>10}{row[REASONS]:>8}" for op, row in summary.items()]
    heads = {LOOSENED: "LOOSENED (refused before, forwarded now):", TIGHTENED: "tightened:", REASONS: "other reasons:"}
    current = ""
    for change, engines in groups:
        if view.loosening_only and change.direction != LOOSENED:
            continue
        if change.direction != current:
            current = change.direction
            lines.append(heads[current])
        lines.append(f"  [{'+'.join(engines)}] {change.label}\n      {change.before}  ->  {change.after}")
    return "\n".join(lines)


def diff_json(view: DiffView) -> str:
    """The diff as JSON: contract changes, per-action proof, summary and every grouped change."""
    report, semantic = view.report, view.semantic
    return _dump(
        {
            "loosened": loosens(report, semantic),
            "compared": report.compared,
            "one_sided": report.one_sided,
            "contract": [
                {"area": c.area, "item": c.item, "direction": c.direction, "detail": c.detail} for c in view.contract()
            ],
            "semantic": None
            if semantic is None
            else [
                {
                    "action": d.action,
                    "question": d.question,
                    "direction": d.direction,
                    "changed": d.changed,
                    "example": example_json(d.example),
                }
                for d in semantic
            ],
            "summary": report.summary(),
            "changes": [
                {
                    "direction": c.direction,
                    "engines": engines,
                    "operation": c.operation,
                    "input": c.label,
                    "before": c.before,
                    "after": c.after,
                }
                for c, engines in report.grouped()
                if c.direction == LOOSENED or not view.loosening_only
            ],
        }
    )


#: A pull-request comment lists this many loosened decisions, and folds this many other changes, at most.
_LISTED: Final = 50
_FOLDED: Final = 200


def diff_markdown(view: DiffView) -> str:
    """A pull-request comment: what loosens first (contract, proof, decisions), then the rest folded."""
    report, old, new, semantic = view.report, view.old, view.new, view.semantic
    verdict = "**loosens** the pack" if loosens(report, semantic) else "loosens nothing"
    lines = [f"### memgov policy diff `{old}` → `{new}`: {verdict}", ""]
    if report.contract:
        lines += [
            "**Contract (properties.yaml and data files)**",
            "",
            "| | area | item | change |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {'⚠ looser' if c.direction == LOOSER else c.direction} | {c.area} | `{c.item}` | {c.detail} |"
            for c in view.contract()
        ]
        lines.append("")
    if semantic is not None:
        changed = sorted((d for d in semantic if d.changed), key=lambda d: d.direction != LOOSENS)
        lines.append(f"**Semantic diff**: {len(changed)} action(s) decide some request differently")
        for d in changed:
            lines += ["", f"`{d.action}` {d.direction} ({d.question})", ""]
            if d.example is not None:
                lines += _fence(example_lines(d.example, None, "the rules"))
        lines.append("")
    summary = report.summary()
    if summary:
        lines += ["| operation | loosened | tightened | other reasons |", "|---|---|---|---|"]
        lines += [f"| `{op}` | {r[LOOSENED]} | {r[TIGHTENED]} | {r[REASONS]} |" for op, r in summary.items()]
        lines.append("")
    groups = report.grouped()
    loose = [(c, e) for c, e in groups if c.direction == LOOSENED]
    if loose:
        lines += ["**Loosened decisions** (refused before, forwarded now)", ""]
        lines += [f"- `{c.label}` ({'+'.join(e)}): `{c.before}` → `{c.after}`" for c, e in loose[:_LISTED]]
        if len(loose) > _LISTED:
            lines.append(f"- … and {len(loose) - _LISTED} more (`--format text` lists them all)")
        lines.append("")
    rest = [(c, e) for c, e in groups if c.direction != LOOSENED]
    if rest and not view.loosening_only:
        lines += [f"<details><summary>{len(rest)} other change(s)</summary>", ""]
        lines += [
            f"- {c.direction}: `{c.label}` ({'+'.join(e)}): `{c.before}` → `{c.after}`" for c, e in rest[:_FOLDED]
        ]
        if len(rest) > _FOLDED:
            lines.append(f"- … and {len(rest) - _FOLDED} more (`--format text` lists them all)")
        lines += ["", "</details>"]
    if not changes_anything(report, semantic):
        lines.append("No decision, property or data changes.")
    return "\n".join(lines)
