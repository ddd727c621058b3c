"""Counterexamples as memgov decision inputs, replayed on both engines.

The symbolic checks answer with a Cedar request and its entities. memgov maps a decision input
to Cedar in sidecar/policy/cedar_input.py; this is that mapping backwards, so the same request
can be decided by both engines of a pack (and by ``memgov policy explain --input``), which also
shows whether the Rego pack has the same hole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sidecar.policy.model import DecisionInput
from sidecar.policy.pack import Pack
from sidecar.policy.review import ENGINES, answers
from sidecar.policy.symcc import Verdict


def _value(v: Any) -> Any:
    # Cedar JSON: an entity reference is {"__entity": {...}}; sets come back as lists.
    if isinstance(v, dict) and "__entity" in v:
        return v["__entity"]
    return v


def _app_name(ref: str) -> str:
    ns, _, name = ref.partition("/")
    return f"{ns}__NS__{name}".replace("-", "_")


def to_input(found: dict[str, Any], pack: Pack) -> DecisionInput:
    """A counterexample (Cedar request and entities) as the memgov decision input that maps to it.

    ValueError when it lies outside what a decision input can hold (e.g. a count past 2^53).
    """
    req = {k: _value(v) for k, v in found["request"].items()}
    attrs = {(e["uid"]["type"], e["uid"]["id"]): e["attrs"] for e in found["entities"]}
    user = attrs.get(("User", req["principal"]["id"]), {})
    scope = attrs.get(("Scope", req["resource"]["id"]), {})
    ctx = req["context"]
    dep_ref = _value(ctx["deployment"])
    dep = attrs.get((dep_ref["type"], dep_ref["id"]), {})
    agent, r, d = ctx["agent"], ctx["request"], ctx["delegation"]
    room, aud = ctx.get("room"), ctx.get("audience")
    data: dict[str, Any] = {
        "operation": req["action"]["id"],
        "principal": {
            "mxid": user["mxid"],
            "localpart": user["localpart"],
            "server_name": user["serverName"],
            "origin": user["origin"],
        }
        if user.get("known")
        else None,
        "agent": {"ref": agent["ref"], "app_name": _app_name(agent["ref"]), "memory_enabled": agent["memoryEnabled"]}
        if agent["known"]
        else None,
        "scope": {
            "scope_id": req["resource"]["id"] or "scope",
            "kind": scope["kind"],
            "room_id": scope["roomId"],
            "enabled": scope["enabled"],
            "generation": scope["generation"],
            "principal_mxid": scope["principalMxid"],
            "origin": scope["origin"],
            "agent": scope["agent"],
        }
        if scope.get("exists")
        else None,
        "request": {
            "presented_generation": r.get("presentedGeneration"),
            "key_valid": r["keyValid"],
            "user_id_matches": r["userIdMatches"],
            "agent_name_matches": r["agentNameMatches"],
            "item_count": r["itemCount"],
            "max_item_bytes": r["maxItemBytes"],
            "context": {
                "present": d["present"],
                "valid": d["valid"],
                "expired": d["expired"],
                "replayed": d["replayed"],
                "expires_at": d.get("expiresAt"),
            },
            "context_scope": {"kind": d["scope"]["kind"], "room_id": d["scope"]["roomId"]} if "scope" in d else None,
            "context_agent": d.get("agent"),
        },
        "room": {
            "room_version": room["roomVersion"],
            "encrypted": room["encrypted"],
            "join_rule": room["joinRule"],
            "history_visibility": room["historyVisibility"],
            "members": room["members"],
            "invited": room["invited"],
            "server_acl": {
                "allow": room["serverAcl"]["allow"],
                "allow_ip_literals": room["serverAcl"]["allowIpLiterals"],
            },
        }
        if room is not None
        else None,
        "audience": {"servers": aud["servers"], "classification": aud["classification"]} if aud is not None else None,
        "budget": {
            "rate_ok": ctx["budget"]["rateOk"],
            "hourly_ok": ctx["budget"]["hourlyOk"],
            "prefetch_ok": ctx["budget"]["prefetchOk"],
            "embedding_ok": ctx["budget"]["embeddingOk"],
            "hourly_operations_used": ctx["budget"]["hourlyUsed"],
            "embedding_items_used": ctx["budget"]["embeddingUsed"],
        },
        "entries": {"count": ctx["entries"]["count"], "cap": ctx["entries"]["cap"]},
        "now": ctx["now"],
        "deployment": {
            "server_name": dep.get("serverName", ""),
            "bridge_bot": dep.get("bridgeBot") or None,
            "agent_ghost": dep.get("agentGhost") or None,
            "classification": pack.federation.classification,
            "federation_partners": [p.model_dump(mode="json") for p in pack.federation.partners],
            "limits": pack.limits.model_dump(mode="json"),
            "org": pack.org,
        },
    }
    try:
        return DecisionInput.model_validate(data)
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors())
        raise ValueError(f"not a decision input ({where})") from None


@dataclass(frozen=True)
class Finding:
    """A failed verdict with its counterexample as a decision input and each engine's answer to it."""

    verdict: Verdict
    inp: DecisionInput | None
    raw: dict[str, Any] | None
    answers: dict[str, str]
    problem: str = ""


async def replay(data: Pack, found: list[Verdict], deciders: dict[str, Pack]) -> list[Finding]:
    """Each counterexample as a decision input with ``data``'s deployment, decided by both engines of each pack.

    ``deciders`` names the packs (``""`` for one): answers are labelled ``"<name>cedar"``, ``"<name>opa"``.
    """
    inputs: dict[str, DecisionInput] = {}
    problems: dict[str, str] = {}
    for i, v in enumerate(found):
        if v.counterexample is None:
            continue
        try:
            inputs[str(i)] = to_input(v.counterexample, data)
        except ValueError as exc:
            problems[str(i)] = str(exc)
    decided = {name: await answers(pack, inputs) for name, pack in deciders.items()} if inputs else {}
    out = []
    for i, v in enumerate(found):
        key = str(i)
        if key in inputs:
            said = {f"{name}{e}": decided[name][e][key] for name in deciders for e in ENGINES}
            out.append(Finding(v, inputs[key], None, said))
        elif key in problems:
            out.append(Finding(v, None, v.counterexample, {}, problems[key]))
    return out
