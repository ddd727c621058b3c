"""A counterexample as few fields away as possible from a named base case.

The solver's counterexample is a whole decision input with arbitrary values: servers named ``A``,
counts of 2^53. A reviewer wants the one or two facts that matter. Starting from the solver's
input, every string it invented is first renamed to the value the base case holds in the same
place (a consistent renaming keeps which fields are equal, which is all a rule can see); then
each field that still differs is set back to the base's value, one at a time, as long as the
input stays a counterexample. What is left differs from the base only where it must. The base is
the one of the same operation (``policy-tests/base.yaml``) that leaves the fewest fields.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from sidecar.policy.model import DecisionInput
from sidecar.policy.tree import with_set

#: Whole passes over the remaining fields; each pass only ever shrinks the difference.
_PASSES: Final = 4


@dataclass(frozen=True)
class Change:
    """One field of the counterexample that differs from its base."""

    path: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.path}: {_show(self.before)} -> {_show(self.after)}"


@dataclass(frozen=True)
class Nearest:
    """A reduced counterexample: the base it is closest to and the fields that differ from it."""

    base: str
    inp: DecisionInput
    changes: list[Change]


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _diff(base: Any, doc: Any, prefix: str = "") -> Iterator[str]:
    """Paths where two documents differ, descending only where both sides are objects."""
    if isinstance(base, dict) and isinstance(doc, dict):
        for key in sorted(set(base) | set(doc)):
            yield from _diff(base.get(key), doc.get(key), f"{prefix}.{key}" if prefix else key)
    elif base != doc:
        yield prefix


def _get(doc: Any, path: str) -> Any:
    for key in path.split("."):
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def changes(base: dict[str, Any], doc: dict[str, Any]) -> list[Change]:
    """Every field of ``doc`` that differs from ``base``, in path order."""
    return [Change(p, _get(base, p), _get(doc, p)) for p in _diff(base, doc)]


def _pairs(base: Any, doc: Any) -> Iterator[tuple[str, str]]:
    """(solver's string, base's string) found in the same place of both documents."""
    if isinstance(base, dict) and isinstance(doc, dict):
        for key in set(base) & set(doc):
            yield from _pairs(base[key], doc[key])
    elif isinstance(base, list) and isinstance(doc, list):
        for a, b in zip(base, doc, strict=False):
            yield from _pairs(a, b)
    elif isinstance(base, str) and isinstance(doc, str) and base != doc:
        yield doc, base


def _rename(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list):
        return [_rename(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _rename(v, names) for k, v in value.items()}
    return value


class _Search:
    def __init__(self, still: Callable[[DecisionInput], bool]) -> None:
        self.still = still

    def accept(self, doc: dict[str, Any]) -> DecisionInput | None:
        try:
            inp = DecisionInput.model_validate(doc)
        except ValidationError:
            return None
        return inp if self.still(inp) else None

    def renamed(self, base: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` with the solver's strings renamed to the base's where that keeps it a counterexample."""
        found: dict[str, set[str]] = {}
        for mine, theirs in _pairs(base, doc):
            found.setdefault(mine, set()).add(theirs)
        # A string the base spells two ways in places where the solver used one is left alone.
        names = {mine: next(iter(t)) for mine, t in found.items() if len(t) == 1}
        whole: dict[str, Any] = _rename(doc, names)
        if names and self.accept(whole) is not None:
            return whole
        for mine, theirs in sorted(names.items()):
            candidate: dict[str, Any] = _rename(doc, {mine: theirs})
            if self.accept(candidate) is not None:
                doc = candidate
        return doc

    def reverted(self, base: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` with every field that can go back to the base's value set back, one at a time."""
        for _ in range(_PASSES):
            shrunk = False
            for path in list(_diff(base, doc)):
                candidate = with_set(doc, path, _get(base, path), create=True)
                if self.accept(candidate) is not None:
                    doc, shrunk = candidate, True
            if not shrunk:
                break
        return doc


#: A row plus at most this many of the counterexample's fields is tried, when it differs from the row in at
#: most _SEED_FIELDS fields (so at most a few thousand inputs per row are decided).
_SEED_DEPTH: Final = 3
_SEED_FIELDS: Final = 24


def _from_seed(search: _Search, seed: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any] | None:
    """A row that a rule refuses, plus the fewest of the counterexample's fields that make it a counterexample."""
    paths = list(_diff(seed, doc))
    if len(paths) > _SEED_FIELDS:
        return None
    for size in range(_SEED_DEPTH + 1):
        for chosen in itertools.combinations(paths, size):
            candidate = seed
            for path in chosen:
                candidate = with_set(candidate, path, _get(doc, path), create=True)
            if search.accept(candidate) is not None:
                return candidate
    return None


def nearest(
    inp: DecisionInput,
    bases: dict[str, dict[str, Any]],
    still: Callable[[DecisionInput], bool],
    seeds: list[tuple[str, DecisionInput]] | None = None,
) -> Nearest | None:
    """``inp`` reduced towards the base of its operation that leaves the fewest differing fields.

    ``still`` says whether an input is still a counterexample (it must hold for ``inp``). ``seeds``
    are case rows (base name, input) that the rules meant to refuse such inputs do refuse: a row
    plus a few of the counterexample's fields is often a smaller counterexample than the solver's,
    whose violation may be a strange one. None when no base has the input's operation.
    """
    doc = inp.model_dump(mode="json")
    search = _Search(still)
    best: Nearest | None = None
    normal: dict[str, dict[str, Any]] = {}
    for name, raw in bases.items():
        if raw.get("operation") != doc["operation"]:
            continue
        try:
            normal[name] = DecisionInput.model_validate(raw).model_dump(mode="json")
        except ValidationError:
            continue
    candidates = [(name, search.reverted(base, search.renamed(base, doc))) for name, base in normal.items()]
    for name, row in seeds or []:
        if name not in normal or row.operation.value != doc["operation"]:
            continue
        # Seeded from the solver's input as reduced towards the row's base: far fewer fields to try.
        start = next(c for n, c in candidates if n == name)
        found = _from_seed(search, row.model_dump(mode="json"), start)
        if found is not None:
            candidates.append((name, search.reverted(normal[name], found)))
    for name, reduced in candidates:
        accepted = search.accept(reduced)
        if accepted is None:
            continue
        diff = changes(normal[name], reduced)
        if best is None or len(diff) < len(best.changes):
            best = Nearest(name, accepted, diff)
    return best


#: How many batches ``nearest_batch`` asks at most per base (each batch is one evaluation of many inputs).
_BATCHES: Final = 24


async def nearest_batch(
    inp: DecisionInput,
    bases: dict[str, dict[str, Any]],
    still_many: Callable[[list[DecisionInput]], Awaitable[list[bool]]],
) -> Nearest | None:
    """``nearest`` for a test that is costly per call but cheap per input (an ``opa eval`` of many inputs):
    each round asks about every single-field revert at once, then about the longest run of the ones
    that kept it, so a reduction takes a few evaluations instead of one per field."""
    doc = inp.model_dump(mode="json")
    best: Nearest | None = None
    for name, raw in bases.items():
        if raw.get("operation") != doc["operation"]:
            continue
        try:
            base = DecisionInput.model_validate(raw).model_dump(mode="json")
        except ValidationError:
            continue
        current = doc
        for _ in range(_BATCHES):
            paths = list(_diff(base, current))
            tried = [(p, with_set(current, p, _get(base, p), create=True)) for p in paths]
            valid = [(p, d, v) for p, d in tried if (v := _valid(d)) is not None]
            kept = [p for (p, _, _), ok in zip(valid, await still_many([v for _, _, v in valid]), strict=True) if ok]
            if not kept:
                break
            runs = []
            for k in range(1, len(kept) + 1):
                run = current
                for p in kept[:k]:
                    run = with_set(run, p, _get(base, p), create=True)
                runs.append(run)
            checked = [(d, v) for d in runs if (v := _valid(d)) is not None]
            answers = await still_many([v for _, v in checked])
            good = [d for (d, _), ok in zip(checked, answers, strict=True) if ok]
            current = good[-1] if good else runs[0]
        final = _valid(current)
        if final is None or not (await still_many([final]))[0]:
            continue
        diff = changes(base, current)
        if best is None or len(diff) < len(best.changes):
            best = Nearest(name, final, diff)
    return best


def _valid(doc: dict[str, Any]) -> DecisionInput | None:
    try:
        return DecisionInput.model_validate(doc)
    except ValidationError:
        return None
