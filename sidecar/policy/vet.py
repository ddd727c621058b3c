"""Whole-pack validation before a pack may go live, whichever engine runs it.

Both languages are checked on every load, so a pack whose inactive half is broken never becomes
the live revision: Cedar is parsed and schema-validated in-process; Rego is checked for package
layout, balanced brackets and its rule inventory, and compiled by ``opa check --strict --schema``
when an ``opa`` binary is at hand (``memgov policy check`` always compiles it). Every language
must hold a rule for every code the case tables expect (built-in rule codes plus the declared
ones), and each Rego rule's code must equal its METADATA ``custom.reason``.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sidecar.policy import schema
from sidecar.policy.cedar import CedarPolicies, compile_pack
from sidecar.policy.model import Limits
from sidecar.policy.opa_bundle import check_layout
from sidecar.policy.opa_server import ToolNotFound, tool_binary
from sidecar.policy.pack import Pack, PackError
from sidecar.policy.rules import Site, rego_sites, rule_codes, rule_metadata
from sidecar.reasons import BUILT_IN, DECLARED_CODE

_PAIRS = {")": "(", "]": "[", "}": "{"}


@dataclass(frozen=True)
class Vetted:
    """A pack that passed: its compiled Cedar policies and the rules of both languages."""

    cedar: CedarPolicies
    rego: list[Site]

    @property
    def cedar_sites(self) -> list[Site]:
        """Cedar policies in file order."""
        return list(self.cedar.sites.values())


def bracket_problem(text: str) -> tuple[int, str] | None:
    """The first unbalanced bracket of a Rego file outside strings and comments: (line, message)."""
    stack: list[tuple[str, int]] = []
    line, i, n = 1, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif ch in '"`':
            close, i = ch, i + 1
            while i < n and text[i] != close:
                if close == '"' and text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    if close == '"':
                        return line, "unterminated string"
                    line += 1
                i += 1
        elif ch in "([{":
            stack.append((ch, line))
        elif ch in _PAIRS:
            if not stack or stack[-1][0] != _PAIRS[ch]:
                return line, f"unexpected {ch!r}"
            stack.pop()
        i += 1
    return (stack[-1][1], f"{stack[-1][0]!r} is never closed") if stack else None


def check_declared(pack: Pack) -> None:
    """data/reasons.yaml: every code a new lower-case identifier, ranked after a known code."""
    codes = {d.code for d in pack.reasons}
    for d in pack.reasons:
        if not DECLARED_CODE.fullmatch(d.code) or d.code in BUILT_IN:
            raise PackError(
                f"data/reasons.yaml: {d.code!r} is built in or not a lower-case identifier (3-48 chars)",
                file="data/reasons.yaml",
                step="data",
            )
        unknown = [k for k in d.limits if k not in Limits.model_fields]
        if unknown:
            raise PackError(
                f"data/reasons.yaml: {d.code}: limits names {', '.join(map(repr, unknown))}, not keys of limits.yaml",
                file="data/reasons.yaml",
                step="data",
            )
        if d.after not in BUILT_IN and d.after not in codes:
            raise PackError(
                f"data/reasons.yaml: {d.code}: after {d.after!r} names no known code",
                file="data/reasons.yaml",
                step="data",
            )


def rego_problems(pack: Pack, sites: list[Site]) -> list[str]:
    """Rule-level problems of the Rego pack: unreadable heads, unknown codes, METADATA that disagrees."""
    known = set(rule_codes(pack))
    problems = []
    for site in sites:
        if site.code is None:
            problems.append(f"{site.where}: a deny rule's head must be a string literal reason code")
        elif site.code not in known:
            problems.append(
                f"{site.where}: {site.code!r} is not a reason code the pack knows "
                "(built-in rule codes and data/reasons.yaml)"
            )
        elif site.declared_reason != site.code:
            problems.append(
                f"{site.where}: deny contains {site.code!r} but METADATA custom.reason is {site.declared_reason!r}"
            )
    return problems


_HEAD = re.compile(r"^(?!default\b|package\b|import\b)([a-z_][a-z0-9_]*)\b")


def rego_permits(pack: Pack) -> list[str]:
    """Rules that admit instead of deny while carrying a reason code, and any ``allow`` that is more
    than "no rule denies": a second ``allow`` definition is an exemption every deny rule misses."""
    problems = []
    for rel, text in sorted(pack.select("rego", ".rego").items()):
        lines = text.splitlines()
        for at, line in enumerate(lines):
            head = _HEAD.match(line)
            if head is None or head.group(1) == "deny":
                continue
            custom = rule_metadata(lines, at).get("custom")
            reason = custom.get("reason") if isinstance(custom, dict) else None
            if reason is not None:
                problems.append(
                    f"{rel}:{at + 1}: {head.group(1)} carries METADATA custom.reason {reason!r}, but only"
                    " deny rules answer reason codes"
                )
            if head.group(1) == "allow":
                body = [line]
                for row in lines[at + 1 :]:
                    if not row.startswith(("\t", "}")):
                        break
                    body.append(row)
                if "count(deny) == 0" not in "\n".join(body):
                    problems.append(
                        f"{rel}:{at + 1}: allow is defined by something other than an empty deny set;"
                        " every exemption belongs in the deny rules"
                    )
    return problems


def missing_codes(pack: Pack, sites: list[Site]) -> list[str]:
    """Codes the case tables expect that no rule of these sites answers with."""
    have = {s.code for s in sites}
    return [code for code in rule_codes(pack) if code not in have]


def opa_compile(pack: Pack) -> str | None:
    """``opa check --strict --schema`` on exactly the Rego files read; None when clean or no opa binary."""
    try:
        binary = tool_binary("opa")
    except ToolNotFound:
        return None
    files = pack.select("rego", ".rego")
    with tempfile.TemporaryDirectory(prefix="memgov-rego-") as tmp:
        root = Path(tmp)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, encoding="utf-8")
        (root / "input.schema.json").write_text(schema.render()[schema.TYPECHECK_SCHEMA], encoding="utf-8")
        proc = subprocess.run(
            [binary, "check", "--strict", "--schema", str(root / "input.schema.json"), str(root / "rego")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    # OPA's messages name policy files and lines only (policy text is ours, never request data).
    if proc.returncode == 0:
        return None
    return (proc.stdout + proc.stderr).replace(f"{root}/", "").strip() or "opa check failed"


def _rego(pack: Pack, compile_rego: bool) -> list[Site]:
    files = pack.select("rego", ".rego")
    try:
        check_layout(files)
    except PackError as exc:
        raise PackError(str(exc), file=str(exc).split(":", 1)[0], step="rego") from None
    for rel, text in sorted(files.items()):
        found = bracket_problem(text)
        if found is not None:
            raise PackError(f"{rel}:{found[0]}: {found[1]}", file=rel, step="rego")
    sites = rego_sites(pack)
    problems = rego_problems(pack, sites) + rego_permits(pack)
    if problems:
        raise PackError("rego rules:\n" + "\n".join(problems), file=problems[0].split(":", 1)[0], step="rego")
    if compile_rego and (report := opa_compile(pack)) is not None:
        raise PackError(f"rego does not compile:\n{report}", file="rego/", step="rego")
    return sites


def vet(pack: Pack, *, compile_rego: bool = True) -> Vetted:
    """Validate both languages and rule completeness; raises PackError naming the file and the step."""
    check_declared(pack)
    cedar = compile_pack(pack)
    rego = _rego(pack, compile_rego)
    for language, sites in (("cedar", list(cedar.sites.values())), ("rego", rego)):
        missing = missing_codes(pack, sites)
        if missing:
            raise PackError(
                f"{language}/: no rule for reason code(s) the case tables expect: {', '.join(missing)}",
                file=f"{language}/",
                step="rules",
            )
    return Vetted(cedar, rego)
