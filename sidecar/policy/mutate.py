"""Mutated variants of the base inputs, for differential runs of two engines and for ``policy diff``.

Each variant changes one field of one base input: a flag flipped, a count moved by one, a string
perturbed (a character added or dropped, ``-``/``_`` swapped, upper case, a prefix, a label in
front, a suffix domain) or replaced by a value the case tables or the pack's data use elsewhere
(and that value perturbed), a list grown or shrunk. Rules that two packs express differently (a
list in ``org.yaml`` here, a prefix match there, an ``endswith`` where the other has ``==``)
answer differently on such near-misses, which is what the run looks for. ``data_mutants`` changes
the deployment's data instead (each limit at its smallest, a stricter cap for the input's agent, a
partner record for its principal's server, another classification), so a rule that reads the
wrong limit or a constant, or mishandles a partner record, answers differently too. Variants that
the input model refuses are dropped; the rest are content-free like every decision input.
``null_variants`` gives an input with each of its nullable objects unknown, one at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

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
    #: How the change is shown when ``path=value`` would be long (a data variant's partner record).
    shown: str = ""

    @property
    def label(self) -> str:
        """``base ~ path=value``, stable across packs (``policy diff`` matches on it)."""
        return f"{self.base} ~ {self.shown or self.path + '=' + json.dumps(self.value, sort_keys=True)}"


def perturb(text: str) -> list[str]:
    """Near-misses of a string: one more character, one fewer, - and _ swapped, upper case, and the
    string with something in front of it or after it (``evil`` + s, ``a.`` + s, s + ``.evil.net``),
    which a rule matching a suffix, a prefix or a substring admits where an exact one does not."""
    swapped = text.replace("-", "_") if "-" in text else text.replace("_", "-")
    out = [text + "x", text[:-1], swapped, text.upper(), "evil" + text, "a." + text, text + ".evil.net"]
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


#: The smallest value each limit may take (limits.yaml); a data variant sets one limit to it.
_LIMIT_FLOOR: Final = {"prefetch_searches": 0}
#: Text fields of a complete partner record (R-13), filled in a data variant's records.
_PARTNER_TEXT: Final = {
    "controller": "Example Org",
    "processor": "Partner Org",
    "purpose": "assistant-memory",
    "residency": "eu",
    "erasure_owner": "Example Org privacy team",
    "principal_binding": "mxid",
}


def _partner(server: str, origins: list[str], classification: str) -> dict[str, Any]:
    return {
        "server_name": server,
        "origins": origins,
        **_PARTNER_TEXT,
        "classification": classification,
        "retention_days": 7,
    }


def _data_changes(doc: dict[str, Any]) -> Iterator[tuple[str, Any, str]]:
    """(path, value, label) of each data change that bears on this input."""
    dep = doc.get("deployment") or {}
    limits = dep.get("limits") or {}
    for key, value in limits.items():
        if isinstance(value, int) and not isinstance(value, bool):
            floor = _LIMIT_FLOOR.get(key, 1)
            if value != floor:
                yield f"deployment.limits.{key}", floor, f"deployment.limits.{key}={floor}"
    agent = doc.get("agent")
    if isinstance(agent, dict) and isinstance(agent.get("ref"), str):
        for name in ("hourly_operations", "embedding_items_per_agent_hour"):
            entry = {"agents": [agent["ref"]], name: 1}
            yield (
                "deployment.limits.agent_limits",
                [*limits.get("agent_limits", []), entry],
                f"agent_limits+{{{agent['ref']}: {name} 1}}",
            )
    principal = doc.get("principal")
    classification = dep.get("classification", "")
    partners = list(dep.get("federation_partners") or [])
    if isinstance(principal, dict) and principal.get("server_name"):
        server, origin = principal["server_name"], principal.get("origin", "")
        other = "appservice" if origin == "remote" else "remote"
        for origins in ([origin], [other]):
            record = _partner(server, origins, classification)
            yield (
                "deployment.federation_partners",
                [*partners, record],
                f"partner+{{{server}: {','.join(origins)}}}",
            )
    if classification:
        yield "deployment.classification", "public", "deployment.classification=public"


def data_mutants(name: str, doc: dict[str, Any]) -> list[Mutant]:
    """The input under changed deployment data, one change at a time: each limit at its smallest,
    a cap of 1 for the input's agent, a complete partner record for its principal's server that
    admits its origin and one that admits another, another classification.

    Both engines (or both packs) see the same data, so only a rule that reads the wrong limit, a
    number of its own instead of the limit, or a partner record wrongly, answers differently.
    """
    out = []
    for path, value, label in _data_changes(doc):
        try:
            inp = DecisionInput.model_validate(with_set(doc, path, value))
        except ValidationError:
            continue  # e.g. a global limit now below an agent_limits entry
        out.append(Mutant(name, path, value, inp, label))
    return out
