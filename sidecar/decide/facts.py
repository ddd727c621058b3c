"""Pure helpers that turn a request into decision facts (no I/O; tested without servers)."""

from __future__ import annotations

from sidecar.identity import IdentityError
from sidecar.identity.appname import AgentNames
from sidecar.identity.keys import SessionKeys
from sidecar.identity.mxid import Origin, parse_mxid
from sidecar.identity.tokens import AudienceClaim, RoomClaim
from sidecar.policy.model import Agent, Audience, Principal, RoomState, ScopeRecord, ServerAcl
from sidecar.state.types import Namespace, Scope


def utf8_len(value: object) -> int:
    """UTF-8 byte length of a string; non-strings count as 0 (the shape check refuses them)."""
    return len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else 0


def principal_of(mxid: str, origin: str) -> Principal | None:
    """The decision-input principal for an MXID and origin; None when either is malformed."""
    try:
        parsed, kind = parse_mxid(mxid), Origin(origin)
    except (IdentityError, ValueError):
        return None
    return Principal(mxid=mxid, localpart=parsed.localpart, server_name=parsed.server_name, origin=kind)


def agent_of(ref: str, app_name: str, memory_enabled: bool) -> Agent:
    return Agent(ref=ref, app_name=app_name, memory_enabled=memory_enabled)


def scope_of(scope: Scope) -> ScopeRecord:
    """Convert a state-store scope into the decision-input record (a control room: the one kind there is)."""
    if scope.kind != "control_room":
        raise ValueError("scope kind")  # the control API creates no other kind; the model refuses any other too
    return ScopeRecord(
        scope_id=scope.scope_id,
        kind="control_room",
        room_id=scope.room_id,
        enabled=scope.enabled,
        generation=scope.generation,
        purpose=scope.purpose,
        policy_version=scope.policy_version,
        principal_mxid=scope.principal_mxid,
        origin=Origin(scope.origin),
        agent=scope.agent,
    )


def room_of(claim: RoomClaim) -> RoomState:
    acl = claim.server_acl
    return RoomState(
        room_version=claim.room_version,
        encrypted=claim.encrypted,
        join_rule=claim.join_rule,
        history_visibility=claim.history_visibility,
        members=list(claim.members),
        invited=list(claim.invited),
        server_acl=ServerAcl(allow=list(acl.allow), deny=list(acl.deny), allow_ip_literals=acl.allow_ip_literals),
    )


def audience_of(claim: AudienceClaim) -> Audience:
    return Audience(servers=list(claim.servers), classification=claim.classification)


class KeyFacts:
    """What a runtime's memory call proves about itself: key, carriers and agent name."""

    __slots__ = ("agent_name", "generation", "header_agent", "key_valid", "scope_id", "user_id_matches")

    def __init__(
        self, keys: SessionKeys, user_id: object, header_user: str | None, agent_name: object, header_agent: str | None
    ) -> None:
        self.scope_id: str | None = None
        self.generation: int | None = None
        self.key_valid = False
        if isinstance(user_id, str):
            try:
                self.scope_id, self.generation = keys.verify(user_id)
                self.key_valid = True
            except IdentityError:
                pass
        # SECURITY: every carrier of the user must hold the same key; a runtime that sends one
        # identity in the header and another in the body is not trusted with either.
        self.user_id_matches = isinstance(user_id, str) and (header_user is None or header_user == user_id)
        self.agent_name = agent_name if isinstance(agent_name, str) else None
        self.header_agent = header_agent

    def agent_matches(self, scope_agent: str, names: AgentNames) -> bool:
        """Body and header agent names both name the scope's agent (collisions refused)."""
        if self.agent_name is None or not names.matches(self.agent_name, scope_agent):
            return False
        return self.header_agent is None or names.matches(self.header_agent, scope_agent)


def current_namespace(before: Scope, now: Scope | None) -> Namespace | None:
    """The namespace a scope serves now, while it is still the consent ``before`` was read under
    (enabled, same generation); None once consent changed."""
    if now is None or not now.enabled or now.generation != before.generation:
        return None
    return now.namespace
