"""Deciding: the policy runtime (engine, then floor) asked about typed facts, and the answer recorded once.

Both planes decide through one :class:`Decider`: the data plane's pipeline runner and the control
API's inspect. It never sees an HTTP request; the caller passes the decision id its answer and
log lines carry. Whatever it returns is recorded already (log, metric, trace, audit row or count),
exactly once, so no route can forget its audit row or write two.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar import tracing
from sidecar.clock import Clock
from sidecar.decide.record import AuditRecorder
from sidecar.identity.appname import Agents
from sidecar.policy.model import (
    Agent,
    Audience,
    Budget,
    Decision,
    DecisionInput,
    Entries,
    Operation,
    Principal,
    RequestFacts,
    RoomState,
    ScopeRecord,
)
from sidecar.policy.outcome import deny_action
from sidecar.policy.runtime import PolicyRuntime
from sidecar.reasons import Action, Code, Reason


@dataclass(frozen=True, slots=True)
class Facts:
    """What one decision is asked about besides the operation: each field is the decision input's
    field of that name (``None``: unknown, or the model's default); ``agent_ref`` picks the
    deployment facts (the target agent's ghost)."""

    agent_ref: str | None = None
    principal: Principal | None = None
    agent: Agent | None = None
    scope: ScopeRecord | None = None
    request: RequestFacts | None = None
    room: RoomState | None = None
    audience: Audience | None = None
    budget: Budget | None = None
    entries: Entries | None = None


def code_decision(operation: Operation, reason: Code, decision_id: str) -> Decision:
    """A refusal made in code (malformed request, cap or fence hit, a dependency down).

    Its action is the operation's usual way of refusing, except when the upstream did not answer:
    then nothing was rewritten or emptied, and the header says ``deny``.
    """
    action = Action.DENY if reason is Reason.UPSTREAM_UNAVAILABLE else deny_action(operation)
    return Decision(action=action, reasons=[reason], decision_id=decision_id, engine="code")


class Decider:
    """Asks the policy runtime about a governed request and records its answer, once."""

    __slots__ = ("_agents", "_bot", "_clock", "_policy", "_recorder", "_server")

    def __init__(
        self,
        policy: PolicyRuntime,
        recorder: AuditRecorder,
        agents: Agents,
        clock: Clock,
        *,
        server_name: str,
        bridge_bot: str | None,
    ) -> None:
        self._policy, self._recorder, self._agents, self._clock = policy, recorder, agents, clock
        self._server, self._bot = server_name, bridge_bot

    @property
    def revision(self) -> str | None:
        """The live pack's revision (consent and erasure audit rows name it)."""
        return self._policy.revision

    async def decide(
        self, operation: Operation, facts: Facts, *, decision_id: str, scope_id: str | None, credentialed: bool = False
    ) -> Decision:
        """Engine and floor on ``facts``; the decision returned is recorded."""
        decision = await self._run_policy(operation, facts, decision_id)
        await self._recorder.decision(operation, decision, scope_id=scope_id, credentialed=credentialed)
        return decision

    async def refuse(
        self,
        operation: Operation,
        reason: Code,
        *,
        decision_id: str,
        scope_id: str | None = None,
        credentialed: bool = False,
    ) -> Decision:
        """Record a refusal made in code; the decision returned is recorded."""
        decision = code_decision(operation, reason, decision_id)
        await self._recorder.decision(operation, decision, scope_id=scope_id, credentialed=credentialed)
        return decision

    @tracing.traced("memgov.decide", lambda self, operation, facts, decision_id: {"operation": operation.value})
    async def _run_policy(self, operation: Operation, facts: Facts, decision_id: str) -> Decision:
        policy = self._policy
        if policy.pack is None:
            # SECURITY: no validated pack, no memory: fail closed (recorded once, by the caller).
            return code_decision(operation, Reason.POLICY_UNAVAILABLE, decision_id)
        inp = DecisionInput(
            operation=operation,
            principal=facts.principal,
            agent=facts.agent,
            scope=facts.scope,
            request=facts.request or RequestFacts(),
            room=facts.room,
            audience=facts.audience,
            budget=facts.budget or Budget(),
            entries=facts.entries or Entries(count=0, cap=policy.limits().max_entries),
            now=int(self._clock().timestamp()),
            deployment=policy.deployment(self._server, self._bot, self._agents.ghost(facts.agent_ref)),
        )
        return await policy.decide(inp, decision_id)
