"""Mutated variants of the base inputs, for differential runs of two engines and for ``policy diff``.

Each variant changes one field of one base input (never the pack's own data): a flag flipped, a
count moved by one, a string perturbed (a character added or dropped, ``-``/``_`` swapped, upper
case) or replaced by a value the case tables or the pack's data use elsewhere (and that value
perturbed), a list grown or shrunk. Rules that two packs express differently (a list in
``org.yaml`` here, a prefix match there) answer differently on such near-misses, which is what the
run looks for. Variants that the input model refuses are dropped; the rest are content-free like
every decision input.
``null_variants`` gives an input with each of its nullable objects unknown, one at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sidecar.policy.model import DecisionInput
from sidecar.policy.tree import with_set

#: Values taken from the tables for one path, and data strings, at most this many each.
_VOCAB_PER_PATH = 6
_DATA_STRINGS = 12
#: Deployment fields memgov fills from the pack's data files: the floor and the tables own the limits,
#: and an org list or partner record mutated would exist for one pack only.
_PACK_DATA = frozenset({"deployment.limits", "deployment.org", "deployment.federation_partners"})
#: The objects a decision input may leave unknown (null), each of which every rule must survive.
NULLABLE = ("principal", "agent", "scope", "room", "audience", "room.server_acl", "request.context_scope")


@dataclass(frozen=True)
class Mutant:
    """One variant: the base it came from, the one change (``path = value``) and the input."""

    base: str
    path: str
    value: Any
    inp: DecisionInput

    @property
    def label(self) -> str:
        """``base ~ path=value``, stable across packs (``policy diff`` matches on it)."""
        return f"{self.base} ~ {self.path}={json.dumps(self.value, sort_keys=True)}"


def perturb(text: str) -> list[str]:
    """Near-misses of a string: one more character, one fewer, - and _ swapped, upper case."""
    out = [text + "x", text[:-1], text.replace("-", "_") if "-" in text else text.replace("_", "-"), text.upper()]
    return [s for s in dict.fromkeys(out) if s != text]


def _leaves(doc: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            path = f"{prefix}.{key}" if prefix else key
            if path in _PACK_DATA:
                continue  # the pack's own data: two packs are compared on the same request, not the same data
            if isinstance(value, dict) and value:
                yield path, value
                yield from _leaves(value, path)
            else:
                yield path, value
    else:
        yield prefix, doc


def _changes(value: Any, seen: list[Any], data: list[str]) -> list[Any]:
    found: list[Any] = list(seen)
    if isinstance(value, bool):
        found.append(not value)
    elif isinstance(value, int):
        found += [value + 1, value - 1, 0]
    elif isinstance(value, str):
        found += perturb(value)
        for other in [s for s in seen if isinstance(s, str)] + data:
            found += [other, *perturb(other)]
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        found += [value[:-1], []] if value else []
        found += [[*value, other] for other in data[:3]]
        found += [[*value[:-1], other] for other in data[:3] if value]
    elif isinstance(value, dict):
        found.append(None)
    return found


def vocabulary(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Values the case tables set per dotted path (``facts`` excluded: it is measured, not stored)."""
    vocab: dict[str, list[Any]] = {}
    for changes in rows:
        for path, value in (changes or {}).items():
            if path == "facts":
                continue
            known = vocab.setdefault(path, [])
            if value not in known and len(known) < _VOCAB_PER_PATH:
                known.append(value)
    return vocab


def data_strings(org: dict[str, list[str]]) -> list[str]:
    """The identifiers of the pack's org lists, the likeliest targets of an organisation's rule."""
    return list(dict.fromkeys(s for values in org.values() for s in values))[:_DATA_STRINGS]


def mutants(bases: dict[str, dict[str, Any]], vocab: dict[str, list[Any]], data: list[str]) -> list[Mutant]:
    """Every valid one-change variant of every base input, deduplicated."""
    out: dict[str, Mutant] = {}
    for name, doc in bases.items():
        original = json.dumps(doc, sort_keys=True)
        for path, value in list(_leaves(doc)):
            for change in _changes(value, vocab.get(path, []), data):
                changed = with_set(doc, path, change)
                text = json.dumps(changed, sort_keys=True)
                if text == original:
                    continue
                try:
                    inp = DecisionInput.model_validate(changed)
                except ValidationError:
                    continue
                mutant = Mutant(name, path, change, inp)
                out.setdefault(mutant.label, mutant)
    return list(out.values())


def null_variants(name: str, doc: dict[str, Any]) -> list[Mutant]:
    """The input with each nullable object that it has set to null (unknown), one at a time."""
    out = []
    for path in NULLABLE:
        node: Any = doc
        for key in path.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        if node is None:
            continue
        try:
            inp = DecisionInput.model_validate(with_set(doc, path, None))
        except ValidationError:
            continue
        out.append(Mutant(name, path, None, inp))
    return out
