"""The rules of a pack, found without an engine: each Cedar policy and Rego deny rule, its code, file:line.

A Cedar policy's reason code is its ``@id`` in kebab-case, optionally with a ``/suffix`` so one
code can have several policies (``@id("agent-mismatch/finance")``). A Rego rule's code is the
string literal of its ``deny contains "<code>"`` head, which must equal its METADATA
``custom.reason``. The codes every pack must answer with are the built-in rule codes plus the
codes the pack declares in ``data/reasons.yaml``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

import yaml

from sidecar.policy.pack import Pack
from sidecar.reasons import RULE_REASONS

#: The built-in reason codes pack rules answer with; each needs rules in both languages and cases.
BUILT_IN_RULES: Final[tuple[str, ...]] = tuple(r.value for r in RULE_REASONS)
#: The Cedar @id of the single permit; it answers "allowed", not a denial code.
PERMIT_ID: Final = "allowed"
#: The limits.yaml keys each built-in code's rules read (their "typed keys"): a rule of a code
#: reading any other limit fails ``memgov policy check`` (e.g. the embedding size rule reading the
#: fact size limit, which goes unnoticed while both are 512). ``agent_limits`` stands for the
#: agents' own caps (Cedar: ``context.agent.embeddingCap`` and ``hourlyCap``). A declared code lists
#: its keys in data/reasons.yaml (``limits:``); a code not named reads no limit.
LIMIT_KEYS: Final[dict[str, frozenset[str]]] = {
    "entry_cap_reached": frozenset({"max_entries"}),
    "fact_too_large": frozenset({"max_fact_bytes"}),
    "batch_too_large": frozenset({"max_batch_facts"}),
    "embedding_item_too_large": frozenset({"embedding_item_bytes"}),
    "hourly_budget_exhausted": frozenset({"hourly_operations", "embedding_items_per_agent_hour", "agent_limits"}),
}

_KEBAB: Final = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_DENY: Final = re.compile(r'^deny\s+contains\s+("(?:[^"\\]|\\.)*"|[^\s{]+)')
_RULE_START: Final = re.compile(r"^deny\b")


@dataclass(frozen=True)
class Site:
    """One rule: engine (cedar, opa), reason code (None when unreadable), its name and file:line."""

    engine: str
    code: str | None
    name: str
    file: str
    line: int
    #: Rego only: custom.reason from the rule's METADATA (None when absent).
    declared_reason: str | None = None
    #: Cedar only: ``permit`` or ``forbid`` ("" when the statement names neither).
    effect: str = ""

    @property
    def where(self) -> str:
        """``file:line`` of the rule's first line."""
        return f"{self.file}:{self.line}"


def rule_codes(pack: Pack) -> tuple[str, ...]:
    """Every code a rule of this pack may answer with: built-in rule codes, then declared ones."""
    return BUILT_IN_RULES + tuple(d.code for d in pack.reasons)


def limit_keys(pack: Pack) -> dict[str, frozenset[str]]:
    """The limits each code's rules may read: the built-in table and what data/reasons.yaml declares."""
    return {**LIMIT_KEYS, **{d.code: frozenset(d.limits) for d in pack.reasons}}


def code_of_id(ident: str) -> str | None:
    """The reason code a Cedar @id stands for (``agent-mismatch/x`` → ``agent_mismatch``), None if malformed."""
    head, _, suffix = ident.partition("/")
    if not _KEBAB.fullmatch(head) or ("/" in ident and not _KEBAB.fullmatch(suffix)):
        return None
    return head.replace("-", "_")


# ---------------------------------------------------------------------------------------------
# Cedar: statements are split at top-level semicolons (outside strings and comments), which is
# all the grammar needed to give every policy a file and a first line.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    """One Cedar policy's text and the line its first token is on."""

    line: int
    text: str


def cedar_statements(text: str) -> list[Statement]:
    """Split a .cedar file into policy statements (a trailing fragment without ';' is one too)."""
    out: list[Statement] = []
    start, first, line, i, n = 0, 0, 1, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif ch == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line += 1
                i += 1
        elif not ch.isspace() and not first:
            first = line
        if ch == ";":
            out.append(Statement(first, text[start : i + 1]))
            start, first = i + 1, 0
        i += 1
    if first:
        out.append(Statement(first, text[start:]))
    return out


#: A Cedar ``@name("value")`` annotation, and a ``//`` comment.
CEDAR_ANNOTATION: Final = re.compile(r'@(\w+)\s*\(\s*"((?:[^"\\]|\\.)*)"\s*\)')
CEDAR_COMMENT: Final = re.compile(r"//[^\n]*")
_EFFECT: Final = re.compile(r"(permit|forbid)\b")


def _head(statement: str) -> tuple[dict[str, str], str]:
    """The annotations at the head of one statement, and what follows them (comments left out)."""
    found: dict[str, str] = {}
    body = CEDAR_COMMENT.sub("", statement).lstrip()
    while (m := CEDAR_ANNOTATION.match(body)) is not None:
        found.setdefault(m.group(1), m.group(2))
        body = body[m.end() :].lstrip()
    return found, body


def cedar_annotations(statement: str) -> dict[str, str]:
    """The ``@name("value")`` annotations at the head of one statement."""
    return _head(statement)[0]


def cedar_effect(statement: str) -> str:
    """``permit`` or ``forbid``: the word after a statement's annotations ("" when it is neither)."""
    found = _EFFECT.match(_head(statement)[1])
    return found.group(1) if found else ""


def cedar_sites(pack: Pack) -> list[Site]:
    """Every Cedar policy in file order, with the reason code of its @id (the permit has code None)."""
    sites = []
    for rel, text in sorted(pack.select("cedar", ".cedar").items()):
        for st in cedar_statements(text):
            ident = cedar_annotations(st.text).get("id", "")
            code = None if ident == PERMIT_ID else code_of_id(ident)
            sites.append(Site("cedar", code, ident or "(no @id)", rel, st.line, effect=cedar_effect(st.text)))
    return sites


# ---------------------------------------------------------------------------------------------
# Rego: deny rules start at column 0 in opa fmt layout; their METADATA block sits right above.
# ---------------------------------------------------------------------------------------------


def rule_metadata(lines: list[str], at: int) -> dict[str, Any]:
    """The METADATA block right above line ``at`` (0-based) of a Rego file, parsed ({} when none)."""
    block: list[str] = []
    i = at - 1
    while i >= 0 and lines[i].startswith("#"):
        block.insert(0, lines[i])
        i -= 1
    if not block or block[0].strip() != "# METADATA":
        return {}
    try:
        doc = yaml.safe_load("\n".join(line[2:] if line.startswith("# ") else line[1:] for line in block[1:]))
    except yaml.YAMLError:
        return {}
    return doc if isinstance(doc, dict) else {}


def rego_sites(pack: Pack) -> list[Site]:
    """Every ``deny`` rule of the Rego pack (tests excluded), with the literal code of its head."""
    sites = []
    for rel, text in sorted(pack.select("rego", ".rego").items()):
        lines = text.splitlines()
        for at, line in enumerate(lines):
            if not _RULE_START.match(line):
                continue
            m = _DENY.match(line)
            key = m.group(1) if m else ""
            code = key[1:-1] if key.startswith('"') else None
            custom = rule_metadata(lines, at).get("custom")
            reason = custom.get("reason") if isinstance(custom, dict) else None
            named = reason if isinstance(reason, str) else None
            sites.append(Site("opa", code, f"deny[{key or '?'}]", rel, at + 1, named))
    return sites
