"""The evidence bundle: ``drill.json`` (machine-readable) and ``SUMMARY.md`` (a short human summary).

Both are built from the report alone: ids, reason codes, counts, timestamps and fixed sentences.
No memory text, sentinel, token or key is ever part of a report, so the bundle can be attached to
an audit ticket as is.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

from sidecar.drill.result import CheckJson
from sidecar.drill.runner import EXIT_FAILED, EXIT_PASSED, Cleanup, Report, Versions
from sidecar.drill.target import TargetDescription

FORMAT = "memgov.drill.v1"
_VERDICT = {EXIT_PASSED: "PASSED", EXIT_FAILED: "FAILED"}


def default_folder(now: datetime | None = None) -> Path:
    """``./evidence/drill-<UTC timestamp>/``."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return Path("evidence") / f"drill-{stamp}"


class Result(TypedDict):
    passed: bool
    exit_code: int
    counts: dict[str, int]


class Bundle(TypedDict):
    """``drill.json``."""

    format: str
    started_at: str
    finished_at: str
    result: Result
    target: TargetDescription
    versions: Versions
    limits: dict[str, object]
    checks: list[CheckJson]
    cleanup: Cleanup


def report_json(report: Report) -> Bundle:
    """The machine-readable bundle document."""
    return {
        "format": FORMAT,
        "started_at": report.started_at,
        "finished_at": report.finished_at,
        "result": {
            "passed": report.exit_code == EXIT_PASSED,
            "exit_code": report.exit_code,
            "counts": {o: report.count(o) for o in ("passed", "failed", "not_provable")},
        },
        "target": report.target,
        "versions": report.versions,
        "limits": {"source": "policy_dir", **report.limits},
        "checks": [c.as_json() for c in report.checks],
        "cleanup": report.cleanup,
    }


def _detail(check: CheckJson) -> str:
    evidence = check["evidence"]
    if check["outcome"] == "failed":
        error = evidence.get("error")
        kind = error.get("type", "error") if isinstance(error, dict) else "error"
        return f"`{evidence.get('failed_expectation') or kind}`"
    if check["outcome"] == "not_provable":
        return f"`{evidence.get('not_provable')}`"
    return f"{len(check['notes'])} note(s)" if check["notes"] else ""


def summary_markdown(doc: Bundle) -> str:
    """The short human summary of a bundle document."""
    target, versions, result = doc["target"], doc["versions"], doc["result"]
    verdict = _VERDICT.get(result["exit_code"], "NOT FULLY PROVEN")
    lines = [
        f"# memgov drill: {verdict}",
        "",
        f"- Target: {target['mode']}, control API {target['control_url']}, data plane {target['data_url']}",
        f"- Agents: {', '.join(target['agents'])}; subject prefix {target['subject']}",
        f"- Versions: memgov drill {versions.get('memgov_drill')}, kagent {versions.get('kagent')}, "
        f"policy {versions.get('policy_engine')} revision {versions.get('policy_revision')}",
        f"- Run: {doc['started_at']} to {doc['finished_at']}",
        f"- Checks: {result['counts']['passed']} passed, {result['counts']['failed']} failed, "
        f"{result['counts']['not_provable']} not provable (exit code {result['exit_code']})",
        "",
        "| # | Check | Result | Time | Detail |",
        "|---|---|---|---|---|",
    ]
    for number, check in enumerate(doc["checks"], 1):
        lines.append(
            f"| {number} | {check['title']} | {check['outcome'].replace('_', ' ')} | "
            f"{check['duration_ms']:.0f} ms | {_detail(check)} |"
        )
    notes = [(c["title"], n) for c in doc["checks"] for n in c["notes"]]
    if notes:
        lines += ["", "## What this run did not prove", ""]
        lines += [f"- {title}: {note}" for title, note in notes]
    cleanup = doc["cleanup"]
    lines += [
        "",
        f"Cleanup: {cleanup.get('subjects', 0)} throwaway identities offboarded "
        f"({cleanup.get('scopes', 0)} scopes), complete: {cleanup.get('complete')}.",
        "",
        "Every id, reason code and timestamp behind this table is in `drill.json`.",
        "",
    ]
    return "\n".join(lines)


def write_bundle(report: Report, folder: Path) -> Path:
    """Write ``drill.json`` and ``SUMMARY.md`` into ``folder`` (created if needed)."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = report_json(report)
    (folder / "drill.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (folder / "SUMMARY.md").write_text(summary_markdown(doc), encoding="utf-8")
    return folder
