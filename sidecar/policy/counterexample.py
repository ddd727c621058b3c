"""Counterexamples as memgov decision inputs, replayed on both engines.

The symbolic checks answer with a Cedar request and its entities. memgov maps a decision input
to Cedar in sidecar/policy/cedar_input.py; this is that mapping backwards, so the same request
can be decided by both engines of a pack (and by ``memgov policy explain --input``), which also
shows whether the Rego pack has the same hole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import cedarpy
from pydantic import ValidationError

from sidecar.policy import why
from sidecar.policy.cedar import compile_pack
from sidecar.policy.cedar_input import LIMIT_NAMES, cedar_name, entities, request
from sidecar.policy.minimize import Change, nearest
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


#: Text fields of the partner records a counterexample's data needs (any complete record will do).
_PARTNER_TEXT: Final = {
    "controller": "counterexample controller",
    "processor": "counterexample processor",
    "purpose": "counterexample purpose",
    "residency": "counterexample residency",
    "erasure_owner": "counterexample erasure owner",
    "principal_binding": "mxid",
}


def _partners(user: dict[str, Any], dep: dict[str, Any]) -> list[dict[str, Any]]:
    """Complete partner records that join to what the request holds: the principal's partner origins
    (User.partnerOrigins) and the audience servers beyond the local one (Deployment.audienceServers)."""
    classification = dep.get("classification", "")
    audience = [s for s in dep.get("audienceServers", []) if s != dep.get("serverName")]
    origins = list(user.get("partnerOrigins", [])) if user.get("known") else []
    server = user.get("serverName", "")
    records: dict[str, dict[str, Any]] = {}
    for name in audience:
        records[name] = {"server_name": name, "origins": [], "classification": classification}
    if origins:
        record = records.setdefault(server, {"server_name": server, "origins": [], "classification": ""})
        record["origins"] = origins
        if server not in audience:
            # Admits the origins without covering the audience: another classification than the local one.
            record["classification"] = classification + "-partner"
    return [{**r, **_PARTNER_TEXT, "retention_days": 7} for r in records.values()]


def _data(found: dict[str, Any], pack: Pack, user: dict[str, Any], dep: dict[str, Any]) -> dict[str, Any]:
    """The deployment's data a counterexample found under any data holds: limits, caps, partners, org."""
    agent = found["request"]["context"]["agent"]
    record = dep.get("limits", {})
    limits: dict[str, Any] = {LIMIT_NAMES.get(k, k): v for k, v in record.items()}
    limits["embedding_items_per_source_hour"] = pack.limits.embedding_items_per_source_hour
    entries = []
    for attr, name in (("embeddingCap", "embedding_items_per_agent_hour"), ("hourlyCap", "hourly_operations")):
        if agent.get("known") and agent.get(attr, 0) < limits.get(name, 0):
            entries.append({"agents": [agent["ref"]], name: agent[attr]})
    limits["agent_limits"] = entries
    return {
        "classification": dep.get("classification", ""),
        "federation_partners": _partners(user, dep),
        "limits": limits,
        "org": {k: list(v) for k, v in (dep.get("org") or {}).items()},
    }


def _named(record: dict[str, Any], *fields: str) -> dict[str, Any]:
    """The decision input's ``fields`` from the Cedar record that holds each under its Cedar name."""
    return {name: record[cedar_name(name)] for name in fields}


def to_input(found: dict[str, Any], pack: Pack, *, own_data: bool = False) -> DecisionInput:
    """A counterexample (Cedar request and entities) as the memgov decision input that maps to it.

    The deployment's data is the pack's, or (``own_data``, for a counterexample found under any
    data) the limits, caps, partner records and org lists the request itself holds. ValueError when
    it lies outside what a decision input can hold (e.g. a count past 2^53).
    """
    req = {k: _value(v) for k, v in found["request"].items()}
    attrs = {(e["uid"]["type"], e["uid"]["id"]): e["attrs"] for e in found["entities"]}
    user = attrs.get(("User", req["principal"]["id"]), {})
    scope = attrs.get(("Scope", req["resource"]["id"]), {})
    ctx = req["context"]
    dep_ref = _value(ctx["deployment"])
    dep = attrs.get((dep_ref["type"], dep_ref["id"]), {})
    agent, r, d = ctx["agent"], ctx["request"], ctx["delegation"]
    room, aud, write, share = ctx.get("room"), ctx.get("audience"), ctx.get("write"), ctx.get("share")
    budget = ctx["budget"]
    data: dict[str, Any] = {
        "operation": req["action"]["id"],
        "principal": _named(user, "mxid", "localpart", "server_name", "origin") if user.get("known") else None,
        "agent": {"ref": agent["ref"], "app_name": _app_name(agent["ref"]), "memory_enabled": agent["memoryEnabled"]}
        if agent["known"]
        else None,
        "scope": {
            "scope_id": req["resource"]["id"] or "scope",
            **_named(scope, "kind", "room_id", "enabled", "generation", "principal_mxid", "origin", "agent"),
        }
        if scope.get("exists")
        else None,
        "request": {
            "presented_generation": r.get("presentedGeneration"),
            **_named(r, "key_valid", "user_id_matches", "agent_name_matches", "item_count", "max_item_bytes"),
            "context": {**_named(d, "present", "valid", "expired", "replayed"), "expires_at": d.get("expiresAt")},
            "context_scope": _named(d["scope"], "kind", "room_id") if "scope" in d else None,
            "context_agent": d.get("agent"),
            "write": {
                **_named(write, "kind", "verb", "targets", "governed", "operator"),
                "claims": sorted(write["claims"]),
            }
            if write is not None
            else None,
            "share": _named(share, "verb", "owner") if share is not None else None,
        },
        "room": {
            **_named(room, "room_version", "encrypted", "join_rule", "history_visibility", "members", "invited"),
            "server_acl": _named(room["serverAcl"], "allow", "allow_ip_literals"),
        }
        if room is not None
        else None,
        "audience": _named(aud, "servers", "classification") if aud is not None else None,
        "budget": {
            **_named(budget, "rate_ok", "hourly_ok", "prefetch_ok", "embedding_ok"),
            "hourly_operations_used": budget["hourlyUsed"],
            "embedding_items_used": budget["embeddingUsed"],
        },
        "entries": _named(ctx["entries"], "count", "cap"),
        "now": ctx["now"],
        "deployment": {
            "server_name": dep.get("serverName", ""),
            "bridge_bot": dep.get("bridgeBot") or None,
            "agent_ghost": dep.get("agentGhost") or None,
            **(
                _data(found, pack, user, dep)
                if own_data
                else {
                    "classification": pack.federation.classification,
                    "federation_partners": [p.model_dump(mode="json") for p in pack.federation.partners],
                    "limits": pack.limits.model_dump(mode="json"),
                    "org": pack.org,
                }
            ),
        },
    }
    try:
        return DecisionInput.model_validate(data)
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors())
        raise ValueError(f"not a decision input ({where})") from None


_POLICY_IN_ERROR: Final = re.compile(r"`(policy\d+)`")


class Oracle:
    """A pack's Cedar policies and some extra conditions, decided in-process on decision inputs.

    The conditions (a property, the assumptions) are evaluated as permits of the same request, so
    a counterexample can be checked again after each change the minimization makes.
    """

    def __init__(self, pack: Pack, conditions: dict[str, str] | None = None) -> None:
        self.pack = pack
        self.compiled = compile_pack(pack)
        self.names = list(conditions or {})
        text = "\n".join(
            f"permit (principal, action, resource) when {{ {cond} }};" for cond in (conditions or {}).values()
        )
        self.checks = cedarpy.PolicySet.from_str(text) if text else None

    def _entities(self, inp: DecisionInput) -> cedarpy.Entities:
        return cedarpy.Entities.from_json_str(json.dumps(entities(inp)), self.compiled.schema)

    def decide(self, inp: DecisionInput) -> str:
        """``allow``, ``deny <codes>`` or ``error``: the pack's Cedar answer, without the floor."""
        try:
            result = cedarpy.is_authorized(dict(request(inp)), self.compiled.policies, self._entities(inp))
        except (ValueError, TypeError):
            return "error"
        if result.diagnostics.errors:
            return "error"
        if result.allowed:
            return "allow"
        return "deny " + " ".join(sorted({self.compiled.reasons.get(p, "") for p in result.diagnostics.reasons}))

    def holds(self, inp: DecisionInput) -> dict[str, bool | None]:
        """Each condition's value on the input (None when evaluating it fails)."""
        if self.checks is None:
            return {}
        try:
            result = cedarpy.is_authorized(dict(request(inp)), self.checks, self._entities(inp))
        except (ValueError, TypeError):
            return dict.fromkeys(self.names)
        failed = {m for e in result.diagnostics.errors for m in _POLICY_IN_ERROR.findall(str(e))}
        held = set(result.diagnostics.reasons)
        out: dict[str, bool | None] = {}
        for i, name in enumerate(self.names):
            pid = f"policy{i}"
            out[name] = None if pid in failed else pid in held
        return out

    def breaks(self, inp: DecisionInput) -> bool:
        """The pack allows the input, it meets ``assume`` and not ``property`` (a counterexample)."""
        if self.decide(inp) != "allow":
            return False
        values = self.holds(inp)
        return values.get("assume") is True and values.get("property") is False


def with_data(inp: DecisionInput, pack: Pack) -> DecisionInput:
    """The same request under ``pack``'s data files (limits, partners, classification, org lists)."""
    dep = inp.deployment.model_copy(
        update={
            "classification": pack.federation.classification,
            "federation_partners": list(pack.federation.partners),
            "limits": pack.limits,
            "org": pack.org,
        }
    )
    return inp.model_copy(update={"deployment": dep})


@dataclass(frozen=True)
class Example:
    """A counterexample as a reviewer reads it: the base it is nearest to and the fields that differ,
    the deployment, each engine's answer, and why the rules that should have refused it did not."""

    verdict: Verdict
    inp: DecisionInput | None
    base: str = ""
    changes: tuple[Change, ...] = ()
    answers: tuple[tuple[str, str], ...] = ()
    why: tuple[str, ...] = ()
    raw: dict[str, Any] | None = None
    problem: str = ""


def deployment_line(inp: DecisionInput) -> str:
    """The deployment of an input in one line (its settings, and how much data it carries)."""
    dep = inp.deployment
    return (
        f"deployment: server_name {dep.server_name}, bridge_bot {dep.bridge_bot}, agent_ghost {dep.agent_ghost},"
        f" classification {dep.classification}, {len(dep.federation_partners)} partner record(s),"
        f" {len(dep.limits.agent_limits)} agent_limits entr{'y' if len(dep.limits.agent_limits) == 1 else 'ies'},"
        f" {len(dep.org)} org list(s)"
    )


def explained(pack: Pack, inp: DecisionInput, codes: list[str]) -> tuple[str, ...]:
    """The per-condition explanation of both engines for the rules of ``codes``."""
    lines: list[str] = []
    for code in codes:
        lines += why.cedar_brief(pack, inp, code)
        lines += why.rego_brief(pack, inp, code)
    return tuple(lines)


def reduced(
    verdict: Verdict,
    inp: DecisionInput,
    bases: dict[str, dict[str, Any]],
    still: Callable[[DecisionInput], bool],
    seeds: list[tuple[str, DecisionInput]] | None = None,
) -> Example:
    """The counterexample reduced to the fewest fields away from a base that keep it one (``seeds``:
    rows the enforcing rules refuse, to start from)."""
    if not still(inp):
        # An input that does not break what the solver found broken is never shown as its counterexample.
        return Example(
            verdict, None, raw=verdict.counterexample, problem="the request does not map to a decision input"
        )
    found = nearest(inp, bases, still, seeds) if bases else None
    if found is None:
        return Example(verdict, inp)
    return Example(verdict, found.inp, found.base, tuple(found.changes))


def smallest(examples: list[Example]) -> Example | None:
    """The example with the fewest changes from its base (one with a base before one without)."""
    usable = [e for e in examples if e.inp is not None]
    if not usable:
        return examples[0] if examples else None
    return min(usable, key=lambda e: (not e.base, len(e.changes)))


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
