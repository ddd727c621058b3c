"""``memgov policy diff --semantic``: per action, whether two packs decide every request alike.

Two questions, each answered by the solver for all requests of an action at once:

- **rules**: do the two packs' Cedar policies decide alike under any valid data (both reading the
  same data)? A change that matters only for data the pack does not ship yet (a partner record,
  another limit) is a change too.
- **data** (only when the data files differ): does the old pack with its data decide like the new
  pack with its data? The old pack's policies read its own data as constants
  (assumptions.inline_data) while the request carries the new data, so a data-only change (a
  looser limit, a new partner) is a semantic change.

A changed action comes with one request, reduced towards a base case, decided by both engines of
both packs (each pack with its own data for the data question).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

from sidecar.policy.assumptions import any_data, inline_data, pack_data, schema_with_empty_set
from sidecar.policy.counterexample import Example, Oracle, explained, reduced, to_input, with_data
from sidecar.policy.model import DecisionInput
from sidecar.policy.pack import Pack
from sidecar.policy.properties import Properties
from sidecar.policy.prove import SCHEMA_FILE, Tables, answer_codes, assume_forbid
from sidecar.policy.review import ENGINES, answers
from sidecar.policy.symcc import Verdict, run_helper, verdicts

RULES: Final = "rules"
DATA: Final = "data"
#: The two directions each question is asked in: does the new pack admit a request the old one
#: refuses (``loosens``), or refuse one the old one admits (``tightens``)?
LOOSENS: Final = "loosens"
TIGHTENS: Final = "tightens"


def _policies(pack: Pack) -> str:
    return "\n".join(text for _, text in sorted(pack.select("cedar", ".cedar").items()))


def same_data(old: Pack, new: Pack) -> bool:
    """True when both packs carry the same limits, federation data and org lists."""
    return (old.limits, old.federation, old.org) == (new.limits, new.federation, new.org)


def _both_ways(question: str, old: str, new: str) -> list[dict[str, Any]]:
    """A request the new policies allow and the old refuse, and one the other way round."""
    return [
        {"name": f"{question} {LOOSENS}", "kind": "implies", "actions": [], "lhs": new, "rhs": old},
        {"name": f"{question} {TIGHTENS}", "kind": "implies", "actions": [], "lhs": old, "rhs": new},
    ]


def equivalence_job(old: Pack, new: Pack, props: Properties) -> dict[str, Any]:
    """The helper's job: the rules question, and the data question when the data differ, both ways."""
    shared = assume_forbid(f"({props.assume}) &&\n  {any_data()}")
    checks = _both_ways(RULES, _policies(old) + "\n" + shared, _policies(new) + "\n" + shared)
    if not same_data(old, new):
        pinned = assume_forbid(f"({props.assume}) &&\n  {pack_data(new)}")
        checks += _both_ways(DATA, inline_data(old, _policies(old)) + "\n" + pinned, _policies(new) + "\n" + pinned)
    return {"schema": schema_with_empty_set(new.files[SCHEMA_FILE]), "checks": checks}


@dataclass(frozen=True)
class ActionDiff:
    """One action under one question and direction: no such request, or one, decided by both packs."""

    question: str
    direction: str
    action: str
    changed: bool
    example: Example | None = None
    #: The request as the old pack decides it (its own data for the data question).
    old_input: DecisionInput | None = None


class _Differs:
    """Still a request the new pack admits and the old refuses (or the other way round)."""

    def __init__(self, old: Pack, new: Pack, props: Properties, question: str, direction: str) -> None:
        self.old, self.new = Oracle(old), Oracle(new, {"assume": props.assume})
        self.old_pack, self.question, self.direction = old, question, direction

    def old_view(self, inp: DecisionInput) -> DecisionInput:
        return with_data(inp, self.old_pack) if self.question == DATA else inp

    def __call__(self, inp: DecisionInput) -> bool:
        if self.new.holds(inp).get("assume") is not True:
            return False
        before, after = self.old.decide(self.old_view(inp)), self.new.decide(inp)
        if self.direction == LOOSENS:
            return after == "allow" and before.startswith("deny")
        return before == "allow" and after.startswith("deny")


def _example(
    old: Pack, new: Pack, props: Properties, v: Verdict, tables: Tables
) -> tuple[Example, DecisionInput | None]:
    question, direction = v.prop.split()
    try:
        inp = to_input(v.counterexample or {}, new, own_data=question == RULES)
    except ValueError as exc:
        return Example(v, None, raw=v.counterexample, problem=str(exc)), None
    differs = _Differs(old, new, props, question, direction)
    said = (differs.old.decide(differs.old_view(inp)), differs.new.decide(inp))
    codes = {c for answer in said for c in answer.split()[1:]}
    seeds = [(c.base, c.inp) for c in tables.rows if c.rule in codes and c.kind != "allow"]
    example = reduced(v, inp, tables.bases, differs, seeds)
    return example, differs.old_view(example.inp) if example.inp is not None else None


async def semantic_diff(old: Pack, new: Pack, props: Properties, tables: Tables) -> list[ActionDiff]:
    """Per action, question and direction, whether the new pack decides a request the other way; each
    such request reduced towards a base and decided by both engines of both packs."""
    results = verdicts(run_helper(equivalence_job(old, new, props)))
    out = []
    for v in sorted(results, key=lambda r: (r.action, r.prop)):
        question, direction = v.prop.split()
        if v.proved:
            out.append(ActionDiff(question, direction, v.action, False))
            continue
        example, old_input = _example(old, new, props, v, tables)
        out.append(ActionDiff(question, direction, v.action, True, example, old_input))
    return await _decided(old, new, out)


def _key(d: ActionDiff) -> str:
    return f"{d.question} {d.direction} {d.action}"


async def _decided(old: Pack, new: Pack, diffs: list[ActionDiff]) -> list[ActionDiff]:
    """Each changed request decided by both engines of both packs, and the rules that answered explained."""
    mine = {
        f"{d.question} {d.direction} {d.action}": d
        for d in diffs
        if d.example is not None and d.example.inp is not None
    }
    if not mine:
        return diffs
    before = await answers(
        old, {k: d.old_input or d.example.inp for k, d in mine.items() if d.example and d.example.inp}
    )
    after = await answers(new, {k: d.example.inp for k, d in mine.items() if d.example and d.example.inp})
    out = []
    for d in diffs:
        key = _key(d)
        if key not in mine or d.example is None or d.example.inp is None:
            out.append(d)
            continue
        said = tuple((f"old {e}", before[e][key]) for e in ENGINES) + tuple(
            (f"new {e}", after[e][key]) for e in ENGINES
        )
        codes = sorted({c for _, a in said for c in answer_codes(a)})
        why = explained(new, d.example.inp, codes)
        out.append(replace(d, example=replace(d.example, answers=said, why=why)))
    return out
