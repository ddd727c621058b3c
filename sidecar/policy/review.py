"""``memgov policy explain`` and ``memgov policy diff``: why a decision was made, what a pack change changes.

``explain`` shows one decision input in full, each engine's answer with the Cedar policies and
Rego rules that determined it (for Rego, the lines each fired rule evaluated), and the floor's
verdict on its own. ``diff`` decides every case and every mutated base input with two packs and
lists each one whose action or reasons change, per engine. Inputs are decision inputs, which
carry identifiers, flags and counts only: nothing here can print memory text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from sidecar.policy import cedar_input
from sidecar.policy.cases import Case, CaseError, build_input, judge, load_bases, load_cases
from sidecar.policy.contract import LOOSER, ContractChange, data_changes, properties_changes
from sidecar.policy.floor import apply_floor, floor_reasons
from sidecar.policy.model import DecisionInput
from sidecar.policy.mutate import data_mutants, data_strings, mutants, null_variants, vocabulary
from sidecar.policy.outcome import assemble, unavailable
from sidecar.policy.pack import Pack
from sidecar.policy.properties import properties_or_none
from sidecar.policy.rules import Site, rule_codes
from sidecar.policy.suite import Engines, load, select
from sidecar.reasons import Action

ENGINES = ("cedar", "opa")


def _probe(name: str, inp: DecisionInput) -> Case:
    return Case("input", name, "", "", inp, Action.FORWARD, ())


def _rego_trace(pack: Pack, fired: list[Site], covered: set[tuple[str, int]]) -> list[str]:
    """Each fired deny rule's lines that OPA evaluated, with their line numbers."""
    out = []
    for site in fired:
        lines = pack.files[site.file].splitlines()
        end = site.line
        while end < len(lines) and lines[end].strip() and not lines[end].startswith(("deny ", "# METADATA")):
            end += 1
        out.append(f"    {site.where} {site.name} fired:")
        out += [
            f"      {row:>4} {lines[row - 1]}"
            for row in range(site.line, end + 1)
            if (site.file, row) in covered and lines[row - 1].strip()
        ]
    return out


def _cedar_view(inp: DecisionInput) -> str:
    """The Cedar request and entities memgov builds from an input (sidecar/policy/cedar_input.py)."""
    request = cedar_input.request(inp)
    entities = {f"{e['uid']['type']}::{json.dumps(e['uid']['id'])}": e["attrs"] for e in cedar_input.entities(inp)}
    view = {"action": request["action"]["id"], "context": request["context"], "entities": entities}
    return yaml.safe_dump(view, sort_keys=False, width=120)


async def explain(pack_dir: Path, inp: DecisionInput, label: str) -> str:
    """The full report for one input on both engines and the floor."""
    pack = load(pack_dir)
    tools = Engines(pack)
    out = [
        f"input: {label} (pack revision {pack.revision}), as the Rego pack reads it (input.*):",
        *("  " + line for line in yaml.safe_dump(inp.model_dump(mode="json"), sort_keys=False).splitlines()),
        "the same input as the Cedar pack reads it (principal, resource and context; entities by uid):",
        *("  " + line for line in _cedar_view(inp).splitlines()),
    ]
    decisions = {}
    try:
        cedar = await tools.cedar()
        try:
            verdict, sites = cedar.explain_sync(inp)
            decision = assemble(inp, verdict, pack.limits)
        except Exception:  # noqa: BLE001 - shown as the gateway would answer: policy_unavailable
            decision, sites = unavailable(inp), []
        decisions["cedar"] = decision
        out.append(f"cedar: {decision.action.value} {[r.value for r in decision.reasons]}")
        for site in sites:
            out.append(f"    {site.where} @id {site.name}")
        verdicts, fired, covered = tools.rego().covered([inp.model_dump(mode="json")])
        rego = assemble(inp, verdicts[0], pack.limits) if verdicts[0] is not None else unavailable(inp)
        decisions["opa"] = rego
        out.append(f"opa:   {rego.action.value} {[r.value for r in rego.reasons]}")
        out += _rego_trace(pack, fired, covered)
        if not fired and rego.action is Action.FORWARD:
            out.append("    no deny rule fired: result.allow is true")
    finally:
        await tools.close()
    refused = sorted(r.value for r in floor_reasons(inp, pack.limits, pack.federation, pack.org))
    out.append(f"floor: {'refuses ' + str(refused) if refused else 'no objection'}")
    for engine, decision in decisions.items():
        final = apply_floor(decision, inp, pack.limits, pack.federation, pack.org)
        out.append(f"gateway with {engine}: {final.action.value} {[r.value for r in final.reasons]}")
    return "\n".join(out)


def find_case(pack_dir: Path, cases_path: Path, name: str) -> tuple[DecisionInput, str]:
    """The input of the one case matching ``name``; ValueError when none or several match."""
    found = select(load_cases(cases_path, load(pack_dir)), [name])
    if len(found) != 1:
        names = ", ".join(c.id for c in found[:5])
        raise ValueError(f"{len(found)} cases match {name!r}" + (f": {names}" if names else ""))
    return found[0].inp, found[0].id


def read_input(path: Path) -> DecisionInput:
    """A decision input from a JSON or YAML file (validated: unknown fields are refused).

    The error names the fields at fault, never their values: a file could hold anything.
    """
    try:
        return DecisionInput.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except yaml.YAMLError:
        raise ValueError(f"{path}: not JSON or YAML") from None
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) or "top level" for e in exc.errors())
        raise ValueError(f"{path}: not a decision input ({where})") from None


#: How restrictive each action is: a change to a smaller rank admits more (a loosening).
_RANK: Final = {"forward": 0, "rewrite_disabled": 1, "empty_result": 1, "deny": 1, "error": 1}
LOOSENED: Final = "loosened"
TIGHTENED: Final = "tightened"
REASONS: Final = "reasons"


@dataclass(frozen=True)
class Change:
    """One input whose answer differs between the packs, on one engine."""

    engine: str
    label: str
    before: str
    after: str
    operation: str = ""

    @property
    def direction(self) -> str:
        """``loosened`` (refused before, forwarded now), ``tightened``, or ``reasons`` (refused both times)."""
        was, now = _RANK.get(self.before.split()[0], 1), _RANK.get(self.after.split()[0], 1)
        return LOOSENED if now < was else TIGHTENED if now > was else REASONS


async def answers(pack: Pack, labelled: dict[str, DecisionInput]) -> dict[str, dict[str, str]]:
    """Per engine, ``{label: "action [reasons]"}`` for each input, without the floor."""
    tools = Engines(pack)
    try:
        out = {}
        names = list(labelled)
        for engine in ENGINES:
            verdicts, _ = await tools.evaluate(engine, [labelled[n] for n in names], rules=False)
            results = [judge(_probe(n, labelled[n]), engine, v) for n, v in zip(names, verdicts, strict=True)]
            out[engine] = {n: f"{r.action} {list(r.reasons)}" for n, r in zip(names, results, strict=True)}
        return out
    finally:
        await tools.close()


def _pairs(bases: dict[str, dict[str, Any]], rows: list[Case]) -> dict[str, DecisionInput]:
    """Two rows of one base with both their changes: each row sets the fields its rule reads, so a
    rule that needs two conditions at once is reached even when no single row or mutant does."""
    out: dict[str, DecisionInput] = {}
    by_base: dict[str, list[Case]] = {}
    for c in rows:
        if c.changes:
            by_base.setdefault(c.base, []).append(c)
    for base, mine in by_base.items():
        for i, first in enumerate(mine):
            for second in mine[i + 1 :]:
                if set(first.changes) & set(second.changes):
                    continue
                try:
                    inp = build_input(bases, base, {**first.changes, **second.changes})
                except (ValidationError, CaseError):
                    continue  # two changes the input model refuses together
                out.setdefault(f"pair {first.id} + {second.id}", inp)
    return out


def _inputs(
    pack: Pack, tables: list[Path], rules: tuple[str, ...], vocab_from: list[Case], data: list[str]
) -> dict[str, DecisionInput]:
    """Every table row with its null variants, and the mutated base inputs, labelled alike for both packs.

    A row the old tables hold differently from the new ones is kept as its own input.
    """
    labelled: dict[str, DecisionInput] = {}
    rows: list[Case] = []
    for path in tables:
        for c in load_cases(path, pack, rules):
            label = f"case {c.id}"
            if label in labelled and labelled[label] != c.inp:
                label += " (old table)"
            labelled.setdefault(label, c.inp)
            rows.append(c)
            for m in null_variants(label, c.inp.model_dump(mode="json")):
                labelled.setdefault(m.label, m.inp)
    folder = tables[0] if tables[0].is_dir() else tables[0].parent
    bases = load_bases(folder, pack)
    labelled.update(_pairs(bases, rows))
    variants = mutants(bases, vocabulary([c.changes for c in vocab_from]), data)
    for name, doc in bases.items():
        variants += data_mutants(name, doc)
    labelled.update({f"mutant {m.label}": m.inp for m in variants})
    return labelled


@dataclass
class DiffReport:
    """What changed between two packs: per engine, and how many inputs were compared or one-sided,
    and the contract changes (properties.yaml, data)."""

    changes: list[Change]
    compared: int
    one_sided: int
    contract: list[ContractChange] = field(default_factory=list)

    def grouped(self) -> list[tuple[Change, list[str]]]:
        """Each distinct change once, with the engines that show it: loosenings first, then
        tightenings, then changed reasons, each in label order."""
        by: dict[tuple[str, str, str], tuple[Change, list[str]]] = {}
        for c in self.changes:
            key = (c.label, c.before, c.after)
            by.setdefault(key, (c, []))[1].append(c.engine)
        order = {LOOSENED: 0, TIGHTENED: 1, REASONS: 2}
        return sorted(by.values(), key=lambda g: (order[g[0].direction], g[0].label))

    def summary(self) -> dict[str, dict[str, int]]:
        """Per operation, how many inputs were loosened, tightened or changed in reasons (any engine)."""
        out: dict[str, dict[str, int]] = {}
        for change, _ in self.grouped():
            row = out.setdefault(change.operation or "?", {LOOSENED: 0, TIGHTENED: 0, REASONS: 0})
            row[change.direction] += 1
        return dict(sorted(out.items()))

    def loosened(self) -> bool:
        """Anything admits more than before: a decision or the contract."""
        return any(c.direction == LOOSENED for c in self.changes) or any(c.direction == LOOSER for c in self.contract)


async def diff(old_dir: Path, new_dir: Path, cases_path: Path, old_cases: Path | None = None) -> DiffReport:
    """Every case (of the new and the old tables) and mutated input whose decision changes between the
    packs, and every change to properties.yaml and the data files."""
    old, new = load(old_dir), load(new_dir)
    # A row may name a code only one of the two packs declares: the tables are read against both.
    rules = tuple(dict.fromkeys(rule_codes(old) + rule_codes(new)))
    # A change that also deletes the row showing it must not hide it: the old tables count too.
    tables = [cases_path, *([old_cases] if old_cases is not None and old_cases != cases_path else [])]
    both = [c for t in tables for pack in (old, new) for c in load_cases(t, pack, rules)]
    data = list(dict.fromkeys(data_strings(old.org) + data_strings(new.org)))
    inputs_old = _inputs(old, tables, rules, both, data)
    inputs_new = _inputs(new, tables, rules, both, data)
    before = await answers(old, inputs_old)
    after = await answers(new, inputs_new)
    common = sorted(set(before["cedar"]) & set(after["cedar"]))
    one_sided = len(set(before["cedar"]) ^ set(after["cedar"]))
    changes = [
        Change(engine, label, before[engine][label], after[engine][label], inputs_new[label].operation.value)
        for engine in ENGINES
        for label in common
        if before[engine][label] != after[engine][label]
    ]
    contract = properties_changes(properties_or_none(old_dir), properties_or_none(new_dir)) + data_changes(old, new)
    return DiffReport(changes, len(common), one_sided, contract)
