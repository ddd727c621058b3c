"""Engine-neutral case tables (``policy-tests/*.yaml``): loading them and running them on engines.

``base.yaml`` holds complete, valid inputs per operation; every case names a base, overrides
dotted paths with ``set`` and states the expected action and reasons. Deployment limits,
classification and partners come from the pack's data files unless a case overrides them, so
the tables test the pack against the same numbers the gateway uses. Facts given as text
(``facts``) are measured in UTF-8 bytes exactly as the gateway measures them; ``{é*256}`` in a
fact repeats a piece. ``load_cases`` takes a folder (every table in it) or one table file (its
folder's ``base.yaml`` supplies the bases).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sidecar.policy.engine import Engine, EngineUnavailable
from sidecar.policy.model import DecisionInput
from sidecar.policy.outcome import Verdict, assemble
from sidecar.policy.pack import Pack
from sidecar.policy.rules import rule_codes
from sidecar.policy.tree import load_yaml, with_set
from sidecar.reasons import Action, Reason, code

KINDS = ("allow", "deny", "bypass")
_REPEAT = re.compile(r"\{([^{}*]+)\*(\d{1,5})\}")


class CaseError(Exception):
    """A case table is malformed; the message names the file and case."""


@dataclass(frozen=True)
class Case:
    """One row: an input and the action and reasons every engine must answer."""

    file: str
    name: str
    rule: str
    kind: str
    inp: DecisionInput
    action: Action
    reasons: tuple[str, ...]
    #: The base the row starts from and its changes (a failing case shows its input as a diff).
    base: str = ""
    changes: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """Stable id for test names: file stem and case name."""
        return f"{self.file}::{self.name}"


def expand(text: str) -> str:
    """Expand ``{piece*count}`` repetitions in a fact."""
    return _REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), text)


def _apply(doc: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = doc
    for path, value in (changes or {}).items():
        if path == "facts":
            sizes = [len(expand(f).encode("utf-8")) for f in value]
            out = with_set(out, "request.item_count", len(sizes), create=True)
            out = with_set(out, "request.max_item_bytes", max(sizes, default=0), create=True)
        else:
            out = with_set(out, path, value, create=True)
    return out


def load_bases(folder: Path, pack: Pack) -> dict[str, dict[str, Any]]:
    """Read ``base.yaml``: complete inputs by name, with the pack's data in their deployment."""
    path = Path(folder) / "base.yaml"
    if not path.is_file():
        raise CaseError(f"{path}: no base.yaml beside the case tables")
    raw = load_yaml(path.read_text(encoding="utf-8"))
    deployment = dict(raw["deployment"])
    deployment.setdefault("classification", pack.federation.classification)
    deployment.setdefault("federation_partners", [p.model_dump(mode="json") for p in pack.federation.partners])
    deployment["limits"] = pack.limits.model_dump(mode="json")
    deployment.setdefault("org", pack.org)
    bases: dict[str, dict[str, Any]] = {}
    for name, spec in raw["bases"].items():
        if "extends" in spec:
            bases[name] = _apply(bases[spec["extends"]], spec.get("set", {}))
        else:
            bases[name] = {**spec, "deployment": deployment}
    return bases


def build_input(bases: dict[str, dict[str, Any]], base: str, changes: dict[str, Any] | None = None) -> DecisionInput:
    """A validated input from a named base with dotted-path changes (``facts`` measured as bytes)."""
    return DecisionInput.model_validate(_apply(bases[base], changes or {}))


def _case(file: str, row: dict[str, Any], bases: dict[str, dict[str, Any]], rules: tuple[str, ...]) -> Case:
    name = row.get("name", "?")
    try:
        rule, kind, expect = row["rule"], row["kind"], row["expect"]
        if rule not in rules:
            raise CaseError(f"{file}: case {name!r}: rule {rule!r} is neither built in nor in data/reasons.yaml")
        if kind not in KINDS:
            raise CaseError(f"{file}: case {name!r}: kind must be one of {', '.join(KINDS)}")
        inp = build_input(bases, row["base"], row.get("set"))
        action = Action(expect["action"])
        reasons = tuple(sorted(code(r).value for r in expect.get("reasons", ["allowed"])))
    except KeyError as exc:
        raise CaseError(f"{file}: case {name!r}: missing or unknown {exc}") from None
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors())
        raise CaseError(f"{file}: case {name!r}: the input does not validate ({where})") from None
    except ValueError as exc:
        raise CaseError(f"{file}: case {name!r}: {exc}") from None
    return Case(file, name, rule, kind, inp, action, reasons, row["base"], dict(row.get("set") or {}))


def load_cases(where: Path, pack: Pack, rules: tuple[str, ...] | None = None) -> list[Case]:
    """Load every case table in a folder, or one table file, against the pack's data.

    ``rules`` are the codes a row may name (default: the pack's own).
    """
    where = Path(where)
    folder, tables = (where.parent, [where]) if where.is_file() else (where, sorted(where.glob("*.yaml")))
    bases = load_bases(folder, pack)
    rules = rules or rule_codes(pack)
    cases: list[Case] = []
    for path in tables:
        if path.name == "base.yaml":
            continue
        doc = load_yaml(path.read_text(encoding="utf-8")) or {}
        cases.extend(_case(path.stem, row, bases, rules) for row in doc.get("cases", []))
    names = [c.id for c in cases]
    if len(set(names)) != len(names):
        raise CaseError("case names repeat within a file")
    return cases


@dataclass
class Result:
    """What one engine answered for one case."""

    case: Case
    engine: str
    action: str
    reasons: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when the engine answered exactly what the case expects."""
        return self.action == self.case.action.value and self.reasons == self.case.reasons


def judge(case: Case, engine: str, verdict: Verdict | None) -> Result:
    """Turn an engine verdict (None when it failed) into a result, without the floor."""
    if verdict is None:
        return Result(case, engine, "error", (Reason.POLICY_UNAVAILABLE.value,))
    decision = assemble(case.inp, verdict, case.inp.deployment.limits)
    return Result(case, engine, decision.action.value, tuple(r.value for r in decision.reasons))


async def run_engine(engine: Engine, cases: list[Case]) -> list[Result]:
    """Run every case through one engine (the pack must be committed)."""
    results = []
    for case in cases:
        try:
            verdict: Verdict | None = await engine.evaluate(case.inp)
        except EngineUnavailable:
            verdict = None
        results.append(judge(case, engine.name, verdict))
    return results


@dataclass
class Coverage:
    """Case counts of one rule by kind."""

    rule: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    @property
    def complete(self) -> bool:
        """A rule is covered when it has at least one ALLOW and one DENY case."""
        return self.counts["allow"] > 0 and self.counts["deny"] > 0


def coverage(cases: list[Case], rules: tuple[str, ...]) -> list[Coverage]:
    """Per-code counts of allow, deny and bypass cases."""
    table = {rule: Coverage(rule) for rule in rules}
    for case in cases:
        table[case.rule].counts[case.kind] += 1
    return list(table.values())
