"""Which limits each rule reads, in both languages: the "typed keys" ``memgov policy check`` holds them to.

A rule answering a code may read only the limits.yaml keys that code names (``rules.limit_keys``):
the embedding size rule reads ``embedding_item_bytes``, never ``max_fact_bytes``, even while both
are 512 and no case or proof can tell them apart. Cedar policies are plain text: every
``context.deployment.limits.<key>`` (or ``["<key>"]``) outside comments and annotations, and the
agent caps memgov joins in (``context.agent.embeddingCap``, ``hourlyCap``). Rego rules call helpers,
so the Rego pack is read as OPA parses it (``opa parse --format json``): each ``deny`` rule's reads
are its own and those of every rule and function it reaches, a function's ``limits[name]`` resolved
to the string its caller passes.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sidecar.policy.cedar_input import LIMIT_NAMES
from sidecar.policy.opa_server import tool_binary
from sidecar.policy.pack import Pack
from sidecar.policy.rules import (
    CEDAR_ANNOTATION,
    CEDAR_COMMENT,
    cedar_annotations,
    cedar_statements,
    code_of_id,
    limit_keys,
    rego_sites,
)

#: Every limit at once: a rule that reads the whole limits record (or a key it computes).
EVERY: Final = "*"


#: Cedar's names of the limits and of the agent caps memgov joins in (cedar_input).
_CEDAR_LIMITS: Final = LIMIT_NAMES
_CEDAR_CAPS: Final = {"embeddingCap": "embedding_items_per_agent_hour", "hourlyCap": "hourly_operations"}
_DOT: Final = r"\s*\.\s*"
_LIMITS: Final = re.compile(
    rf"\bcontext{_DOT}deployment{_DOT}limits(?:{_DOT}(\w+)|\s*\[\s*\"(\w+)\"\s*\]|(?!\s*[.\[\w]))"
)
_CAPS: Final = re.compile(rf"\bcontext{_DOT}agent{_DOT}(embeddingCap|hourlyCap)\b")


@dataclass(frozen=True)
class Misread:
    """A rule reading a limit its code does not name."""

    where: str
    rule: str
    code: str
    limit: str
    allowed: frozenset[str]

    def __str__(self) -> str:
        own = ", ".join(sorted(self.allowed)) or "no limit"
        what = "the whole limits record" if self.limit == EVERY else f"limit {self.limit}"
        return f"{self.where}: {self.rule} reads {what}, but {self.code} reads only {own}"


def cedar_reads(text: str) -> set[str]:
    """The limits.yaml keys one Cedar policy's text reads (EVERY for the whole record)."""
    code = CEDAR_COMMENT.sub("", CEDAR_ANNOTATION.sub("", text))
    found: set[str] = set()
    for m in _LIMITS.finditer(code):
        name = m.group(1) or m.group(2)
        found.add(_CEDAR_LIMITS.get(name, name) if name else EVERY)
    found.update(_CEDAR_CAPS[m.group(1)] for m in _CAPS.finditer(code))
    return found


def _check(found: set[str], allowed: frozenset[str]) -> list[str]:
    return sorted(k for k in found if k not in allowed)


def cedar_misreads(pack: Pack) -> list[Misread]:
    """Cedar policies reading a limit their code does not name."""
    keys = limit_keys(pack)
    out = []
    for rel, text in sorted(pack.select("cedar", ".cedar").items()):
        for st in cedar_statements(text):
            ident = cedar_annotations(st.text).get("id", "")
            code = code_of_id(ident)
            if code is None:
                continue
            allowed = keys.get(code, frozenset())
            out += [
                Misread(f"{rel}:{st.line}", f"@id {ident}", code, k, allowed)
                for k in _check(cedar_reads(st.text), allowed)
            ]
    return out


# ---------------------------------------------------------------------------------------------
# Rego: OPA's AST of every rule, its direct reads and the rules it reaches.
# ---------------------------------------------------------------------------------------------


@dataclass
class _Rule:
    params: list[str]
    reads: set[str]
    #: Parameter positions whose value names the limit read (``limits[name]``).
    param_reads: set[int]
    #: (callee, string literal arguments by position) for every rule or function it refers to.
    calls: list[tuple[str, dict[int, str]]]


def _ref_path(term: dict[str, Any]) -> list[dict[str, Any]]:
    value = term.get("value")
    return value if term.get("type") == "ref" and isinstance(value, list) else []


def _limit_read(path: list[dict[str, Any]], params: list[str]) -> tuple[str | None, int | None]:
    """(key, None) or (None, parameter index) for a read of ``input.deployment.limits``; (None, None) else."""
    words = [p.get("value") for p in path[:3]]
    if words != ["input", "deployment", "limits"] or path[0].get("type") != "var":
        return None, None
    if len(path) < 4:
        return EVERY, None
    key = path[3]
    if key.get("type") == "string":
        return str(key["value"]), None
    if key.get("type") == "var" and key.get("value") in params:
        return None, params.index(key["value"])
    return EVERY, None


def _literal_args(args: list[Any]) -> dict[int, str]:
    return {i: str(a["value"]) for i, a in enumerate(args) if isinstance(a, dict) and a.get("type") == "string"}


class _Visitor:
    """Walks one rule's AST, collecting its limit reads and the rules and functions it refers to."""

    def __init__(self, name: str, names: set[str], rule: _Rule) -> None:
        self.name, self.names, self.rule = name, names, rule

    def _refer(self, term: Any, args: list[Any]) -> bool:
        """Record ``term`` as a reference to a rule or function (with ``args``); True when it is one."""
        if not isinstance(term, dict):
            return False
        path = _ref_path(term)
        head = path[0] if path else term
        target = head.get("value") if head.get("type") == "var" else None
        if target not in self.names or target == self.name:
            return target in self.names
        self.rule.calls.append((str(target), _literal_args(args)))
        return True

    def visit(self, node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                self.visit(item)
            return
        if not isinstance(node, dict):
            return
        kind, value = node.get("type"), node.get("value")
        if "terms" in node and isinstance(node["terms"], list) and node["terms"]:
            # An expression: a call is [function, args...], anything else a term to walk.
            terms = node["terms"]
            if self._refer(terms[0], terms[1:]):
                self.visit(terms[1:])
            else:
                self.visit(terms)
            self.visit({k: v for k, v in node.items() if k not in ("terms",)})
            return
        if kind == "call" and isinstance(value, list) and value:
            if not self._refer(value[0], value[1:]):
                self.visit(value[0])
            self.visit(value[1:])
            return
        if kind == "ref" and isinstance(value, list):
            key, index = _limit_read(value, self.rule.params)
            if key is not None:
                self.rule.reads.add(key)
            if index is not None:
                self.rule.param_reads.add(index)
            self._refer(node, [])
            self.visit(value[1:])
            return
        if kind == "var":
            self._refer(node, [])
            return
        for child in node.values():
            self.visit(child)


def _rule(raw: dict[str, Any], names: set[str]) -> tuple[str, _Rule]:
    head = raw["head"]
    name = str(head.get("name") or head["ref"][0]["value"])
    params = [a.get("value") for a in head.get("args", []) if isinstance(a, dict)]
    rule = _Rule([str(p) for p in params], set(), set(), [])
    _Visitor(name, names, rule).visit([head.get("key"), head.get("value"), raw.get("body"), raw.get("else")])
    return name, rule


def _merge(into: dict[str, _Rule], name: str, rule: _Rule) -> None:
    if name not in into:
        into[name] = rule
        return
    known = into[name]
    known.reads |= rule.reads
    known.param_reads |= rule.param_reads
    known.calls += rule.calls


def _reach(rules: dict[str, _Rule], start: _Rule) -> set[str]:
    """Every limit a rule reads, through the rules and functions it reaches."""
    found = set(start.reads)
    seen: set[int] = {id(start)}
    todo = [start]
    while todo:
        rule = todo.pop()
        for callee, args in rule.calls:
            target = rules.get(callee)
            if target is None:
                continue
            for index in target.param_reads:
                found.add(args.get(index, EVERY))
            if id(target) not in seen:
                seen.add(id(target))
                found |= target.reads
                todo.append(target)
    return found


def _parse(opa: str, rel: str, text: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="memgov-reads-") as tmp:
        path = Path(tmp) / Path(rel).name
        path.write_text(text, encoding="utf-8")
        proc = subprocess.run(
            [opa, "parse", "--format", "json", str(path)], capture_output=True, text=True, timeout=60, check=False
        )
    if proc.returncode != 0:
        return {}  # a file that does not parse is the compile step's finding
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def rego_misreads(pack: Pack) -> list[Misread]:
    """Rego deny rules reading, themselves or through what they call, a limit their code does not name.

    ToolNotFound when no ``opa`` binary is at hand.
    """
    opa = tool_binary("opa")
    files = pack.select("rego", ".rego")
    docs = {rel: _parse(opa, rel, text) for rel, text in sorted(files.items())}
    raws = [(rel, r) for rel, doc in docs.items() for r in doc.get("rules") or []]
    names = {str(r["head"].get("name") or r["head"]["ref"][0]["value"]) for _, r in raws}
    rules: dict[str, _Rule] = {}
    denies: list[tuple[str | None, _Rule]] = []
    for _, raw in raws:
        name, rule = _rule(raw, names)
        if name == "deny":
            key = raw["head"].get("key") or {}
            denies.append((str(key["value"]) if key.get("type") == "string" else None, rule))
        else:
            _merge(rules, name, rule)
    sites = [s for s in rego_sites(pack) if s.code is not None]
    keys = limit_keys(pack)
    out: list[Misread] = []
    # OPA lists a file's rules in order, as rego_sites finds the deny heads: pair them up by code.
    by_code: dict[str, list[str]] = {}
    for site in sites:
        by_code.setdefault(site.code or "", []).append(site.where)
    taken: dict[str, int] = {}
    for code, rule in denies:
        if code is None:
            continue
        spots = by_code.get(code, ["rego/"])
        where = spots[min(taken.get(code, 0), len(spots) - 1)]
        taken[code] = taken.get(code, 0) + 1
        allowed = keys.get(code, frozenset())
        out += [Misread(where, f'deny["{code}"]', code, k, allowed) for k in _check(_reach(rules, rule), allowed)]
    return out
