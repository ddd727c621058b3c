"""Mapping a decision input to Cedar: the Deployment, User and Scope entities, and the request.

Names follow the schema in policies/cedar/memgov.cedarschema (camelCase attributes). Unknown
principals and missing scopes become placeholders flagged ``known``/``exists`` false; optional
facts are left out rather than given a default, so a policy must test them with ``has``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias, TypedDict

from sidecar.policy.model import DecisionInput, Deployment, Limits
from sidecar.policy.pack import is_complete

#: A value in Cedar's JSON format: a string, long or boolean, a set, or a record (an entity
#: reference is the record ``{"__entity": {"type": ..., "id": ...}}``).
CedarValue: TypeAlias = str | int | bool | Sequence["CedarValue"] | Mapping[str, "CedarValue"]


class EntityUid(TypedDict):
    type: str
    id: str


class Entity(TypedDict):
    """One entity of Cedar's JSON entity list."""

    uid: EntityUid
    attrs: Mapping[str, CedarValue]
    parents: list[EntityUid]


class Request(TypedDict):
    """A Cedar request: principal, action and resource by uid, and the context record."""

    principal: EntityUid
    action: EntityUid
    resource: EntityUid
    context: dict[str, CedarValue]


_DEPLOYMENT: Final[EntityUid] = {"type": "Deployment", "id": "local"}
_OPEN_ACL: Final[Mapping[str, CedarValue]] = {"allow": ["*"], "allowIpLiterals": True}


def cedar_name(name: str) -> str:
    """A limits.yaml key as the Cedar Limits record spells it (``max_fact_bytes`` → ``maxFactBytes``)."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


#: limits.yaml's key of each attribute of the Cedar Limits record (agent_limits and the per-source
#: embedding share, which no rule reads, are not in it).
LIMIT_NAMES: Final = {
    cedar_name(k): k for k in Limits.model_fields if k not in ("agent_limits", "embedding_items_per_source_hour")
}


def limits_record(lim: Limits) -> dict[str, int]:
    """limits.yaml as the Cedar ``Limits`` record (attributes in limits.yaml's order)."""
    return {name: getattr(lim, key) for name, key in LIMIT_NAMES.items()}


def deployment_entity(dep: Deployment) -> Entity:
    """The Deployment entity: settings, limits, pre-joined partner servers and the org lists."""
    # Cedar has no loops: the audience servers complete partner records admit are joined here.
    partners = {
        p.server_name for p in dep.federation_partners if is_complete(p) and p.classification == dep.classification
    }
    return {
        "uid": _DEPLOYMENT,
        "attrs": {
            "serverName": dep.server_name,
            "bridgeBot": dep.bridge_bot or "",
            "agentGhost": dep.agent_ghost or "",
            "classification": dep.classification,
            "limits": limits_record(dep.limits),
            "audienceServers": sorted(partners | {dep.server_name}),
            "org": dep.org,
        },
        "parents": [],
    }


def _user(inp: DecisionInput) -> Entity:
    p = inp.principal
    if p is None:
        attrs: dict[str, CedarValue] = {
            "known": False,
            "mxid": "",
            "localpart": "",
            "serverName": "",
            "origin": "",
            "partnerOrigins": [],
        }
    else:
        # The origins complete partner records admit for the principal's server, joined for Cedar.
        origins = {
            o.value
            for r in inp.deployment.federation_partners
            if is_complete(r) and r.server_name == p.server_name
            for o in r.origins
        }
        attrs = {
            "known": True,
            "mxid": p.mxid,
            "localpart": p.localpart,
            "serverName": p.server_name,
            "origin": p.origin.value,
            "partnerOrigins": sorted(origins),
        }
    return {"uid": {"type": "User", "id": p.mxid if p is not None else ""}, "attrs": attrs, "parents": []}


def _scope(inp: DecisionInput) -> Entity:
    s = inp.scope
    if s is None:
        attrs: dict[str, CedarValue] = {
            "exists": False,
            "enabled": False,
            "generation": -1,
            "kind": "",
            "roomId": "",
            "principalMxid": "",
            "origin": "",
            "agent": "",
        }
        return {"uid": {"type": "Scope", "id": ""}, "attrs": attrs, "parents": []}
    attrs = {
        "exists": True,
        "enabled": s.enabled,
        "generation": s.generation,
        "kind": s.kind,
        "roomId": s.room_id,
        "principalMxid": s.principal_mxid,
        "origin": s.origin.value,
        "agent": s.agent,
    }
    return {"uid": {"type": "Scope", "id": s.scope_id}, "attrs": attrs, "parents": []}


def _delegation(inp: DecisionInput) -> dict[str, CedarValue]:
    req = inp.request
    out: dict[str, CedarValue] = {
        "present": req.context.present,
        "valid": req.context.valid,
        "expired": req.context.expired,
        "replayed": req.context.replayed,
    }
    if req.context.expires_at is not None:
        out["expiresAt"] = req.context.expires_at
    if req.context_scope is not None:
        out["scope"] = {"kind": req.context_scope.kind, "roomId": req.context_scope.room_id}
    if req.context_agent is not None:
        out["agent"] = req.context_agent
    return out


def _room(inp: DecisionInput) -> dict[str, CedarValue] | None:
    room = inp.room
    if room is None:
        return None
    # Matrix semantics: without an m.room.server_acl event every server is admitted.
    acl = room.server_acl
    return {
        "roomVersion": room.room_version,
        "encrypted": room.encrypted,
        "joinRule": room.join_rule,
        "historyVisibility": room.history_visibility,
        "members": room.members,
        "invited": room.invited,
        "serverAcl": {"allow": acl.allow, "allowIpLiterals": acl.allow_ip_literals} if acl else _OPEN_ACL,
    }


def _context(inp: DecisionInput) -> dict[str, CedarValue]:
    a, req, b, lim = inp.agent, inp.request, inp.budget, inp.deployment.limits
    request: dict[str, CedarValue] = {
        "keyValid": req.key_valid,
        "userIdMatches": req.user_id_matches,
        "agentNameMatches": req.agent_name_matches,
        "itemCount": req.item_count,
        "maxItemBytes": req.max_item_bytes,
    }
    if req.presented_generation is not None:
        request["presentedGeneration"] = req.presented_generation
    context: dict[str, CedarValue] = {
        "agent": {
            "known": a is not None,
            "ref": a.ref if a else "",
            "memoryEnabled": bool(a and a.memory_enabled),
            # Cedar has no loops: the agent's own caps are joined here from limits.yaml and org.yaml.
            "embeddingCap": lim.agent_cap("embedding_items_per_agent_hour", a.ref if a else None, inp.deployment.org),
            "hourlyCap": lim.agent_cap("hourly_operations", a.ref if a else None, inp.deployment.org),
        },
        "request": request,
        "delegation": _delegation(inp),
        "budget": {
            "rateOk": b.rate_ok,
            "hourlyOk": b.hourly_ok,
            "prefetchOk": b.prefetch_ok,
            "embeddingOk": b.embedding_ok,
            "hourlyUsed": b.hourly_operations_used,
            "embeddingUsed": b.embedding_items_used,
        },
        "entries": {"count": inp.entries.count, "cap": inp.entries.cap},
        "now": inp.now,
        "deployment": {"__entity": {"type": _DEPLOYMENT["type"], "id": _DEPLOYMENT["id"]}},
    }
    room = _room(inp)
    if room is not None:
        context["room"] = room
    if inp.audience is not None:
        context["audience"] = {"servers": inp.audience.servers, "classification": inp.audience.classification}
    write = req.write
    if write is not None:
        context["write"] = {
            "kind": write.kind,
            "verb": write.verb,
            "targets": write.targets,
            "governed": write.governed,
            "operator": write.operator,
            "claims": list(write.claims),
        }
    share = req.share
    if share is not None:
        context["share"] = {"verb": share.verb, "owner": share.owner}
    return context


def entities(inp: DecisionInput) -> list[Entity]:
    """The Deployment, User and Scope entities of an input."""
    return [deployment_entity(inp.deployment), _user(inp), _scope(inp)]


def request(inp: DecisionInput) -> Request:
    """The Cedar request of an input: principal, action, resource and context."""
    return {
        "principal": {"type": "User", "id": inp.principal.mxid if inp.principal else ""},
        "action": {"type": "Action", "id": inp.operation.value},
        "resource": {"type": "Scope", "id": inp.scope.scope_id if inp.scope else ""},
        "context": _context(inp),
    }
