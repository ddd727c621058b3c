"""The in-process Cedar engine: parse and validate the pack once, then map each input to a request.

The pack's @id annotations are reason codes in kebab-case (``/suffix`` allowed, so one code can
have several policies); a denial's reasons are the codes of the forbid policies that determined
it. Any evaluation error fails closed, because Cedar skips an erroring forbid instead of applying it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import cedarpy
import orjson

from sidecar.policy.cedar_input import Request, deployment_entity, entities, request
from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.model import DecisionInput, Deployment
from sidecar.policy.outcome import Verdict
from sidecar.policy.pack import Pack, PackError
from sidecar.policy.rules import (
    PERMIT_ID,
    Site,
    Statement,
    cedar_annotations,
    cedar_sites,
    cedar_statements,
    rule_codes,
)

_ACTION_NOTE = re.compile(r' (?:for|in context for) Action::"[^"]*"')
_POLICY_NOTE = re.compile(r"^(?:\[policy\d+\] )?(?:for policy `policy\d+`, )?")


class CedarEvalError(EngineUnavailable):
    """Cedar reported an error while evaluating; the decision fails closed."""

    def __init__(self, kind: str = "error") -> None:
        super().__init__(kind)


@dataclass(frozen=True)
class CedarPolicies:
    """Parsed, validated handles of one pack revision."""

    policies: cedarpy.PolicySet
    schema: cedarpy.Schema
    #: Cedar's policy id (policy0, …) → reason code ("allowed" for the permit).
    reasons: dict[str, str]
    #: Cedar's policy id → where the policy is written.
    sites: dict[str, Site]


def _refuse(message: str, file: str | None = None) -> PackError:
    return PackError(message, file=file, step="cedar")


def _parse_error(text: str) -> str | None:
    try:
        cedarpy.policies_to_json_str(text)
    except ValueError as exc:
        return str(exc)
    return None


#: What a parse error names: a `token`, a 'token', or the word after its last colon.
_NAMED = re.compile(r"`([^`]+)`|'([^']+)'|:\s*([\w:\"]+)\s*$")
#: Cedar's message for a statement that stops too early (a missing `;` or `}`).
_RAN_OUT = "unexpected end of input"
#: Longest statement whose parse error is located (one parse per character of it).
_LOCATE_MAX = 20_000


def _parse_offset(text: str, message: str) -> int | None:
    """Where in ``text`` the parse error ``message`` is: cedarpy keeps Cedar's message, not its span.

    The shortest prefix that fails with the same message ends at or after the culprit (shorter
    prefixes only run out of input); in it, the last occurrence of the token the message names.
    """
    if len(text) > _LOCATE_MAX:
        return None
    if message == _RAN_OUT:
        return len(text.rstrip())  # just after the last token: something is missing there
    end = next((k for k in range(1, len(text) + 1) if _parse_error(text[:k]) == message), None)
    if end is None:
        return None
    named = _NAMED.search(message)
    token = next((g for g in named.groups() if g), None) if named else None
    if token:
        pattern = rf"\b{re.escape(token)}\b" if token[0].isalnum() and token[-1].isalnum() else re.escape(token)
        if token == "=":
            pattern = r"(?<![=!<>])=(?!=)"  # the assignment Cedar rejects, not part of ==, !=, <=, >=
        uses = list(re.finditer(pattern, text[:end]))
        if uses:
            return uses[-1].start()
    return end - 1 if end < len(text) else None


def _line_col(st: Statement, offset: int) -> str:
    """``line:col`` of an offset into a statement's text."""
    # st.line is the line of the statement's first token; the text may start with blank lines and comments.
    lead = _LEADING.match(st.text)
    line = st.line + st.text.count("\n", lead.end() if lead else 0, offset)
    return f"{line}:{offset - st.text.rfind(chr(10), 0, offset)}"


def _parse_file(rel: str, text: str) -> list[Statement]:
    """Split and parse one file; a parse error names the file, its line:col and Cedar's message."""
    statements = cedar_statements(text)
    whole = _parse_error(text)
    if whole is None:
        return statements
    for st in statements:
        message = _parse_error(st.text)
        if message is not None:
            offset = _parse_offset(st.text, message)
            where = _line_col(st, offset) if offset is not None else str(st.line)
            raise _refuse(f"{rel}:{where}: {message}", rel)
    raise _refuse(f"{rel}: {whole}", rel)


_MISSING_ATTR = re.compile(r"attribute `(?:[\w.]*\.)?(\w+)`[^`]*not found")
_SCHEMA_ATTR = re.compile(r"^\s*(\w+)\??\s*:", re.MULTILINE)
_LEADING = re.compile(r"(?:[ \t]*(?://[^\n]*)?\n)*\s*")


def _locate(st: Statement, message: str, attributes: list[str]) -> tuple[str, str]:
    """``line:col`` of a missing attribute's use in the policy, and the schema's closest name.

    cedarpy keeps Cedar's message but drops its source span and its "did you mean" help, so both
    are found again here for the commonest validation error, a misspelt attribute.
    """
    missing = _MISSING_ATTR.search(message)
    if missing is None:
        return str(st.line), ""
    name = missing.group(1)
    use = re.search(rf"\.{re.escape(name)}\b|\bhas\s+{re.escape(name)}\b", st.text)
    where = _line_col(st, use.end() - len(name)) if use is not None else str(st.line)
    close = difflib.get_close_matches(name, attributes, n=1, cutoff=0.7)
    return where, f"; did you mean `{close[0]}`?" if close else ""


def _validate_file(
    rel: str, text: str, statements: list[Statement], schema: cedarpy.Schema, schema_text: str
) -> list[str]:
    """Schema validation of one file: ``file:line[:col] (@id x): validator message`` per problem."""
    result = cedarpy.validate_policies(text, schema)
    attributes = sorted(set(_SCHEMA_ATTR.findall(schema_text)))
    found: dict[str, None] = {}
    for err in result.errors:
        index = int(err.policy_id.removeprefix("policy")) if err.policy_id.startswith("policy") else -1
        st = statements[index] if 0 <= index < len(statements) else None
        message = _ACTION_NOTE.sub("", _POLICY_NOTE.sub("", str(err.error)))
        hint = ""
        where = rel
        if st is not None:
            line, hint = _locate(st, message, attributes)
            where = f"{rel}:{line} (@id {cedar_annotations(st.text).get('id', '?')})"
        found[f"{where}: {message}{hint}"] = None
    return list(found)


_UNRESOLVED = re.compile(r"failed to resolve types?: (.+)$")


def _declarations(text: str) -> list[tuple[int, int]]:
    """``(first line, end offset)`` of each top-level declaration (up to a ``;`` outside braces)."""
    out: list[tuple[int, int]] = []
    depth, line, first = 0, 1, 0
    i = 0
    while i < len(text):
        ch = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        if ch == "\n":
            line += 1
        elif ch == '"':
            i = text.find('"', i + 1)
            i = len(text) if i < 0 else i
        elif not ch.isspace() and not first:
            first = line
        if ch in "{[(<":
            depth += 1
        elif ch in "}])>":
            depth -= 1
        elif ch == ";" and depth <= 0:
            out.append((first, i + 1))
            first = 0
        i += 1
    if first:
        out.append((first, len(text)))
    return out


def schema_error_line(text: str, message: str) -> int | None:
    """The line a schema error points at; cedarpy's message carries none.

    An unresolved type: the first line that uses it. A syntax error: the first declaration after
    which the schema no longer parses.
    """
    unresolved = _UNRESOLVED.search(message)
    if unresolved:
        name = unresolved.group(1).split(",")[0].strip()
        pattern = re.compile(rf"[:\[,<]\s*{re.escape(name)}\b")
        for number, row in enumerate(text.splitlines(), 1):
            if pattern.search(row.split("//")[0]):
                return number
        return None
    for first, end in _declarations(text):
        try:
            cedarpy.Schema.from_str(text[:end])
        except ValueError as exc:
            if str(exc).startswith("error parsing schema"):
                return first
    return None


def _check_org(pack: Pack, schema: cedarpy.Schema) -> None:
    # The org lists travel as an entity attribute; the schema's Org type must declare each one.
    probe = Deployment(
        server_name="pack.check", classification=pack.federation.classification, limits=pack.limits, org=pack.org
    )
    try:
        cedarpy.Entities.from_json_str(json.dumps([deployment_entity(probe)]), schema)
    except ValueError as exc:
        raise _refuse(f"data/org.yaml: does not match type Org in the .cedarschema: {exc}", "data/org.yaml") from None


def _reason_map(pack: Pack, sites: list[Site]) -> dict[str, str]:
    known = set(rule_codes(pack))
    reasons: dict[str, str] = {}
    seen: set[str] = set()
    for index, site in enumerate(sites):
        if site.name in seen:
            raise _refuse(f"{site.where}: @id {site.name} is used twice", site.file)
        seen.add(site.name)
        if site.name == PERMIT_ID:
            if site.effect != "permit":
                raise _refuse(
                    f'{site.where}: @id("{PERMIT_ID}") is a {site.effect or "statement"}: it must be the permit',
                    site.file,
                )
            reasons[f"policy{index}"] = PERMIT_ID
            continue
        if site.effect == "permit":
            # A permit never denies: one carrying a reason code would count as that code's rule
            # (coverage, rules in both packs) while it can only admit.
            raise _refuse(
                f"{site.where}: @id {site.name!r} carries a reason code on a permit; only forbid policies"
                f' answer codes, and the one permit is @id("{PERMIT_ID}")',
                site.file,
            )
        if site.code not in known:
            raise _refuse(
                f"{site.where}: @id {site.name!r} is not a reason code in kebab-case (optionally /suffix) "
                "that the pack knows (built-in rule codes and data/reasons.yaml)",
                site.file,
            )
        reasons[f"policy{index}"] = site.code
    return reasons


def compile_pack(pack: Pack) -> CedarPolicies:
    """Parse the schema and policies, validate them against the schema and check every @id and @rationale."""
    schemas = pack.select("cedar", ".cedarschema")
    if len(schemas) != 1:
        raise _refuse("cedar/: expected exactly one .cedarschema file")
    sources = pack.select("cedar", ".cedar")
    if not sources:
        raise _refuse("cedar/: no .cedar policy files")
    ((schema_file, schema_text),) = schemas.items()
    try:
        schema = cedarpy.Schema.from_str(schema_text)
    except ValueError as exc:
        line = schema_error_line(schema_text, str(exc))
        where = f"{schema_file}:{line}" if line else schema_file
        raise _refuse(f"{where}: the schema does not parse: {exc}", schema_file) from None
    problems: list[str] = []
    parsed = {rel: _parse_file(rel, sources[rel]) for rel in sorted(sources)}
    for rel, statements in parsed.items():
        problems += _validate_file(rel, sources[rel], statements, schema, schema_text)
        for st in statements:
            if not cedar_annotations(st.text).get("rationale"):
                problems.append(f"{rel}:{st.line}: policy needs a @rationale")
    if problems:
        raise _refuse("cedar policies fail validation:\n" + "\n".join(problems), problems[0].split(":", 1)[0])
    _check_org(pack, schema)
    sites = cedar_sites(pack)
    reasons = _reason_map(pack, sites)
    text = "\n".join(sources[rel] for rel in sorted(sources))
    try:
        policies = cedarpy.PolicySet.from_str(text)
    except ValueError as exc:
        raise _refuse(f"cedar/: the policies do not parse together: {exc}") from None
    return CedarPolicies(policies, schema, reasons, {f"policy{i}": site for i, site in enumerate(sites)})


def _verdict(result: cedarpy.AuthzResult, reasons: dict[str, str]) -> Verdict:
    if result.diagnostics.errors:
        # SECURITY: Cedar ignores a forbid that errors; we refuse instead of permitting.
        raise CedarEvalError()
    if result.allowed:
        return Verdict(allowed=True, reasons=frozenset())
    return Verdict(allowed=False, reasons=frozenset(reasons.get(pid, "") for pid in result.diagnostics.reasons))


def _authorize(requests: list[Request], compiled: CedarPolicies, handle: cedarpy.Entities) -> list[Verdict]:
    """Decide requests in one call of cedarpy's extension, identical requests once.

    The same call ``cedarpy.is_authorized_batch`` makes, without its per-request JSON round trips
    through the stdlib (contexts go in and answers come out through orjson). A prefetch fan-out
    asks the same question several times; Cedar is a pure function of request, entities and
    policies, so each distinct request is evaluated once.
    """
    unique: dict[bytes, int] = {}
    wire: list[dict[str, object]] = []
    order: list[int] = []
    for req in requests:
        context = orjson.dumps(req["context"])
        key = orjson.dumps([req["principal"], req["action"], req["resource"]]) + context
        if key not in unique:
            unique[key] = len(wire)
            wire.append({**req, "context": context.decode()})
        order.append(unique[key])
    answers = cedarpy._internal.is_authorized_batch(wire, compiled.policies, handle._inner, None, False)
    verdicts = [_answer(orjson.loads(a), compiled.reasons) for a in answers]
    return [verdicts[i] for i in order]


def _answer(answer: dict[str, Any], reasons: dict[str, str]) -> Verdict:
    diagnostics = answer.get("diagnostics") or {}
    if diagnostics.get("errors") or answer.get("decision") not in ("Allow", "Deny"):
        # SECURITY: Cedar ignores a forbid that errors; we refuse instead of permitting.
        raise CedarEvalError()
    if answer["decision"] == "Allow":
        return Verdict(allowed=True, reasons=frozenset())
    return Verdict(allowed=False, reasons=frozenset(reasons.get(pid, "") for pid in diagnostics.get("reason", ())))


def determining(compiled: CedarPolicies, result: cedarpy.AuthzResult) -> list[Site]:
    """The policies that determined an answer (the permit for an allow, the matching forbids for a deny)."""
    return [compiled.sites[pid] for pid in sorted(result.diagnostics.reasons) if pid in compiled.sites]


class CedarEngine:
    """Cedar in-process; entity handles are cached so a steady conversation parses only its context."""

    name = "cedar"
    stale = False
    _CACHE = 512

    def __init__(self) -> None:
        self._compiled: CedarPolicies | None = None
        self._handles: OrderedDict[tuple[object, object], tuple[Deployment, cedarpy.Entities]] = OrderedDict()

    def prepare(self, pack: Pack) -> CedarPolicies:
        """Compile a pack without touching the running one."""
        return compile_pack(pack)

    async def commit(self, compiled: CedarPolicies) -> None:
        """Swap in a compiled pack; one assignment, so a decision sees the old or the new pack."""
        self._handles = OrderedDict()
        self._compiled = compiled

    def _entities(self, compiled: CedarPolicies, inp: DecisionInput) -> cedarpy.Entities:
        # Keyed by the (hashable, frozen) principal and scope; the deployment is compared by value.
        key = (inp.principal, inp.scope)
        found = self._handles.get(key)
        if found is not None and (found[0] is inp.deployment or found[0] == inp.deployment):
            self._handles.move_to_end(key)
            return found[1]
        handle = cedarpy.Entities.from_json_str(json.dumps(entities(inp)), compiled.schema)
        self._handles[key] = (inp.deployment, handle)
        if len(self._handles) > self._CACHE:
            self._handles.popitem(last=False)
        return handle

    def evaluate_sync(self, inp: DecisionInput) -> Verdict:
        """Decide one input on the calling thread."""
        compiled = self._compiled
        if compiled is None:
            raise CedarEvalError("unloaded")
        try:
            handle = self._entities(compiled, inp)
            # The request is not re-validated against the schema: the entities were, and a type
            # error in the context makes evaluation fail, which denies.
            (verdict,) = _authorize([request(inp)], compiled, handle)
        except (ValueError, TypeError):
            raise CedarEvalError("malformed") from None
        return verdict

    def explain_sync(self, inp: DecisionInput) -> tuple[Verdict, list[Site]]:
        """Decide one input and name the policies that determined the answer (authoring tools)."""
        compiled = self._compiled
        if compiled is None:
            raise CedarEvalError("unloaded")
        try:
            result = cedarpy.is_authorized(dict(request(inp)), compiled.policies, self._entities(compiled, inp))
        except (ValueError, TypeError):
            raise CedarEvalError("malformed") from None
        return _verdict(result, compiled.reasons), determining(compiled, result)

    def explain_many_sync(self, inputs: list[DecisionInput]) -> list[tuple[Verdict, list[Site]] | None]:
        """``explain_sync`` for many inputs (authoring tools' tables): one call of the extension per
        set of inputs sharing their entities, so the policies are parsed once per set, not per input.

        An input Cedar cannot evaluate answers None, as ``explain_sync`` would have refused it.
        """
        compiled = self._compiled
        if compiled is None:
            raise CedarEvalError("unloaded")
        # Keyed by the (hashable, frozen) principal and scope; the deployment is compared by value.
        groups: dict[tuple[object, object], list[list[int]]] = {}
        for i, inp in enumerate(inputs):
            sets = groups.setdefault((inp.principal, inp.scope), [])
            for members in sets:
                if inputs[members[0]].deployment == inp.deployment:
                    members.append(i)
                    break
            else:
                sets.append([i])
        out: list[tuple[Verdict, list[Site]] | None] = [None] * len(inputs)
        for members in (m for sets in groups.values() for m in sets):
            try:
                handle = self._entities(compiled, inputs[members[0]])
                wire = [
                    {**request(inputs[i]), "context": orjson.dumps(request(inputs[i])["context"]).decode()}
                    for i in members
                ]
                answers = cedarpy._internal.is_authorized_batch(wire, compiled.policies, handle._inner, None, False)
            except (ValueError, TypeError):
                for i in members:  # one malformed input spoils its batch: the others are decided alone
                    out[i] = self._explained_or_none(inputs[i])
                continue
            for i, raw in zip(members, answers, strict=True):
                answer = orjson.loads(raw)
                try:
                    verdict = _answer(answer, compiled.reasons)
                except CedarEvalError:
                    continue
                ids = sorted((answer.get("diagnostics") or {}).get("reason", ()))
                out[i] = (verdict, [compiled.sites[pid] for pid in ids if pid in compiled.sites])
        return out

    def _explained_or_none(self, inp: DecisionInput) -> tuple[Verdict, list[Site]] | None:
        try:
            return self.explain_sync(inp)
        except EngineUnavailable:
            return None

    def evaluate_many_sync(self, inputs: list[DecisionInput]) -> list[Verdict]:
        """Decide a fan-out in one call when the inputs share their entities (prefetch)."""
        compiled = self._compiled
        if compiled is None:
            raise CedarEvalError("unloaded")
        first = inputs[0]
        shared = (first.principal, first.scope, first.deployment)
        if any((i.principal, i.scope, i.deployment) != shared for i in inputs):
            return [self.evaluate_sync(inp) for inp in inputs]
        try:
            return _authorize([request(i) for i in inputs], compiled, self._entities(compiled, first))
        except (ValueError, TypeError):
            raise CedarEvalError("malformed") from None

    async def evaluate(self, inp: DecisionInput) -> Verdict:
        """Decide one input (in-process, no await inside)."""
        return self.evaluate_sync(inp)

    async def evaluate_many(self, inputs: list[DecisionInput]) -> list[Verdict]:
        """Decide several inputs."""
        return self.evaluate_many_sync(inputs) if inputs else []

    async def close(self) -> None:
        """Nothing to release."""
