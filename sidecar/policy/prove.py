"""``memgov policy prove``: the pack's declared properties, proved for every request under any data.

Examples only show what they try. Cedar's symbolic compiler (cedar-policy-symcc, run by the
``memgov-symcc`` helper of tools/symcc/ on the cvc5 solver) decides a property for all requests
of an action at once. A property of ``properties.yaml`` says: every request the pack allows, of
these actions, meets this condition. It is checked as an implication between two policy sets:
the pack plus a forbid of every unrealistic request, and a single permit of the condition.

Every property is proved under any valid data (assumptions.any_data), so a rule that is right
only while two limits are equal, or while no partner record exists, fails. A property that fails
is checked again under the pack's own data, to say which it is. Each failure comes back as a
concrete Cedar request, turned into a decision input, reduced to the fewest fields away from a
base case (minimize.py), decided by both engines and explained condition by condition for the
rules that enforce the property: one counterexample per property, whatever the number of actions
that fail it. ``baseline`` adds an older properties file: each of its properties that the new file
dropped or changed is proved against the pack too, so a change cannot weaken its own contract.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from sidecar.policy.assumptions import any_data, lit, pack_data, schema_with_empty_set
from sidecar.policy.cases import Case
from sidecar.policy.counterexample import (
    Example,
    Oracle,
    deployment_line,
    explained,
    reduced,
    smallest,
    to_input,
)
from sidecar.policy.minimize import nearest_batch
from sidecar.policy.model import DecisionInput
from sidecar.policy.pack import Pack
from sidecar.policy.properties import NEVER_ERRORS, Properties, Property
from sidecar.policy.review import ENGINES, answers
from sidecar.policy.symcc import Verdict, run_helper, verdicts

SCHEMA_FILE: Final = "cedar/memgov.cedarschema"
#: The suffix of an older property's name when ``--baseline`` proves it beside the new file's.
BASELINE: Final = "@baseline"
#: The prefix of the checks that find a request breaking one property alone (replayed on Rego).
WITNESS: Final = "witness "


def _policies(pack: Pack) -> str:
    return "\n".join(text for _, text in sorted(pack.select("cedar", ".cedar").items()))


def assume_forbid(condition: str) -> str:
    """A forbid of every request that does not meet ``condition``."""
    return f'@id("prove-assumption")\nforbid (principal, action, resource)\nunless {{\n  {condition}\n}};\n'


@dataclass(frozen=True)
class Claim:
    """One property to prove, with the assumptions it is proved under (its own file's ``assume``)."""

    prop: Property
    assume: str
    check: str

    @property
    def baseline(self) -> bool:
        """True for an older file's property that the new file dropped or changed."""
        return self.check.endswith(BASELINE)


def claims(props: Properties, baseline: Properties | None = None, only: list[str] | None = None) -> list[Claim]:
    """The properties to prove: the file's (or those named in ``only``), and each of ``baseline``'s the
    file dropped or changed (a changed ``assume`` changes them all)."""
    out = [Claim(p, props.assume, p.name) for p in props.properties if not only or p.name in only]
    if baseline is None:
        return out
    for old in baseline.properties:
        mine = props.named(old.name)
        same = mine == old and baseline.assume == props.assume
        if not same and (not only or old.name in only):
            out.append(Claim(old, baseline.assume, old.name + BASELINE))
    return out


def _guarded(prop: Property) -> str:
    """A property's condition, required only of its own actions (an action is ``in`` itself)."""
    actions = " || ".join(f"action in Action::{lit(a)}" for a in prop.actions)
    return f"(!({actions}) ||\n({prop.allows_only_if}))"


def witness_check(prop: Property, props: Properties, data: str) -> dict[str, Any]:
    """A request that meets every property but ``prop`` and not ``prop``: one the pack must refuse
    because of ``prop`` alone. Rego is asked about it too (the solver's inputs replayed on Rego)."""
    others = [_guarded(p) for p in props.properties if p.name != prop.name]
    lhs = "permit (principal, action, resource);\n" + assume_forbid(f"({props.assume}) &&\n  {data}")
    if others:
        lhs += assume_forbid(" &&\n".join(others)).replace('"prove-assumption"', '"prove-others"')
    return {
        "name": WITNESS + prop.name,
        "kind": "implies",
        "actions": prop.actions,
        "lhs": lhs,
        "rhs": f"permit (principal, action, resource)\nwhen {{\n{prop.allows_only_if}\n}};\n",
    }


def job(
    pack: Pack, wanted: list[Claim], *, data: str, never_errors: bool, witnesses: Properties | None = None
) -> dict[str, Any]:
    """The helper's job: one implication per claim under ``data`` (a Cedar condition), never-errors,
    and for each claim of ``witnesses`` a request that breaks that property alone."""
    policies = _policies(pack)
    checks: list[dict[str, Any]] = [
        {
            "name": c.check,
            "kind": "implies",
            "actions": c.prop.actions,
            "lhs": policies + "\n" + assume_forbid(f"({c.assume}) &&\n  {data}"),
            "rhs": f'@id("{c.prop.name}")\npermit (principal, action, resource)\n'
            f"when {{\n{c.prop.allows_only_if}\n}};\n",
        }
        for c in wanted
    ]
    if never_errors:
        checks.append(
            {"name": NEVER_ERRORS, "kind": "never_errors", "actions": [], "lhs": policies + "\n" + assume_forbid(data)}
        )
    if witnesses is not None:
        checks += [witness_check(c.prop, witnesses, data) for c in wanted if not c.baseline]
    return {"schema": schema_with_empty_set(pack.files[SCHEMA_FILE]), "checks": checks}


@dataclass(frozen=True)
class Tables:
    """The case tables a counterexample is reduced towards: the bases and the rows (none: not reduced)."""

    bases: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: list[Case] = field(default_factory=list)


@dataclass(frozen=True)
class Outcome:
    """One property's result: proved for its actions, or the actions that fail it and one counterexample."""

    name: str
    actions: list[str]
    failed: list[str]
    #: "pack" when it fails under the pack's own data, "any" when only under other valid data.
    data: str = ""
    baseline: bool = False
    example: Example | None = None
    #: never-errors only: the policies that can fail to evaluate.
    policies: list[str] = field(default_factory=list)
    #: The reason codes whose rules enforce the property (explained on its counterexample).
    codes: list[str] = field(default_factory=list)

    @property
    def proved(self) -> bool:
        """True when no action fails the property."""
        return not self.failed


@dataclass(frozen=True)
class Replayed:
    """A solver input that breaks one property alone, and how each engine decided it."""

    prop: str
    action: str
    example: Example

    @property
    def agree(self) -> bool:
        """Both engines gave the same answer."""
        return len({said for _, said in self.example.answers}) == 1


@dataclass
class ProofReport:
    """Every property's outcome on one pack, and the solver's inputs replayed on both engines."""

    revision: str
    outcomes: list[Outcome]
    files: dict[str, Path] = field(default_factory=dict)
    replayed: list[Replayed] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every property proved, and Rego decides every replayed solver input as Cedar does."""
        return all(o.proved for o in self.outcomes) and all(r.agree for r in self.replayed)


def _by_check(results: list[Verdict]) -> dict[str, list[Verdict]]:
    out: dict[str, list[Verdict]] = {}
    for v in results:
        out.setdefault(v.prop, []).append(v)
    return out


#: The deployment fields that come from the pack's data files (the rest are the gateway's settings).
_DATA_FIELDS: Final = (
    "deployment.classification",
    "deployment.federation_partners",
    "deployment.limits",
    "deployment.org",
)


def _needs_other_data(example: Example | None) -> bool:
    """True unless the counterexample is one under the pack's own data (its data fields are the base's)."""
    if example is None or example.inp is None or not example.base:
        return True
    return any(ch.path.startswith(_DATA_FIELDS) for ch in example.changes)


def _examples(pack: Pack, claim: Claim, failed: list[Verdict], tables: Tables, own_data: bool) -> Example | None:
    """The smallest counterexample of one property among its failing actions, reduced towards a base."""
    oracle = Oracle(pack, {"assume": claim.assume, "property": claim.prop.allows_only_if})
    seeds = [(c.base, c.inp) for c in tables.rows if c.rule in claim.prop.enforced_by and c.kind != "allow"]
    found = []
    for v in failed:
        if v.counterexample is None:
            continue
        try:
            inp = to_input(v.counterexample, pack, own_data=own_data)
        except ValueError as exc:
            found.append(Example(v, None, raw=v.counterexample, problem=str(exc)))
            continue
        found.append(reduced(v, inp, tables.bases, oracle.breaks, seeds))
    return smallest(found)


async def _decided(pack: Pack, outcomes: list[Outcome]) -> list[Outcome]:
    """Each outcome's counterexample decided by both engines and explained for its enforcing rules."""
    labelled = {o.name: o.example.inp for o in outcomes if o.example is not None and o.example.inp is not None}
    said = await answers(pack, labelled) if labelled else {}
    done = []
    for o in outcomes:
        if o.example is None or o.example.inp is None:
            done.append(o)
            continue
        pairs = tuple((e, said[e][o.name]) for e in ENGINES)
        why = explained(pack, o.example.inp, o.codes)
        example = replace(o.example, answers=pairs, why=why)
        done.append(replace(o, example=example))
    return done


async def prove(
    pack: Pack,
    props: Properties,
    tables: Tables,
    *,
    baseline: Properties | None = None,
    only: list[str] | None = None,
) -> ProofReport:
    """Prove each claim under any data; each failure checked under the pack's data, reduced and explained."""
    wanted = claims(props, baseline, only)
    check_errors = not only or NEVER_ERRORS in only
    found = run_helper(job(pack, wanted, data=any_data(), never_errors=check_errors, witnesses=props))
    general = _by_check(verdicts(found))
    examples: dict[str, Example | None] = {}
    for c in wanted:
        bad = [v for v in general.get(c.check, []) if not v.proved]
        if bad:
            examples[c.check] = _examples(pack, c, bad, tables, own_data=True)
    # A counterexample that needs other data than the pack's: is there one under the pack's own data?
    again = [c for c in wanted if c.check in examples and _needs_other_data(examples[c.check])]
    pinned = (
        _by_check(verdicts(run_helper(job(pack, again, data=pack_data(pack), never_errors=False)))) if again else {}
    )
    outcomes = []
    for c in wanted:
        mine = general.get(c.check, [])
        actions = sorted({v.action for v in mine})
        if c.check not in examples:
            outcomes.append(Outcome(c.check, actions, []))
            continue
        bad = [v for v in mine if not v.proved]
        data, example = "pack", examples[c.check]
        if c in again:
            under_pack = [v for v in pinned.get(c.check, []) if not v.proved]
            if under_pack:
                bad, example = under_pack, _examples(pack, c, under_pack, tables, own_data=False)
            else:
                data = "any"
        failed = sorted({v.action for v in bad})
        outcomes.append(Outcome(c.check, actions, failed, data, c.baseline, example, codes=c.prop.enforced_by))
    if check_errors:
        mine = general.get(NEVER_ERRORS, [])
        bad = [v for v in mine if not v.proved]
        example = None
        for v in bad:
            try:
                inp = to_input(v.counterexample or {}, pack, own_data=True)
            except (ValueError, KeyError) as exc:
                example = example or Example(v, None, raw=v.counterexample, problem=str(exc))
                continue
            example = Example(v, inp)
            break
        outcomes.append(
            Outcome(
                NEVER_ERRORS,
                sorted({v.action for v in mine}),
                sorted({v.action for v in bad}),
                "any" if bad else "",
                example=example,
                policies=sorted({f"{v.action} (@id {v.policy})" for v in bad}),
            )
        )
    proved = {o.name for o in outcomes if o.proved}
    replayed = await _replay(pack, props, general, tables, [c for c in wanted if c.check in proved])
    return ProofReport(pack.revision, await _decided(pack, outcomes), replayed=replayed)


async def _replay(
    pack: Pack, props: Properties, general: dict[str, list[Verdict]], tables: Tables, proved: list[Claim]
) -> list[Replayed]:
    """Each request that breaks one proved property alone, decided by both engines; where Rego answers
    otherwise than Cedar, the request reduced towards a base (while Cedar still refuses it the same way)."""
    inputs: dict[str, tuple[Claim, Verdict, DecisionInput]] = {}
    for c in proved:
        for v in general.get(WITNESS + c.prop.name, []):
            if v.proved or v.counterexample is None:
                continue  # no request breaks this property alone (another one implies it)
            try:
                inp = to_input(v.counterexample, pack, own_data=True)
            except ValueError:
                continue
            inputs[f"{c.prop.name} {v.action}"] = (c, v, inp)
    if not inputs:
        return []
    said = await answers(pack, {k: inp for k, (_, _, inp) in inputs.items()})
    out = []
    for key, (c, v, inp) in inputs.items():
        pairs = tuple((e, said[e][key]) for e in ENGINES)
        example = Example(v, inp, answers=pairs)
        if len({a for _, a in pairs}) > 1:
            example = await _reduced_disagreement(pack, props, c, example, tables)
        out.append(Replayed(c.prop.name, v.action, example))
    return out


async def _reduced_disagreement(
    pack: Pack, props: Properties, claim: Claim, example: Example, tables: Tables
) -> Example:
    """A disagreement reduced towards a base while Cedar answers it the same way and it breaks the
    property alone; kept only if Rego still answers otherwise on the reduced input."""
    assert example.inp is not None
    others = " && ".join(_guarded(p) for p in props.properties if p.name != claim.prop.name) or "true"
    oracle = Oracle(pack, {"assume": props.assume, "property": claim.prop.allows_only_if, "others": others})
    cedar = oracle.decide(example.inp)

    def still(inp: DecisionInput) -> bool:
        held = oracle.holds(inp)
        return oracle.decide(inp) == cedar and held == {"assume": True, "property": False, "others": True}

    seeds = [(r.base, r.inp) for r in tables.rows if r.rule in claim.prop.enforced_by and r.kind != "allow"]
    small = reduced(example.verdict, example.inp, tables.bases, still, seeds)
    pairs: tuple[tuple[str, str], ...] = ()
    if small.inp is not None:
        said = await answers(pack, {"reduced": small.inp})
        pairs = tuple((e, said[e]["reduced"]) for e in ENGINES)
    if small.inp is None or len({a for _, a in pairs}) == 1:
        # What separates the engines is not what breaks the property: reduce asking both engines.

        async def disagree(inputs: list[DecisionInput]) -> list[bool]:
            found = await answers(pack, {str(i): x for i, x in enumerate(inputs)}) if inputs else {}
            return [found["cedar"][str(i)] != found["opa"][str(i)] for i in range(len(inputs))]

        near = await nearest_batch(example.inp, tables.bases, disagree) if tables.bases else None
        if near is None:
            return example
        said = await answers(pack, {"reduced": near.inp})
        pairs = tuple((e, said[e]["reduced"]) for e in ENGINES)
        small = Example(example.verdict, near.inp, near.base, tuple(near.changes))
    assert small.inp is not None
    # Explain the codes one engine gave and the other did not (the property's own codes otherwise).
    split = [set(answer_codes(a)) for _, a in pairs]
    everywhere = split[0].intersection(*split[1:]) if split else set()
    differing = sorted({c for codes in split for c in codes} - everywhere)
    why = explained(pack, small.inp, differing or claim.prop.enforced_by)
    return replace(small, answers=pairs, why=why)


def answer_codes(answer: str) -> list[str]:
    """The reason codes of an answer as ``answers`` writes it (``deny ['a', 'b']``), ``allowed`` left out."""
    _, _, rest = answer.partition(" ")
    try:
        codes = ast.literal_eval(rest)
    except (ValueError, SyntaxError):
        return []
    return [c for c in codes if isinstance(c, str) and c != "allowed"]


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


def _yaml(data: Any) -> list[str]:
    return yaml.safe_dump(data, sort_keys=False, width=120).splitlines()


def example_lines(example: Example, where: Path | None, codes_hint: str = "", why_title: str = "") -> list[str]:
    """A counterexample as a reviewer reads it, indented under its heading."""
    if example.inp is None:
        return [
            f"  counterexample outside the decision input's bounds ({example.problem}); Cedar request:",
            *("    " + ln for ln in _yaml((example.raw or {}).get("request"))),
        ]
    replay = f" (replay: memgov policy explain --input {where})" if where else ""
    out = []
    if example.base:
        out.append(f"  counterexample: base {example.base} with {len(example.changes)} change(s){replay}")
        out += [f"    {c}" for c in example.changes]
    else:
        out.append(f"  counterexample (decision input){replay}:")
        out += ["    " + ln for ln in _yaml(example.inp.model_dump(mode="json", exclude={"deployment"}))]
    out.append("  " + deployment_line(example.inp))
    if example.answers:
        out.append("  " + "; ".join(f"{engine}: {said}" for engine, said in example.answers))
    if example.why:
        title = why_title or f"why {codes_hint or 'its rules'} did not refuse it"
        out.append(f"  {title}:")
        out += [f"    {ln}" for ln in example.why]
    return out


def _heading(o: Outcome) -> str:
    if o.proved:
        return f"proved  {o.name}: {', '.join(o.actions) or 'no action'}"
    note = ""
    if o.baseline:
        note = " (the baseline's property, which this change dropped or weakened)"
    elif o.data == "any" and o.name != NEVER_ERRORS:
        note = " (holds for this pack's data, not for all valid data)"
    what = ", ".join(o.policies) if o.policies else ", ".join(o.failed)
    return f"FAILS   {o.name}: {what}{note}"


def render_proof(report: ProofReport) -> str:
    """Per property: proved for which actions, or one counterexample with both engines' answers and the why."""
    lines = []
    for o in report.outcomes:
        lines.append(_heading(o))
        if o.example is not None:
            lines += example_lines(o.example, report.files.get(o.name), ", ".join(o.codes))
    proved = sum(o.proved for o in report.outcomes)
    lines.append(f"{proved} of {len(report.outcomes)} properties proved")
    if report.replayed:
        differ = [r for r in report.replayed if not r.agree]
        lines.append(
            f"{'FAILS   ' if differ else ''}rego replay: {len(report.replayed)} solver inputs that break one property"
            f" alone, {len(differ)} decided otherwise by the Rego pack"
        )
        for r in differ:
            lines.append(f"  {r.prop} on {r.action}:")
            lines += ["  " + ln for ln in example_lines(r.example, None, why_title="each engine's rules on it")]
    return "\n".join(lines)


def write_counterexamples(report: ProofReport, out: Path) -> None:
    """Each property's counterexample as ``OUT/<property>.yaml``, ready for explain --input."""
    out.mkdir(parents=True, exist_ok=True)
    for o in report.outcomes:
        if o.example is None or o.example.inp is None:
            continue
        path = out / f"{o.name}.yaml"
        path.write_text(yaml.safe_dump(o.example.inp.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
        report.files[o.name] = path


def proof_json(report: ProofReport) -> dict[str, Any]:
    """The report as JSON-ready data (``--format json``)."""
    return {
        "revision": report.revision,
        "ok": report.ok,
        "rego_replay": [
            {"property": r.prop, "action": r.action, "agree": r.agree, "example": example_json(r.example)}
            for r in report.replayed
            if not r.agree
        ],
        "replayed": len(report.replayed),
        "properties": [
            {
                "name": o.name,
                "proved": o.proved,
                "actions": o.actions,
                "failed_actions": o.failed,
                "fails_under": o.data or None,
                "baseline": o.baseline,
                "policies": o.policies,
                "counterexample": example_json(o.example, report.files.get(o.name)),
            }
            for o in report.outcomes
        ],
    }


def example_json(example: Example | None, where: Path | None = None) -> dict[str, Any] | None:
    """A counterexample as JSON-ready data."""
    if example is None:
        return None
    if example.inp is None:
        return {"problem": example.problem, "request": (example.raw or {}).get("request")}
    return {
        "base": example.base or None,
        "changes": [{"path": c.path, "before": c.before, "after": c.after} for c in example.changes],
        "deployment": example.inp.deployment.model_dump(mode="json", exclude={"limits", "federation_partners"}),
        "answers": dict(example.answers),
        "why": list(example.why),
        "input": example.inp.model_dump(mode="json"),
        "file": str(where) if where else None,
    }
