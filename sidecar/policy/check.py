"""``memgov policy check``: every problem an author can act on, with file:line, for both languages.

The steps run on both packs whatever engine is live, and later steps still run after an earlier
one fails (a broken data file is replaced by the reference one for the later steps): Cedar parse,
schema validation and annotations (a permit carrying a reason code is refused); the global limits
against the ADR's values; agent_limits against the configured agents (a warning); Cedar format;
Rego rule heads against known codes and METADATA (a rule that admits carrying a code, an ``allow``
other than "nothing denies"); rules present in one language only or missing; the limits each rule
reads against its code's typed keys; ``opa fmt``; ``opa check --strict --schema``; ``opa test``;
``regal lint``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from sidecar.policy.cedar import compile_pack
from sidecar.policy.fmt import FIX_HINT, Unformatted, cedar_unformatted, rego_unformatted
from sidecar.policy.model import ADR_CEILINGS
from sidecar.policy.opa_bundle import check_layout
from sidecar.policy.opa_server import ToolNotFound, tool_binary
from sidecar.policy.pack import DATA_FILES, Pack, PackError, read_pack, reference_data
from sidecar.policy.properties import Properties, properties_or_none
from sidecar.policy.reads import cedar_misreads, rego_misreads
from sidecar.policy.rules import CEDAR_COMMENT, cedar_sites, rego_sites, rule_codes
from sidecar.policy.vet import (
    bracket_problem,
    check_declared,
    missing_codes,
    opa_compile,
    rego_permits,
    rego_problems,
)

_REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Step:
    """The outcome of one check; ``skipped`` when a tool it needs is not installed (the detail says which);
    ``warning`` when it passes but has something to say (e.g. an agent no gateway configuration names)."""

    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False
    warning: bool = False

    @property
    def status(self) -> str:
        """``fail``, ``skip``, ``warn`` or ``ok``."""
        if not self.ok:
            return "fail"
        return "skip" if self.skipped else "warn" if self.warning else "ok"


def _missing(step: str, exc: ToolNotFound) -> Step:
    # A plain `pip install` has no opa or regal: the step is reported as not run, never as passed.
    return Step(step, True, f"skipped: {exc}", skipped=True)


def _tool(name: str, args: list[str], step: str, cwd: Path) -> Step:
    try:
        binary = tool_binary(name)
    except ToolNotFound as exc:
        return _missing(step, exc)
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=300, check=False, cwd=cwd)
    # Tool output names policy files and lines only: policy text is ours, never request data.
    detail = (proc.stdout + proc.stderr).strip()
    return Step(step, proc.returncode == 0, detail if proc.returncode else "")


def _formatting(name: str, found: list[Unformatted], unparsable: tuple[str, ...] = ()) -> Step:
    # A file that does not parse cannot be formatted: the step fails for it rather than passing it by.
    lines = [f"{rel}: does not parse, so its format was not checked (see the parse step)" for rel in unparsable]
    lines += [f"{u.file}\n{u.diff.rstrip()}" for u in found]
    detail = "\n".join([*lines, *([FIX_HINT] if found else [])])
    return Step(name, not lines, detail)


def _cedar(pack: Pack) -> Step:
    try:
        compile_pack(pack)
    except PackError as exc:
        return Step("cedar parse + schema validation + @id", False, str(exc))
    return Step("cedar parse + schema validation + @id", True)


def _rego_rules(pack: Pack) -> Step:
    problems: list[str] = []
    files = pack.select("rego", ".rego")
    try:
        check_layout(files)
    except PackError as exc:
        problems.append(str(exc))
    for rel, text in sorted(files.items()):
        found = bracket_problem(text)
        if found is not None:
            problems.append(f"{rel}:{found[0]}: {found[1]}")
    problems += rego_problems(pack, rego_sites(pack)) + rego_permits(pack)
    return Step("rego rules: reason codes and METADATA custom.reason", not problems, "\n".join(problems))


def _parity(pack: Pack) -> Step:
    """Codes one language has rules for and the other not, and codes neither covers."""
    sites = {"cedar": [s for s in cedar_sites(pack) if s.code], "rego": [s for s in rego_sites(pack) if s.code]}
    codes = {lang: {s.code for s in found} for lang, found in sites.items()}
    lines = []
    for lang, other in (("cedar", "rego"), ("rego", "cedar")):
        for site in sites[lang]:
            if site.code not in codes[other] and site.code in rule_codes(pack):
                lines.append(f"{site.where}: {site.name} has no {other} rule for {site.code}")
        missing = missing_codes(pack, sites[lang])
        if missing:
            lines.append(f"{lang}/: no rule for: {', '.join(missing)}")
    return Step("rules in both packs for every expected code", not lines, "\n".join(lines))


def _ceilings(pack: Pack) -> Step:
    """Global limits above the ADR's values (a looser limits.yaml is not the product the ADR describes)."""
    lines = [
        f"data/limits.yaml: {name} {getattr(pack.limits, name)} is above the ADR's {ceiling}; the global"
        " limits may only be stricter than the ADR's values"
        for name, ceiling in ADR_CEILINGS.items()
        if getattr(pack.limits, name) > ceiling
    ]
    return Step("limits within the ADR's values", not lines, "\n".join(lines))


def _agents(pack: Pack, configured: Collection[str] | None) -> Step:
    """agent_limits entries naming agents the gateway configuration does not know: they limit nobody today."""
    name = "agent_limits name configured agents"
    named = sorted({ref for entry in pack.limits.agent_limits for ref in entry.agents})
    if not named:
        return Step(name, True)
    if not configured:
        return Step(name, True, "no agents configured (memgov --config FILE policy check): not compared", warning=True)
    unknown = [ref for ref in named if ref not in configured]
    lines = [f"data/limits.yaml: agent_limits names {ref}, which is not a configured agent" for ref in unknown]
    return Step(name, True, "\n".join(lines), warning=bool(lines))


def _typed_keys(pack: Pack) -> Step:
    """Each rule reads only the limits its code names (rules.LIMIT_KEYS, data/reasons.yaml ``limits``)."""
    name = "rules read their own limits (typed keys)"
    found = [str(m) for m in cedar_misreads(pack)]
    try:
        found += [str(m) for m in rego_misreads(pack)]
    except ToolNotFound as exc:
        if not found:
            return _missing(name, exc)
        found.append(f"rego/: not read ({exc})")
    return Step(name, not found, "\n".join(found))


_ACTION_NAME = r'(?:"[^"]*"|[\w:]+)'
_ACTION_DECL = re.compile(
    rf"^[ \t]*action\s+(?P<names>{_ACTION_NAME}(?:\s*,\s*{_ACTION_NAME})*)"
    r"\s*(?:\bin\s*\[(?P<groups>[^\]]*)\])?\s*(?P<applies>appliesTo\b)?[^;]*;",
    re.MULTILINE,
)


@dataclass(frozen=True)
class SchemaAction:
    """An action of the Cedar schema: where it is declared, the groups it is in, and whether a request
    can name it (it ``appliesTo`` something) or it only groups others."""

    name: str
    where: str
    groups: frozenset[str]
    requested: bool


def _names(text: str) -> list[str]:
    return [n.strip().strip('"') for n in text.split(",") if n.strip()]


def schema_actions(pack: Pack) -> dict[str, SchemaAction]:
    """The actions and action groups the Cedar schema declares, by name."""
    found: dict[str, SchemaAction] = {}
    for rel, text in sorted(pack.select("cedar", ".cedarschema").items()):
        code = CEDAR_COMMENT.sub(lambda c: " " * len(c.group(0)), text)
        for m in _ACTION_DECL.finditer(code):
            where = f"{rel}:{code.count(chr(10), 0, m.start('names')) + 1}"
            groups = frozenset(_names(m.group("groups") or ""))
            for name in _names(m.group("names")):
                found[name] = SchemaAction(name, where, groups, m.group("applies") is not None)
    return found


def _covers(named: Collection[str], action: str, actions: dict[str, SchemaAction]) -> bool:
    """Whether a property naming ``named`` covers ``action`` (named itself, or a group it is in at any depth)."""
    seen: set[str] = set()
    todo = [action]
    while todo:
        current = todo.pop()
        if current in named:
            return True
        if current in seen or current not in actions:
            continue
        seen.add(current)
        todo += actions[current].groups
    return False


def property_gaps(pack: Pack, props: Properties) -> list[str]:
    """What properties.yaml misses or misnames: every code a rule answers is some property's
    ``enforced_by``, every action a request can name is some property's (itself or a group it is in),
    and every name a property uses exists. Each line names what is missing and where it is declared."""
    codes = rule_codes(pack)
    actions = schema_actions(pack)
    lines = []
    for prop in props.properties:
        lines += [
            f"properties.yaml: {prop.name}: enforced_by {c!r} is not a reason code"
            for c in prop.enforced_by
            if c not in codes
        ]
        lines += [
            f"properties.yaml: {prop.name}: action {a!r} is not in the schema" for a in prop.actions if a not in actions
        ]
    named = {c for p in props.properties for c in p.enforced_by}
    sites: dict[str, list[str]] = {}
    for site in [*cedar_sites(pack), *rego_sites(pack)]:
        if site.code:
            at = "@id " if site.engine == "cedar" else ""
            sites.setdefault(site.code, []).append(f"{site.where} {at}{site.name}")
    for code in codes:
        if code not in named:
            rules = f" ({', '.join(sites[code])})" if code in sites else ""
            lines.append(
                f"properties.yaml: no property is enforced_by {code}{rules}: add {code} to the enforced_by of"
                " the property its rules give, or a property saying which guarantee they give"
            )
    covered = [a for p in props.properties for a in p.actions]
    for action in sorted((a for a in actions.values() if a.requested), key=lambda a: a.name):
        if not _covers(covered, action.name, actions):
            lines.append(
                f"properties.yaml: no property covers action {action.name} ({action.where}): add a property with"
                f" actions: [{action.name}] (or a group it is in) saying what the pack guarantees for it"
            )
    return lines


def _properties(pack: Pack, root: Path) -> Step:
    """Every rule's code is enforcing some property of properties.yaml, every action a request can
    name is covered by one, and every property names known actions and codes: a new rule or a new
    operation comes with the guarantee it gives, or check says so."""
    name = "properties.yaml names every code and action"
    try:
        props = properties_or_none(root)
    except PackError as exc:
        return Step(name, False, str(exc))
    if props is None:
        return Step(name, True, "no properties.yaml: `memgov policy prove` has nothing to prove", warning=True)
    lines = property_gaps(pack, props)
    return Step(name, not lines, "\n".join(lines))


def _schema_check(pack: Pack) -> Step:
    name = "opa check --strict --schema (decision input)"
    try:
        tool_binary("opa")
    except ToolNotFound as exc:
        return _missing(name, exc)
    report = opa_compile(pack)
    return Step(name, report is None, report or "")


def regal_config(root: Path) -> Path | None:
    """The Regal configuration for a pack: beside it, else the project's."""
    for candidate in (root.parent / ".regal" / "config.yaml", _REPO / ".regal" / "config.yaml"):
        if candidate.is_file():
            return candidate
    return None


def _read_leniently(root: Path) -> tuple[Pack, Step]:
    """The pack and the data step; with a broken data file, the rest is checked on the reference data.

    Every later step reads the policy files, not the data, so one bad YAML file must not hide
    the problems of the policies. PackError only when the folder itself cannot be read.
    """
    problems: list[str] = []
    replaced: dict[str, bytes | None] = {}
    for _ in range(len(DATA_FILES) + 1):
        try:
            pack = read_pack(root, replaced)
            check_declared(pack)
        except PackError as exc:
            if exc.step != "data" or exc.file not in DATA_FILES or exc.file in replaced:
                raise
            problems.append(str(exc))
            replaced[exc.file] = reference_data(exc.file)
            continue
        return pack, Step("data files", not problems, "\n".join(problems))
    raise PackError("data files: cannot be read", step="data")


def check_pack(root: Path, agents: Collection[str] | None = None) -> list[Step]:
    """Run every check on both languages; each failing step says where and what.

    ``agents`` are the agent references the gateway configuration names (None: not known).
    """
    root = Path(root).resolve()
    pack, data = _read_leniently(root)
    unparsable: list[str] = []
    steps = [
        data,
        _ceilings(pack),
        _agents(pack, agents),
        _cedar(pack),
        _formatting("cedar format", cedar_unformatted(root, unparsable), tuple(unparsable)),
        _rego_rules(pack),
        _parity(pack),
        _typed_keys(pack),
        _properties(pack, root),
    ]
    try:
        steps.append(_formatting("opa fmt", rego_unformatted(root)))
    except ToolNotFound as exc:
        steps.append(_missing("opa fmt", exc))
    steps.append(_schema_check(pack))
    rego = str(root / "rego")
    steps.append(_tool("opa", ["test", rego], "opa test", root))
    config = regal_config(root)
    lint = ["lint", "--format", "compact", *(["--config-file", str(config)] if config else []), rego]
    steps.append(_tool("regal", lint, "regal lint", root))
    return steps
