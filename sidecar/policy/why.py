"""``memgov policy explain --rule CODE``: the value of each condition of a rule on one input, in both languages.

"Why didn't rule X fire?" A Cedar policy is its scope plus ``when``/``unless`` clauses; each
clause is split at its top-level ``||`` (or else ``&&``) and every part is evaluated on its own
as a permit of the same request. A Rego rule is its body, one expression per line; the body is
evaluated line by line as a growing prefix, so the first line that stops it shows. Inputs are
decision inputs (identifiers, flags and counts), so nothing here can print memory text.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import cedarpy

from sidecar.policy import cedar_input
from sidecar.policy.model import DecisionInput
from sidecar.policy.opa_server import ToolNotFound, tool_binary
from sidecar.policy.pack import Pack
from sidecar.policy.rules import cedar_annotations, cedar_statements, code_of_id, rego_sites

_CLAUSE = re.compile(r"\b(when|unless)\s*\{")
_IF = re.compile(r"if (?P<test>.+?) then (?P<then>.+) else (?P<other>.+)")
_EFFECT = re.compile(r"^\s*(forbid|permit)\b", re.MULTILINE)
_PACKAGE: Final = "memgov.decision"


def _scan(text: str, start: int = 0) -> Iterator[tuple[int, int]]:
    """Each index from ``start`` on, strings skipped, with the bracket depth once its character is read."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = text.index('"', i + 1)
        elif ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        yield i, depth
        i += 1


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start`` (strings skipped)."""
    return next((i for i, depth in _scan(text, start) if depth == 0 and text[i] in "})]"), len(text))


def split_top(body: str) -> tuple[str, list[str]]:
    """The operator (``||``, else ``&&``, else none) a condition splits at on its top level, and its parts."""
    for op in ("||", "&&"):
        parts: list[str] = []
        last = 0
        for i, depth in _scan(body):
            if depth == 0 and i >= last and body.startswith(op, i):
                parts.append(body[last:i])
                last = i + len(op)
        parts.append(body[last:])
        if len(parts) > 1:
            return op, [" ".join(p.split()) for p in parts]
    return "", [" ".join(body.split())]


_CODE: Final = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*')


def uncomment(text: str) -> str:
    """Cedar text without its ``//`` comments (strings kept as they are)."""
    return _CODE.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)


def clauses(statement: str) -> tuple[str, list[tuple[str, str]]]:
    """A Cedar policy's scope (the text inside its head's parentheses) and its ``when``/``unless``
    clauses as (kind, body), in order; comments are left out."""
    statement = uncomment(statement)
    effect = _EFFECT.search(statement)
    if effect is None:
        return "", []
    head = statement.index("(", effect.end())
    scope = " ".join(statement[head + 1 : _closing(statement, head)].split())
    found = []
    for clause in _CLAUSE.finditer(statement):
        brace = clause.end() - 1
        found.append((clause.group(1), statement[brace + 1 : _closing(statement, brace)]))
    return scope, found


def _cedar_value(condition: str, scope: str, request: cedar_input.Request, entities: str, schema: str) -> str:
    result = cedarpy.is_authorized(dict(request), f"permit ({scope}) when {{ {condition} }};", entities, schema)
    if result.diagnostics.errors:
        return "error"
    return "true" if result.allowed else "false"


@dataclass(frozen=True)
class ClauseValue:
    """One ``when``/``unless`` clause on one input: its value, the ``if`` test if any, and its parts."""

    kind: str
    value: str
    test: tuple[str, str] | None
    op: str
    parts: list[tuple[str, str]]

    def deciding(self) -> str:
        """The parts that make the clause what it is: the true parts of a true ``||``, the false parts
        of a false ``&&``, or how many parts there are otherwise."""
        flip = {"||": "true", "&&": "false"}.get(self.op)
        if self.op == "":
            shown = self.parts[0][0]
        elif self.value != flip:
            shown = f"{'all' if self.op == '&&' else 'none'} of its {len(self.parts)} parts"
        else:
            shown = "; ".join(p for p, v in self.parts if v == flip)
        if self.test is not None:
            shown = f"if {self.test[0]} is {self.test[1]}: {shown}"
        return shown


@dataclass(frozen=True)
class PolicyValue:
    """One Cedar policy of a code on one input."""

    where: str
    ident: str
    scope: str
    applies: bool
    clauses: list[ClauseValue]


def cedar_values(pack: Pack, inp: DecisionInput, code: str) -> list[PolicyValue]:
    """Each Cedar policy answering ``code``: whether its scope applies and the value of each clause and part."""
    schema = next(iter(pack.select("cedar", ".cedarschema").values()))
    request = cedar_input.request(inp)
    entities = json.dumps(cedar_input.entities(inp))
    anything = "principal, action, resource"
    out = []
    for rel, text in sorted(pack.select("cedar", ".cedar").items()):
        for st in cedar_statements(text):
            ident = cedar_annotations(st.text).get("id", "")
            effect = _EFFECT.search(st.text)
            if code_of_id(ident) != code or effect is None:
                continue  # another rule's statement (a statement always names its effect)
            scope, found = clauses(st.text)
            applies = _cedar_value("true", scope, request, entities, schema) == "true"
            values = []
            for kind, body in found:
                value = _cedar_value(body, anything, request, entities, schema)
                flat = " ".join(body.split())
                branch = _IF.fullmatch(flat)
                test = None
                if branch:
                    # if C then T else E: the test's value, then the parts of the branch it takes.
                    test = (branch["test"], _cedar_value(branch["test"], anything, request, entities, schema))
                    flat = branch["then"] if test[1] == "true" else branch["other"]
                op, parts = split_top(flat)
                shown = [(p, _cedar_value(p, anything, request, entities, schema)) for p in parts]
                values.append(ClauseValue(kind, value, test, op, shown))
            out.append(PolicyValue(f"{rel}:{st.line}", ident, scope, applies, values))
    return out


def cedar_conditions(pack: Pack, inp: DecisionInput, code: str) -> list[str]:
    """Per Cedar policy answering ``code``: whether its scope applies and the value of each clause and part."""
    out = []
    for policy in cedar_values(pack, inp, code):
        verdict = "applies" if policy.applies else "does not apply"
        out.append(f"  cedar {policy.where} @id {policy.ident}: scope ({policy.scope}) {verdict}")
        for clause in policy.clauses:
            out.append(f"    {clause.kind} is {clause.value}:")
            if clause.test is not None:
                out.append(f"      {clause.test[1]:<5} if {clause.test[0]}")
            out.append(f"      {({'||': 'any of', '&&': 'all of'}).get(clause.op, 'one condition')}:")
            out += [f"      {v:<5} {p}" for p, v in clause.parts]
    return out


def cedar_brief(pack: Pack, inp: DecisionInput, code: str) -> list[str]:
    """Per Cedar policy answering ``code``, one line per clause: its value and the parts that decide it."""
    out = []
    for policy in cedar_values(pack, inp, code):
        if not policy.applies:
            out.append(f"cedar {policy.where} @id {policy.ident}: its scope does not apply")
            continue
        out.append(f"cedar {policy.where} @id {policy.ident}:")
        out += [f"  {c.kind:<6} {c.value:<5} {c.deciding()}" for c in policy.clauses]
    return out


_HEAD: Final = re.compile(r'^(?!default\b|package\b|import\b)(?:deny contains ("(?:[^"\\]|\\.)*")|([a-z_][a-z0-9_]*))')


def rego_rule_heads(lines: list[str]) -> list[tuple[int, str]]:
    """(0-based line, name) of every rule head of a Rego file that has a body; a deny rule is named
    ``deny["<code>"]`` as the rule tables name it."""
    out = []
    for at, line in enumerate(lines):
        m = _HEAD.match(line)
        if m is None or " if" not in line:
            continue
        out.append((at, f"deny[{m.group(1)}]" if m.group(1) else m.group(2)))
    return out


def rego_body(lines: list[str], at: int) -> list[tuple[int, str]]:
    """The top-level statements of the rule whose head is line ``at`` (0-based), each with its line;
    [] for a function, whose body cannot be evaluated without its arguments."""
    head = lines[at]
    name_end = len(head) - len(head.lstrip("abcdefghijklmnopqrstuvwxyz_0123456789"))
    if head[name_end : name_end + 1] == "(":
        return []
    if head.rstrip().endswith("{"):
        return numbered_statements(lines, at + 1)
    _, _, condition = head.partition(" if ")
    return [(at + 1, condition.strip())] if condition.strip() else []


def numbered_statements(lines: list[str], first: int) -> list[tuple[int, str]]:
    """The top-level statements of a Rego rule body starting after line ``first`` (1-based), each with
    the line it starts on; comment lines are not statements."""
    out: list[tuple[int, str]] = []
    for number, row in enumerate(lines[first:], first + 1):
        if row.startswith("}"):
            break
        if row.strip().startswith("#"):
            continue
        if row.startswith("\t") and not row.startswith("\t\t") and not row.startswith("\t}"):
            out.append((number, row.strip()))
        elif out and row.strip():
            out[-1] = (out[-1][0], out[-1][1] + "\n" + row.rstrip())
    return out


def _statements(lines: list[str], first: int) -> list[str]:
    """The top-level statements of a Rego rule body starting after line ``first`` (1-based), one per entry."""
    return [text for _, text in numbered_statements(lines, first)]


@dataclass(frozen=True)
class RuleValue:
    """One Rego deny rule of a code on one input: each body statement with the value of the body up to it."""

    where: str
    name: str
    lines: list[tuple[int, str, str]]
    problem: str = ""


def rego_values(pack: Pack, inp: DecisionInput, code: str) -> list[RuleValue]:
    """Per Rego rule answering ``code``: its body statement by statement, each with the value of the
    body up to it (the first ``false`` is where the rule stops)."""
    try:
        opa = tool_binary("opa")
    except ToolNotFound as exc:
        return [RuleValue("rego/", code, [], f"not evaluated ({exc})")]
    out = []
    for site in [s for s in rego_sites(pack) if s.code == code]:
        body = numbered_statements(pack.files[site.file].splitlines(), site.line)
        probes = [
            f"default memgov_why_{n} := false\n\nmemgov_why_{n} if {{\n" + "\n".join(t for _, t in body[:n]) + "\n}\n"
            for n in range(1, len(body) + 1)
        ]
        with tempfile.TemporaryDirectory(prefix="memgov-why-") as tmp:
            root = Path(tmp)
            for rel, text in pack.select("rego", ".rego").items():
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text, encoding="utf-8")
            (root / "why.rego").write_text(f"package {_PACKAGE}\n\n" + "\n".join(probes), encoding="utf-8")
            (root / "input.json").write_text(inp.model_dump_json(), encoding="utf-8")
            query = "[" + ", ".join(f"data.{_PACKAGE}.memgov_why_{n}" for n in range(1, len(body) + 1)) + "]"
            proc = subprocess.run(
                [
                    opa,
                    "eval",
                    "-f",
                    "json",
                    "-d",
                    str(root / "rego"),
                    "-d",
                    str(root / "why.rego"),
                    "-i",
                    str(root / "input.json"),
                    query,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        try:
            values = json.loads(proc.stdout)["result"][0]["expressions"][0]["value"]
        except (ValueError, KeyError, IndexError):
            out.append(RuleValue(site.where, site.name, [], "not evaluated: opa eval failed"))
            continue
        lines = [(n, t.replace(chr(10), " "), str(v).lower()) for (n, t), v in zip(body, values, strict=True)]
        out.append(RuleValue(site.where, site.name, lines))
    return out


def rego_conditions(pack: Pack, inp: DecisionInput, code: str) -> list[str]:
    """Per Rego rule answering ``code``: the body line by line, each with the value of the body up to it."""
    out = []
    for rule in rego_values(pack, inp, code):
        if rule.problem and not rule.lines and rule.name == code:
            return [f"  opa: {rule.problem}"]
        out.append(f"  opa   {rule.where} {rule.name}: the body so far is")
        if rule.problem:
            out.append(f"    ({rule.problem})")
            continue
        out += [f"    {value:<5} {text}" for _, text, value in rule.lines]
    return out


def rego_brief(pack: Pack, inp: DecisionInput, code: str) -> list[str]:
    """Per Rego rule answering ``code``, one line: where its body stops, or that every line holds."""
    out = []
    for rule in rego_values(pack, inp, code):
        if rule.problem:
            out.append(f"opa   {rule.where} {rule.name}: {rule.problem}")
            continue
        stop = next(((n, t) for n, t, v in rule.lines if v != "true"), None)
        shown = f"stops at line {stop[0]}: {stop[1]}" if stop else "every line holds: it denies"
        out.append(f"opa   {rule.where} {rule.name}: {shown}")
    return out
