"""Engine-neutral decision input and output (SPEC D5), published as JSON Schema in docs/schema/.

The gateway computes every fact in code (MAC checks, name comparisons, budget reservations,
byte counts) and hands the engine a complete :class:`DecisionInput`; the engine only decides.
Fields that can be unknown are nullable and a missing fact always leads to a denial. The
input carries identifiers, flags and counts only, never memory content.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    field_validator,
    model_validator,
)

# The origin kinds of SPEC D1 live with the MXID grammar; importing them here re-exports them.
from sidecar.identity.mxid import Origin
from sidecar.reasons import Action, Code, Reason, code
from sidecar.routes import Operation as Operation

#: Upper bound of every integer fact: exact in JSON numbers and far from 64-bit overflow in sums.
_BIG = 2**53


#: A reason code in a model: built in or declared by the loaded pack; the schema shows the built-in ones.
ReasonCode = Annotated[Code, PlainValidator(code, json_schema_input_type=Reason), PlainSerializer(lambda c: c.value)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Principal(_Model):
    """The acting Matrix principal; for keyed memory calls, the scope's principal."""

    mxid: str = Field(..., description="Complete MXID, e.g. @alice:example.org.")
    localpart: str = Field(..., description="Localpart of the MXID (empty means invalid).")
    server_name: str = Field(..., description="Server name of the MXID.")
    origin: Origin = Field(..., description="Origin kind of the identity.")


class Agent(_Model):
    """The agent the request targets."""

    ref: str = Field(..., description="Agent reference namespace/name.")
    app_name: str = Field(..., description="kagent app_name: <ns>__NS__<name with - replaced by _>.")
    memory_enabled: bool = Field(..., description="The agent is configured as memory-enabled in memgov.")


class ScopeRecord(_Model):
    """The durable scope record from the state store (content-free)."""

    scope_id: str = Field(..., description="Opaque scope id.")
    kind: Literal["control_room"] = Field("control_room", description="Scope kind.")
    room_id: str = Field(..., description="Control room id of the scope.")
    enabled: bool = Field(..., description="Consent is currently given.")
    generation: int = Field(..., ge=0, le=_BIG, description="Current consent generation.")
    purpose: str | None = Field(None, description="Consented purpose (operator-authored, bounded).")
    policy_version: str | None = Field(None, description="Policy version the consent refers to.")
    principal_mxid: str = Field(..., description="MXID of the scope's principal.")
    origin: Origin = Field(..., description="Origin kind of the scope's principal.")
    agent: str = Field(..., description="Agent reference namespace/name of the scope.")


class ContextFacts(_Model):
    """What the gateway found out about the delegation context (X-Memgov-Context)."""

    present: bool = Field(False, description="A context was sent.")
    valid: bool = Field(False, description="Its signature and claims verified.")
    expired: bool = Field(False, description="The verifier found it expired.")
    replayed: bool = Field(False, description="Its jti was seen before.")
    expires_at: int | None = Field(
        None, ge=0, le=_BIG, description="Its exp claim, epoch seconds; expired when now >= expires_at."
    )


class ContextScope(_Model):
    """The scope a delegation context claims."""

    kind: str = Field(..., description="Claimed scope kind.")
    room_id: str = Field(..., description="Claimed room id.")


#: The definition collections a controller write changes (kagent's API paths under /api/).
DefinitionKind = Literal["agents", "sandboxagents", "agentharnesses", "modelconfigs", "toolservers", "prompttemplates"]
#: What a controller write does to its definition.
WriteVerb = Literal["create", "update", "delete"]
#: What a definition claims of memgov's boundary (docs/security.md): a label or annotation that
#: names memgov's pods or marks the boundary, a name of one of memgov's objects, memgov's service
#: account, a reference to one of memgov's Secrets, or a volume of the node's own files (where
#: the kubelet keeps every pod's Secrets).
BoundaryClaim = Literal["label", "annotation", "name", "service_account", "secret", "host_path"]


class WriteFacts(_Model):
    """What the gateway found out about a write to kagent's definitions (controller.write)."""

    kind: DefinitionKind = Field(..., description="The definition collection written to.")
    verb: WriteVerb = Field(..., description="create (POST), update (PUT, PATCH) or delete (DELETE).")
    targets: list[str] = Field(
        default_factory=list,
        max_length=4,
        description="Every namespace/name the write names, in the path or the body, as kagent resolves it.",
    )
    governed: bool = Field(
        False,
        description="A target is a memory agent memgov governs, its memory-disabled variant, or a ModelConfig"
        " such an agent uses (agents.<ref>.model_configs).",
    )
    operator: bool = Field(False, description="The write carries an operator token that verified (X-Memgov-Operator).")
    claims: list[BoundaryClaim] = Field(
        default_factory=list,
        max_length=6,
        description="Sorted unique kinds of field in the definition that claim memgov's identity or touch its"
        " boundary; empty for a definition that claims nothing.",
    )


#: What a request does with one of kagent's share links (v0.10): create, list or revoke the links of
#: a session, or use one (an ``X-Share-Token`` that makes kagent act as the session's owner).
ShareVerb = Literal["create", "list", "revoke", "use"]
#: Who owns the shared session, as kagent answered for it: one of memgov's session keys (a memory
#: agent's conversation), anyone else, or unknown (kagent did not show the session).
ShareOwner = Literal["session_key", "user", "unknown"]


class ShareFacts(_Model):
    """What the gateway found out about a share of a kagent session (session.share)."""

    verb: ShareVerb = Field(
        ..., description="create (POST …/shares), list (GET …/shares), revoke (DELETE …/shares/{token}) or use."
    )
    owner: ShareOwner = Field(
        "unknown",
        description="The session's owner as kagent answered GET /api/sessions/{id} for this caller: a memgov"
        " session key, another user, or unknown when kagent did not answer with the session.",
    )


class RequestFacts(_Model):
    """Facts about this request, computed by the gateway."""

    presented_generation: int | None = Field(
        None, ge=0, le=_BIG, description="Generation inside the presented session key."
    )
    key_valid: bool = Field(False, description="The session key's MAC verified and names the scope.")
    user_id_matches: bool = Field(False, description="Every user id carrier holds the same session key.")
    caller_agent_name: str | None = Field(None, description="agent_name from the body or query.")
    header_agent_name: str | None = Field(None, description="X-Agent-Name header value.")
    agent_name_matches: bool = Field(False, description="Body and header agent names equal the scope agent's app_name.")
    item_count: int = Field(0, ge=0, le=_BIG, description="Facts in a save, inputs in an embedding call.")
    max_item_bytes: int = Field(
        0, ge=0, le=_BIG, description="Largest UTF-8 byte length among facts or embedding inputs."
    )
    limit: int | None = Field(None, ge=-_BIG, le=_BIG, description="Requested search limit (saturated at ±2^53).")
    ttl_days: int | None = Field(
        None, ge=-_BIG, le=_BIG, description="Requested ttl_days (<= 0 means kagent's 15; saturated at ±2^53)."
    )
    is_prefetch: bool = Field(False, description="The search is a first-turn prefetch.")

    @field_validator("limit", "ttl_days", mode="before")
    @classmethod
    def _saturate(cls, v: object) -> object:
        # kagent takes any int64; past 2^53 a JSON number is no longer exact in every engine. A
        # saturated value compares with every bound a pack can state as the request itself would.
        if isinstance(v, int) and not isinstance(v, bool):
            return max(-_BIG, min(v, _BIG))
        return v

    context: ContextFacts = Field(default_factory=ContextFacts, description="Delegation context facts.")
    context_scope: ContextScope | None = Field(None, description="Scope claimed by the context.")
    context_agent: str | None = Field(None, description="Agent reference claimed by the context.")
    write: WriteFacts | None = Field(None, description="A controller write's facts; null on every other operation.")
    share: ShareFacts | None = Field(None, description="A session share's facts; null on every other operation.")


class ServerAcl(_Model):
    """The room's m.room.server_acl content."""

    allow: list[str] = Field(default_factory=list, description="Allowed server globs.")
    deny: list[str] = Field(default_factory=list, description="Denied server globs.")
    allow_ip_literals: bool = Field(True, description="IP literal server names admitted.")


class RoomState(_Model):
    """Attested state of the room the request comes from (R-5)."""

    room_version: str = Field(..., description="Room version.")
    encrypted: bool = Field(..., description="m.room.encryption is set.")
    join_rule: str = Field(..., description="Join rule.")
    history_visibility: str = Field(..., description="History visibility.")
    members: list[str] = Field(default_factory=list, description="Joined member MXIDs.")
    invited: list[str] = Field(default_factory=list, description="Invited MXIDs.")
    server_acl: ServerAcl | None = Field(None, description="Server ACL; none means every server is admitted.")


class Audience(_Model):
    """Who will read the output."""

    servers: list[str] = Field(default_factory=list, description="Homeservers participating in the room.")
    classification: str = Field(..., description="Classification of the room.")


class Budget(_Model):
    """Outcome of the atomic budget reservations the gateway made before deciding."""

    rate_ok: bool = Field(True, description="Per-minute sender+agent rate reservation succeeded.")
    hourly_ok: bool = Field(True, description="Hourly per-scope reservation succeeded.")
    prefetch_ok: bool = Field(True, description="Prefetch reservation for the conversation succeeded.")
    embedding_ok: bool = Field(True, description="Embedding item reservation succeeded.")
    hourly_operations_used: int = Field(
        0,
        ge=0,
        le=_BIG,
        description=(
            "Memory operations the scope has used in the current hour, this call's included, as its"
            " reservation counted them (an invocation: with the one operation it needs); 0 when the"
            " reservation was refused or not made."
        ),
    )
    embedding_items_used: int = Field(
        0,
        ge=0,
        le=_BIG,
        description=(
            "Embedding items the target agent has used in the current hour, this call's included, as"
            " its reservation counted them; 0 when the reservation was refused (embedding_ok false)"
            " and on other operations."
        ),
    )


class Entries(_Model):
    """Ledger count for the scope."""

    count: int = Field(
        0,
        ge=0,
        le=_BIG,
        description=(
            "Live entries of the scope: on a save counted only up to the cap + 1 (enough to compare"
            " with the cap), exact on an inspection, 0 on operations that do not count them."
        ),
    )
    cap: int = Field(..., ge=0, le=_BIG, description="Entry cap of the scope.")


#: The limits an ``agent_limits`` entry may make stricter for its agents.
AgentLimitName = Literal["embedding_items_per_agent_hour", "hourly_operations"]
AGENT_LIMIT_NAMES: Final[tuple[AgentLimitName, ...]] = ("embedding_items_per_agent_hour", "hourly_operations")
#: Bounds of limits.yaml's agent_limits, so a pasted export cannot bloat every decision input.
AGENT_LIMITS_MAX: Final = 64
AGENT_LIMITS_MAX_NAMES: Final = 256


class AgentLimit(_Model):
    """One entry of limits.yaml's ``agent_limits``: a stricter limit for some agents."""

    agents: list[str] = Field(
        default_factory=list,
        max_length=AGENT_LIMITS_MAX_NAMES,
        description="Agent references namespace/name the entry applies to.",
    )
    lists: list[str] = Field(
        default_factory=list,
        max_length=AGENT_LIMITS_MAX_NAMES,
        description="Names of data/org.yaml lists whose agents the entry applies to.",
    )
    embedding_items_per_agent_hour: int | None = Field(
        None, ge=1, le=_BIG, description="Embedding items per hour for each agent the entry names."
    )
    hourly_operations: int | None = Field(
        None, ge=1, le=_BIG, description="Memory operations per hour for each scope of an agent the entry names."
    )


#: agent_caps per (limits, limit name, org mapping): all three are immutable for a loaded pack, and
#: a decision asks for its agent's caps several times (the Cedar context, the floor). Each entry
#: holds the very objects its key names by id, so it is used only for them. The memo lives outside
#: the model: a private attribute would take part in pydantic's ``==``, and two equal deployments
#: would compare unequal once one of them had answered a decision (the Cedar engine's entity
#: cache compares deployments by value).
_AGENT_CAPS: dict[tuple[int, str, int], tuple[Limits, Mapping[str, list[str]], Mapping[str, int]]] = {}
_AGENT_CAPS_MAX: Final = 64


class Limits(_Model):
    """policies/data/limits.yaml (R-9 to R-11)."""

    max_days: int = Field(..., ge=1, description="Hard expiry in days, never extended.")
    max_entries: int = Field(..., ge=1, description="Entries per scope.")
    max_fact_bytes: int = Field(..., ge=1, description="UTF-8 bytes per stored fact.")
    max_batch_facts: int = Field(..., ge=1, description="Facts per automatic save.")
    rate_per_minute: int = Field(..., ge=1, description="Explicit load/save per sender+agent per minute.")
    rate_burst: int = Field(..., ge=1, description="Burst of the per-minute rate.")
    hourly_operations: int = Field(..., ge=1, description="Memory operations per scope per hour.")
    prefetch_searches: int = Field(..., ge=0, description="Prefetch searches per new conversation.")
    prefetch_query_bytes: int = Field(..., ge=1, description="UTF-8 bytes per prefetch query.")
    embedding_item_bytes: int = Field(..., ge=1, description="UTF-8 bytes per embedding input.")
    search_max_limit: int = Field(..., ge=1, description="Largest search limit forwarded.")
    embedding_items_per_agent_hour: int = Field(
        ..., ge=1, description="Embedding items per memory-enabled agent per hour (embeddings carry no user)."
    )
    embedding_items_per_source_hour: int = Field(
        ..., ge=1, description="Share of an agent's hourly embedding items one source address may use."
    )
    agent_limits: list[AgentLimit] = Field(
        default_factory=list,
        max_length=AGENT_LIMITS_MAX,
        description=(
            "Stricter limits for named agents or org.yaml lists of agents; an agent gets the smallest"
            " value of every entry naming it, directly or through a list, and the global value otherwise."
        ),
    )

    @model_validator(mode="after")
    def _stricter_only(self) -> Limits:
        # SECURITY: pack data can only make a limit stricter: a looser agent limit is refused, never applied.
        for index, entry in enumerate(self.agent_limits):
            if not (entry.agents or entry.lists):
                raise ValueError(f"agent_limits[{index}] names no agent and no list")
            if all(getattr(entry, name) is None for name in AGENT_LIMIT_NAMES):
                raise ValueError(f"agent_limits[{index}] sets no limit (one of {', '.join(AGENT_LIMIT_NAMES)})")
            for name in AGENT_LIMIT_NAMES:
                value, overall = getattr(entry, name), getattr(self, name)
                if value is not None and value > overall:
                    raise ValueError(
                        f"agent_limits[{index}].{name} {value} is looser than the global {name} {overall};"
                        " an agent limit can only be stricter"
                    )
        return self

    def agent_caps(self, name: AgentLimitName, org: Mapping[str, list[str]]) -> Mapping[str, int]:
        """Each agent an ``agent_limits`` entry gives limit ``name``, directly or through a list, with its value."""
        key = (id(self), name, id(org))
        found = _AGENT_CAPS.get(key)
        if found is not None and found[0] is self and found[1] is org:
            return found[2]
        caps = MappingProxyType(self._agent_caps(name, org))
        if len(_AGENT_CAPS) >= _AGENT_CAPS_MAX:
            _AGENT_CAPS.clear()
        _AGENT_CAPS[key] = (self, org, caps)
        return caps

    def _agent_caps(self, name: AgentLimitName, org: Mapping[str, list[str]]) -> dict[str, int]:
        caps: dict[str, int] = {}
        overall: int = getattr(self, name)
        for entry in self.agent_limits:
            value: int | None = getattr(entry, name)
            if value is None:
                continue
            for ref in set(entry.agents).union(*(org.get(listed, []) for listed in entry.lists)):
                caps[ref] = min(caps.get(ref, overall), value)
        return caps

    def agent_cap(self, name: AgentLimitName, ref: str | None, org: Mapping[str, list[str]]) -> int:
        """Limit ``name`` for agent ``ref``: the smallest entry naming it, else the global value."""
        overall: int = getattr(self, name)
        return overall if ref is None else self.agent_caps(name, org).get(ref, overall)


#: The ADR's values for the global limits, the ceiling limits.yaml may not exceed (ADR 0023, decision
#: 41-42: 7 days, 100 entries, 512 bytes per fact, 8 prefetch queries of 512 bytes, 6 per minute with a
#: burst of 3, 60 operations per scope and hour, 10 facts per automatic save). The embedding and search
#: limits, which the ADR leaves to the implementation, are the README's Limits table. ``memgov policy
#: check`` fails on a value above its ceiling; the gateway itself loads any value (tests run with
#: larger ones), and the floor applies whatever limits.yaml says.
ADR_CEILINGS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "max_days": 7,
        "max_entries": 100,
        "max_fact_bytes": 512,
        "max_batch_facts": 10,
        "rate_per_minute": 6,
        "rate_burst": 3,
        "hourly_operations": 60,
        "prefetch_searches": 8,
        "prefetch_query_bytes": 512,
        "embedding_item_bytes": 512,
        "search_max_limit": 10,
        "embedding_items_per_agent_hour": 600,
        "embedding_items_per_source_hour": 150,
    }
)


class PartnerRecord(_Model):
    """A bilateral federation record; it admits anything only when every field is named."""

    server_name: str = Field(..., description="Homeserver (or bridge network) the record covers.")
    origins: list[Origin] = Field(default_factory=list, description="Origin kinds the record admits.")
    controller: str | None = Field(None, description="Data controller.")
    processor: str | None = Field(None, description="Data processor.")
    purpose: str | None = Field(None, description="Agreed purpose.")
    classification: str | None = Field(None, description="Agreed classification.")
    residency: str | None = Field(None, description="Data residency.")
    retention_days: int | None = Field(None, description="Agreed retention in days.")
    erasure_owner: str | None = Field(None, description="Who executes erasure.")
    principal_binding: str | None = Field(None, description="How principals are bound across the partnership.")


class DeclaredReason(_Model):
    """One entry of data/reasons.yaml: a reason code the pack's own rules may answer with."""

    code: str = Field(..., description="The code, a lower-case identifier that is not built in.")
    after: str = Field(..., description="The code it is reported right after when several apply (priority).")
    description: str = Field(..., min_length=1, max_length=200, description="What a denial with this code means.")
    limits: list[str] = Field(
        default_factory=list,
        description="The limits.yaml keys its rules may read (memgov policy check fails on a rule reading another).",
    )


class Federation(_Model):
    """policies/data/federation.yaml (R-13)."""

    classification: str = Field(..., description="Classification a local control room must carry.")
    partners: list[PartnerRecord] = Field(default_factory=list, description="Reviewed bilateral records.")


class Deployment(_Model):
    """Deployment facts: settings plus the pack's data files."""

    server_name: str = Field(..., description="Local homeserver name.")
    bridge_bot: str | None = Field(None, description="MXID of the bridge bot.")
    agent_ghost: str | None = Field(None, description="MXID of the target agent's ghost.")
    classification: str = Field(..., description="Classification a local control room must carry.")
    federation_partners: list[PartnerRecord] = Field(default_factory=list, description="federation.yaml partners.")
    limits: Limits = Field(..., description="limits.yaml content.")
    org: dict[str, list[str]] = Field(
        default_factory=dict,
        description="data/org.yaml: named lists of identifiers an organisation's rules read "
        "(e.g. agents denied memory).",
    )


class DecisionInput(_Model):
    """Everything an engine may look at for one decision."""

    operation: Operation = Field(..., description="Operation class.")
    principal: Principal | None = Field(None, description="Acting principal; null when unknown.")
    agent: Agent | None = Field(None, description="Target agent; null when unknown.")
    scope: ScopeRecord | None = Field(None, description="Scope record; null when there is none.")
    request: RequestFacts = Field(default_factory=RequestFacts, description="Request facts.")
    room: RoomState | None = Field(None, description="Attested room state; null when not attested.")
    audience: Audience | None = Field(None, description="Output audience; null when not attested.")
    budget: Budget = Field(default_factory=Budget, description="Budget reservations.")
    entries: Entries = Field(..., description="Ledger count and cap.")
    now: int = Field(..., ge=0, le=_BIG, description="Current time, epoch seconds.")
    deployment: Deployment = Field(..., description="Deployment facts.")


class Obligations(_Model):
    """Ceilings the gateway applies when it forwards."""

    ttl_days: int | None = Field(None, description="ttl_days to send on a save.")
    max_limit: int | None = Field(None, description="Largest search limit to forward.")


class Decision(_Model):
    """The answer: what to do, why, and under which obligations."""

    action: Action = Field(..., description="forward, rewrite_disabled, empty_result or deny.")
    reasons: list[ReasonCode] = Field(..., description="Sorted unique reason codes; ['allowed'] when forwarded.")
    obligations: Obligations = Field(default_factory=Obligations, description="Obligations when forwarded.")
    decision_id: str = Field("", description="Opaque id tying the response, log line and audit row.")
    engine: str = Field("", description="Engine that decided.")
    revision: str = Field("", description="Content hash of the policy pack.")

    @property
    def allowed(self) -> bool:
        """True when the request is forwarded as asked."""
        return self.action is Action.FORWARD
