"""What the symbolic checks may assume about a request, and a pack's data inlined into its policies.

A symbolic request is any value of the schema's types. Only some are requests memgov can send:
every count and time within the decision input's bounds, origins within the origin kinds, a
definition write's facts within their kinds and on controller.write alone, and the deployment's
data as memgov joins it in. ``pack_data`` pins that data to one pack's files (limits.yaml,
federation.yaml, org.yaml); ``any_data`` admits every valid data set instead (every limit in its
range, an agent's caps at most the global ones, any partner origins and audience servers), so a
property proved under it holds whatever the data files say. ``inline_data`` rewrites a pack's
policies to read its own data as constants, so two packs can be compared on one request while
each decides with its own data.
"""

from __future__ import annotations

import json
import re
from typing import Final, get_args

from sidecar.identity.mxid import Origin
from sidecar.policy.cedar_input import LIMIT_NAMES, limits_record
from sidecar.policy.model import (
    AgentLimitName,
    BoundaryClaim,
    DefinitionKind,
    Limits,
    Operation,
    ShareOwner,
    ShareVerb,
    WriteVerb,
)
from sidecar.policy.pack import Pack, PackError, is_complete

#: The decision input's bound on every count and time (model._BIG).
BIG: Final = 2**53
#: The agent caps memgov joins into context.agent for Cedar, by limits.yaml name.
CAPS: Final[tuple[tuple[AgentLimitName, str], ...]] = (
    ("embedding_items_per_agent_hour", "embeddingCap"),
    ("hourly_operations", "hourlyCap"),
)
#: An attribute the checks add to the schema's Deployment, pinned empty: Cedar has no empty set literal.
EMPTY_SET: Final = "context.deployment.memgovProveEmpty"
_DEPLOYMENT_TYPE: Final = re.compile(r"\bentity\s+Deployment\s*=?\s*\{")


def lit(value: str) -> str:
    """A Cedar string literal."""
    return json.dumps(value)


def set_of(values: list[str]) -> str:
    """A Cedar set of strings; the empty set is the pinned-empty attribute (``[]`` does not type-check)."""
    return "[" + ", ".join(lit(v) for v in values) + "]" if values else EMPTY_SET


def bounded(expr: str, low: int = 0) -> str:
    """``low <= expr <= 2^53``."""
    return f"({low} <= {expr} && {expr} <= {BIG})"


def _bounded_optional(record: str, attr: str) -> str:
    # Cedar's typechecker follows `has` through `if` and `&&`, not through `!... ||`.
    return f"(if {record} has {attr} then {bounded(f'{record}.{attr}')} else true)"


def schema_with_empty_set(schema: str) -> str:
    """The schema with the pinned-empty attribute added to Deployment (PackError when there is no Deployment)."""
    found = _DEPLOYMENT_TYPE.search(schema)
    if found is None:
        raise PackError("cedar/memgov.cedarschema: no entity Deployment to prove against", step="cedar")
    return schema[: found.end()] + "\n  memgovProveEmpty: Set<String>," + schema[found.end() :]


_ORIGINS: Final = "[" + ", ".join(lit(o.value) for o in Origin) + "]"


def _one_of(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(map(lit, values)) + "]"


#: A definition write's facts exist on controller.write alone, each field within its kinds (model.WriteFacts).
_WRITE: Final = (
    "(if context has write then"
    f" action == Action::{lit(Operation.CONTROLLER_WRITE.value)} &&"
    f" {_one_of(get_args(DefinitionKind))}.contains(context.write.kind) &&"
    f" {_one_of(get_args(WriteVerb))}.contains(context.write.verb) &&"
    f" {_one_of(get_args(BoundaryClaim))}.containsAll(context.write.claims)"
    " else true)"
)


#: A share's facts exist on session.share alone, each field within its kinds (model.ShareFacts).
_SHARE: Final = (
    "(if context has share then"
    f" action == Action::{lit(Operation.SESSION_SHARE.value)} &&"
    f" {_one_of(get_args(ShareVerb))}.contains(context.share.verb) &&"
    f" {_one_of(get_args(ShareOwner))}.contains(context.share.owner)"
    " else true)"
)


def _request_bounds() -> list[str]:
    """Bounds every request memgov builds meets, whatever the data."""
    return [
        f"{EMPTY_SET}.isEmpty()",
        f"(!principal.known || {_ORIGINS}.contains(principal.origin))",
        f'(!resource.exists || ({_ORIGINS}.contains(resource.origin) && resource.kind == "control_room"'
        f" && {bounded('resource.generation')}))",
        bounded("context.entries.count"),
        bounded("context.entries.cap"),
        bounded("context.request.itemCount"),
        bounded("context.request.maxItemBytes"),
        bounded("context.budget.embeddingUsed"),
        bounded("context.budget.hourlyUsed"),
        bounded("context.now"),
        _bounded_optional("context.request", "presentedGeneration"),
        _bounded_optional("context.delegation", "expiresAt"),
        _WRITE,
        _SHARE,
    ]


def _cap_expr(pack: Pack, name: AgentLimitName) -> str:
    """The agent's own cap as memgov joins it from agent_limits (cedar_input): per named agent, else global."""
    cap = str(getattr(pack.limits, name))
    for ref, value in sorted(pack.limits.agent_caps(name, pack.org).items(), reverse=True):
        cap = f"(if context.agent.known && context.agent.ref == {lit(ref)} then {value} else {cap})"
    return cap


def _partner_expr(pack: Pack) -> str:
    """The principal's partner origins as memgov joins them: what complete records admit for its server."""
    by_server: dict[str, set[str]] = {}
    for rec in pack.federation.partners:
        if is_complete(rec):
            by_server.setdefault(rec.server_name, set()).update(o.value for o in rec.origins)
    expr = EMPTY_SET
    for server, admitted in sorted(by_server.items(), reverse=True):
        expr = (
            f"(if principal.known && principal.serverName == {lit(server)} then {set_of(sorted(admitted))} else {expr})"
        )
    return expr


def _audience_expr(pack: Pack) -> str:
    fed = pack.federation
    servers = sorted({p.server_name for p in fed.partners if is_complete(p) and p.classification == fed.classification})
    return "[" + ", ".join(["context.deployment.serverName", *map(lit, servers)]) + "]"


def _limits_expr(limits: Limits) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in limits_record(limits).items()) + "}"


def _org_expr(org: dict[str, list[str]]) -> str:
    return "{" + ", ".join(f"{name}: {set_of(items)}" for name, items in sorted(org.items())) + "}"


def pack_data(pack: Pack) -> str:
    """Every realistic request under this pack's data: its data files and the input's bounds, as one condition."""
    parts = [
        f"context.deployment.limits == {_limits_expr(pack.limits)}",
        f"context.deployment.classification == {lit(pack.federation.classification)}",
        f"context.deployment.audienceServers == {_audience_expr(pack)}",
        *(f"context.deployment.org.{name} == {set_of(items)}" for name, items in sorted(pack.org.items())),
        *(f"context.agent.{attr} == {_cap_expr(pack, name)}" for name, attr in CAPS),
        f"principal.partnerOrigins == {_partner_expr(pack)}",
        *_request_bounds(),
    ]
    return " &&\n  ".join(parts)


#: The smallest value each limit may take (model.Limits).
_LIMIT_FLOOR: Final = {name: 0 if name == "prefetch_searches" else 1 for name in LIMIT_NAMES.values()}


def any_data() -> str:
    """Every realistic request under any valid data: limits in their ranges (a burst at most the rate),
    an agent's caps between 1 and the global value (the global value for an unknown agent), any
    named classification, any partner origins and org lists, audience servers that include the
    local one."""
    limits = [
        bounded(f"context.deployment.limits.{attr}", _LIMIT_FLOOR[name]) for attr, name in sorted(LIMIT_NAMES.items())
    ]
    caps = [
        f"(if context.agent.known then (1 <= context.agent.{attr} &&"
        f" context.agent.{attr} <= context.deployment.limits.{_cedar(name)})"
        f" else context.agent.{attr} == context.deployment.limits.{_cedar(name)})"
        for name, attr in CAPS
    ]
    parts = [
        *limits,
        "context.deployment.limits.rateBurst <= context.deployment.limits.ratePerMinute",
        *caps,
        # A partner record names its classification, so only a named classification can have partners.
        'context.deployment.classification != ""',
        "context.deployment.audienceServers.contains(context.deployment.serverName)",
        "(principal.known || principal.partnerOrigins.isEmpty())",
        f"{_ORIGINS}.containsAll(principal.partnerOrigins)",
        *_request_bounds(),
    ]
    return " &&\n  ".join(parts)


def _cedar(name: str) -> str:
    return next(attr for attr, snake in LIMIT_NAMES.items() if snake == name)


# ---------------------------------------------------------------------------------------------
# A pack's data inlined into its policies (for comparing two packs that each have their own data).
# ---------------------------------------------------------------------------------------------

_CODE: Final = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*')
_DOT: Final = r"\s*\.\s*"
_READS: Final = re.compile(
    rf"(?P<limits>\bcontext{_DOT}deployment{_DOT}limits(?:{_DOT}(?P<limit>\w+)|\s*\[\s*\"(?P<quoted>\w+)\"\s*\])?)"
    rf"|(?P<classification>\bcontext{_DOT}deployment{_DOT}classification\b)"
    rf"|(?P<audience>\bcontext{_DOT}deployment{_DOT}audienceServers\b)"
    rf"|(?P<orgs>\bcontext{_DOT}deployment{_DOT}org(?:{_DOT}(?P<org>\w+))?)"
    rf"|\bcontext{_DOT}agent{_DOT}(?P<cap>embeddingCap|hourlyCap)\b"
    rf"|(?P<partners>\bprincipal{_DOT}partnerOrigins\b)"
)


def _inlined(pack: Pack, m: re.Match[str]) -> str:
    """The constant a data read of ``pack`` stands for (the read itself when the data has no such key)."""
    if m.group("limits"):
        record = limits_record(pack.limits)
        name = m.group("limit") or m.group("quoted")
        if name is None:
            return _limits_expr(pack.limits)
        return str(record[name]) if name in record else m.group(0)
    if m.group("classification"):
        return lit(pack.federation.classification)
    if m.group("audience"):
        return _audience_expr(pack)
    if m.group("cap"):
        return _cap_expr(pack, next(n for n, attr in CAPS if attr == m.group("cap")))
    if m.group("partners"):
        return _partner_expr(pack)
    org = m.group("org")
    if org is None:
        return _org_expr(pack.org)
    return set_of(pack.org[org]) if org in pack.org else m.group(0)


def inline_data(pack: Pack, text: str) -> str:
    """Cedar policies that read ``pack``'s data as constants instead of from the request's deployment."""
    out = []
    last = 0
    for m in _CODE.finditer(text):
        out.append(_READS.sub(lambda r: "(" + _inlined(pack, r) + ")", text[last : m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_READS.sub(lambda r: "(" + _inlined(pack, r) + ")", text[last:]))
    return "".join(out)
