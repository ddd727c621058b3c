"""Coverage per condition: which conditions of the rules no case ever makes matter.

A rule that "fired" on some case can still hold a branch no case reaches: an exemption for one
agent in a forbid's ``unless``, a line of a Rego body that never stops it. Cedar policies are split
the way ``explain --rule`` splits them (each ``when``/``unless`` clause at its top-level ``||`` or
``&&``, an ``if … then … else`` into its test and the parts of each branch); every part is
evaluated on every case whose action the policy's scope admits, as a permit of the same request.
A part of an ``||`` must be true in some case (else nothing is ever refused, or exempted, through
it), a part of an ``&&`` false in some case, an ``if`` test both. Rego rule bodies are evaluated
line by line as growing prefixes (one ``opa eval`` for every case and every rule): a line must
stop its body in some case (prefix before it true, through it false), or it never decides anything.
OPA's line coverage adds the lines no case evaluates at all (functions included).

Conditions that the input model makes unreachable (a count below 0) show up too: coverage is
reported, not enforced.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

import cedarpy

from sidecar.policy import cedar_input
from sidecar.policy.model import DecisionInput
from sidecar.policy.pack import Pack
from sidecar.policy.rego_eval import RegoEval
from sidecar.policy.rules import cedar_annotations, cedar_effect, cedar_statements
from sidecar.policy.why import clauses, rego_body, rego_rule_heads, split_top

_BINDING: Final = re.compile(r"^[a-z_][a-z0-9_]*\s*:=")
_IF: Final = re.compile(r"if (?P<test>.+?) then (?P<then>.+) else (?P<other>.+)")


@dataclass(frozen=True)
class Condition:
    """One condition of one rule and what coverage asks of it (``true``, ``false`` or ``both``)."""

    engine: str
    where: str
    rule: str
    part: str
    text: str
    need: str


@dataclass(frozen=True)
class Uncovered:
    """A condition no case made do its job."""

    condition: Condition
    missing: str

    def __str__(self) -> str:
        c = self.condition
        return f"{c.engine:<6}{c.where} {c.rule}: {c.part} is never {self.missing}: {c.text}"


@dataclass(frozen=True)
class _Probe:
    condition: Condition
    scope: str
    holds: str
    fails: str


def _parts(kind: str, body: str) -> list[tuple[str, str, str, str]]:
    """(label, condition, guard, need) for each part of one clause; the guard is the branch taken."""
    flat = " ".join(body.split())
    out: list[tuple[str, str, str, str]] = []
    branch = _IF.fullmatch(flat)
    branches = [("", flat)]
    if branch:
        out.append((f"{kind} test", branch["test"], "true", "both"))
        branches = [(f"({branch['test']})", branch["then"]), (f"!({branch['test']})", branch["other"])]
    for guard, text in branches:
        op, parts = split_top(text)
        if len(parts) == 1 and parts[0] == "true":
            continue  # `else true`: nothing to cover
        need = "false" if op == "&&" else "true"
        label = kind + (" then" if guard.startswith("(") else " else" if guard else "")
        label += {"||": " part", "&&": " part"}.get(op, "")
        out += [(label, part, guard or "true", need) for part in parts]
    return out


def cedar_probes(pack: Pack) -> list[_Probe]:
    """Every condition of every Cedar forbid, with the two permits that say it holds and it fails."""
    probes = []
    for rel, text in sorted(pack.select("cedar", ".cedar").items()):
        for st in cedar_statements(text):
            if cedar_effect(st.text) != "forbid":
                continue
            ident = cedar_annotations(st.text).get("id", "?")
            scope, found = clauses(st.text)
            for kind, body in found:
                for label, part, guard, need in _parts(kind, body):
                    cond = Condition("cedar", f"{rel}:{st.line}", f"@id {ident}", label, part, need)
                    probes.append(_Probe(cond, scope, f"({guard}) && ({part})", f"({guard}) && !({part})"))
    return probes


def _seen_cedar(pack: Pack, probes: list[_Probe], inputs: list[DecisionInput]) -> list[tuple[bool, bool]]:
    policies = "\n".join(
        f'@id("h{i}")\npermit ({p.scope}) when {{ {p.holds} }};\n@id("f{i}")\npermit ({p.scope}) when {{ {p.fails} }};'
        for i, p in enumerate(probes)
    )
    handle = cedarpy.PolicySet.from_str(policies)
    # The schema adds the action groups (``action in Action::"scoped"``) to the entities.
    schema = cedarpy.Schema.from_str(next(iter(pack.select("cedar", ".cedarschema").values())))
    ids = {f"policy{2 * i}": ("h", i) for i in range(len(probes))}
    ids.update({f"policy{2 * i + 1}": ("f", i) for i in range(len(probes))})
    seen = [[False, False] for _ in probes]
    for inp in inputs:
        entities = cedarpy.Entities.from_json_str(json.dumps(cedar_input.entities(inp)), schema)
        result = cedarpy.is_authorized(dict(cedar_input.request(inp)), handle, entities)
        for pid in result.diagnostics.reasons:
            side, i = ids.get(pid, ("", -1))
            if i >= 0:
                seen[i][0 if side == "h" else 1] = True
    return [(h, f) for h, f in seen]


def _missing(need: str, holds: bool, fails: bool) -> str | None:
    if need in ("true", "both") and not holds:
        return "true"
    if need in ("false", "both") and not fails:
        return "false"
    return None


def cedar_uncovered(pack: Pack, inputs: list[DecisionInput]) -> list[Uncovered]:
    """Cedar conditions no input makes do their job (a ``||`` part never true, an ``&&`` part never false)."""
    probes = cedar_probes(pack)
    if not probes or not inputs:
        return []
    out = []
    for probe, (holds, fails) in zip(probes, _seen_cedar(pack, probes, inputs), strict=True):
        missing = _missing(probe.condition.need, holds, fails)
        if missing:
            out.append(Uncovered(probe.condition, missing))
    return out


# ---------------------------------------------------------------------------------------------
# Rego: each rule body (deny rules and helpers without arguments) as growing prefixes.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Body:
    rel: str
    line: int
    rule: str
    statements: list[str]
    lines: list[int]


def rego_bodies(pack: Pack) -> list[_Body]:
    """Every rule body of the Rego pack that can be evaluated on its own (no arguments)."""
    out = []
    for rel, text in sorted(pack.select("rego", ".rego").items()):
        lines = text.splitlines()
        for at, name in rego_rule_heads(lines):
            body = rego_body(lines, at)
            if body:
                out.append(_Body(rel, at + 1, name, [t for _, t in body], [n for n, _ in body]))
    return out


def _probe_module(bodies: list[_Body]) -> str:
    rules = []
    names = []
    for b, body in enumerate(bodies):
        for k in range(1, len(body.statements) + 1):
            name = f"memgov_cov_{b}_{k}"
            names.append(name)
            rules.append(f"default {name} := false\n\n{name} if {{\n" + "\n".join(body.statements[:k]) + "\n}\n")
    rules.append("memgov_cov_vector := [" + ", ".join(names) + "]\n")
    return "\n".join(rules)


def rego_uncovered(pack: Pack, evaluator: RegoEval, inputs: list[DecisionInput]) -> list[Uncovered]:
    """Rego body lines that never stop their rule on any input, and lines OPA never evaluated.

    Raises PackError when OPA cannot evaluate the probes (the caller reports it, nothing more).
    """
    bodies = rego_bodies(pack)
    if not bodies or not inputs:
        return []
    docs: list[dict[str, Any]] = [i.model_dump(mode="json") for i in inputs]
    vectors = evaluator.probe(docs, _probe_module(bodies), "memgov_cov_vector")
    out = []
    at = 0
    for body in bodies:
        width = len(body.statements)
        for k in range(width):
            text = " ".join(body.statements[k].split())
            if _BINDING.match(text):
                continue  # a binding (x := ...) is not a condition
            before = [True if k == 0 else bool(v[at + k - 1]) for v in vectors]
            through = [bool(v[at + k]) for v in vectors]
            if not any(b and not t for b, t in zip(before, through, strict=True)):
                cond = Condition("opa", f"{body.rel}:{body.lines[k]}", body.rule, "the line", text, "false")
                out.append(Uncovered(cond, "false"))
        at += width
    return out


def rego_unevaluated(pack: Pack, covered: set[tuple[str, int]]) -> list[str]:
    """Rule lines OPA's coverage never saw evaluated (functions included), as ``file:line: text``."""
    out = []
    for rel, text in sorted(pack.select("rego", ".rego").items()):
        lines = text.splitlines()
        for at, _ in rego_rule_heads(lines):
            row = at + 1
            while row < len(lines) and lines[row].startswith("\t"):
                stripped = lines[row].strip()
                if stripped and not stripped.startswith("#") and (rel, row + 1) not in covered:
                    out.append(f"{rel}:{row + 1}: {stripped}")
                row += 1
    return out
