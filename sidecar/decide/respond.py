"""Deciding and answering: run the policy, record the decision (log, metric, audit), stamp the answer.

A handler asks with :func:`decide_and_record` and a typed :class:`Facts`; the decision it gets back
is always recorded already, so no route can forget its audit row. A refusal made in code
(malformed request, cap or fence hit, state store down) is recorded by :func:`refuse`; a refusal
the policy made is raised as :class:`Denied`, carrying its recorded decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

from aiohttp import web

from sidecar import metrics, tracing
from sidecar.decide.ports import decision_log
from sidecar.governance import GOVERNANCE, Governance
from sidecar.logs import get_logger
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
from sidecar.reasons import Action, Code, Reason, Refusal, primary
from sidecar.relay import DECISION_ID, json_error
from sidecar.wire import dumps

log = get_logger("enforce")
DECISION_HEADER = "X-Memgov-Decision"
DECISION: web.RequestKey[Decision] = web.RequestKey("decision", Decision)
#: Set once a request proved a genuine credential (a session key or a context that verified).
CREDENTIALED: web.RequestKey[bool] = web.RequestKey("credentialed", bool)


class Denied(Refusal):
    """The policy (engine and floor) refused: the decision is already recorded; 403 (SPEC D6) whatever the code."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(primary(decision.reasons), status=HTTPStatus.FORBIDDEN, recorded=True)
        self.decision = decision


def gov_of(request: web.Request) -> Governance:
    return request.app[GOVERNANCE]


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


async def decide_and_record(
    request: web.Request, operation: Operation, facts: Facts, *, scope_id: str | None, credentialed: bool = False
) -> Decision:
    """Ask the policy runtime (engine + floor) about ``facts`` and record its answer; the decision
    returned is always recorded (log, metric, audit row or count)."""
    decision = await _run_policy(request, operation, facts)
    await record(request, operation, decision, scope_id=scope_id, credentialed=credentialed)
    return decision


@tracing.traced("memgov.decide", lambda request, operation, facts: {"operation": operation.value})
async def _run_policy(request: web.Request, operation: Operation, facts: Facts) -> Decision:
    """Build the decision input from ``facts`` and the deployment, and run the policy runtime (engine, then floor)."""
    gov = gov_of(request)
    if gov.policy.pack is None:
        return await refuse(request, operation, Reason.POLICY_UNAVAILABLE)
    inp = DecisionInput(
        operation=operation,
        principal=facts.principal,
        agent=facts.agent,
        scope=facts.scope,
        request=facts.request or RequestFacts(),
        room=facts.room,
        audience=facts.audience,
        budget=facts.budget or Budget(),
        entries=facts.entries or Entries(count=0, cap=gov.limits.max_entries),
        now=int(gov.now().timestamp()),
        deployment=gov.deployment(facts.agent_ref),
    )
    decision = await gov.policy.decide(inp, request[DECISION_ID])
    request[DECISION] = decision
    return decision


async def refuse(
    request: web.Request,
    operation: Operation,
    reason: Code,
    *,
    scope_id: str | None = None,
    credentialed: bool = False,
) -> Decision:
    """Record a refusal made in code (malformed request, cap or fence hit, state store down).

    Its action is the operation's usual way of refusing, except when the upstream did not answer:
    then nothing was rewritten or emptied, and the header says ``deny``.
    """
    action = Action.DENY if reason is Reason.UPSTREAM_UNAVAILABLE else deny_action(operation)
    decision = Decision(action=action, reasons=[reason], decision_id=request[DECISION_ID], engine="code")
    request[DECISION] = decision
    await record(request, operation, decision, scope_id=scope_id, credentialed=credentialed)
    return decision


def primary_reason(decision: Decision) -> Code:
    return primary(decision.reasons)


def header_value(decision: Decision) -> str:
    return f"{decision.action.value}; reason={primary_reason(decision).value}; id={decision.decision_id}"


async def record(
    request: web.Request, operation: Operation, decision: Decision, *, scope_id: str | None, credentialed: bool = False
) -> None:
    """Count, log and audit one governed decision, content-free.

    Every refusal or rewrite is audited (R-15). One that carried a genuine credential (a session
    key that verified, or a valid delegation context) gets its own audit row; one that did not
    is only counted per hour, operation and reason, so an anonymous caller cannot grow the store.
    While the state store is down the row or count waits in the store's audit spool and is written
    when it answers again.
    """
    gov = gov_of(request)
    reason = primary_reason(decision)
    if credentialed:
        request[CREDENTIALED] = True
    tracing.annotate(
        operation=operation.value,
        action=decision.action.value,
        reason=reason.value,
        reasons=[r.value for r in decision.reasons],
        decision_id=decision.decision_id,
        engine=decision.engine or "code",
        revision=decision.revision or None,
        scope_id=scope_id,
    )
    metrics.GOVERNED_DECISIONS.labels(operation.value, decision.action.value, reason.value).inc()
    log.info(
        "decision",
        operation=operation.value,
        action=decision.action.value,
        reasons=[r.value for r in decision.reasons],
        decision_id=decision.decision_id,
        engine=decision.engine or "code",
        revision=decision.revision or None,
        scope_id=scope_id,
    )
    if decision.action is Action.FORWARD:
        return
    try:
        if credentialed:
            await decision_log(gov).audit_log.audit(
                "decision",
                reason.value,
                decision_id=decision.decision_id,
                scope_id=scope_id,
                operation=operation.value,
                policy_revision=decision.revision or None,
                now=gov.now(),
            )
            metrics.AUDIT_WRITES.labels("decision").inc()
        else:
            await decision_log(gov).audit_log.count_refusal(operation.value, reason.value, gov.now())
            metrics.AUDIT_WRITES.labels("refusal_count").inc()
    except Exception:  # noqa: BLE001 - the refusal stands even if its audit row cannot be written
        log.error("audit.failed", operation=operation.value, decision_id=decision.decision_id)


def decision_headers(decision: Decision) -> dict[str, str]:
    """Response headers every governed answer carries."""
    return {DECISION_HEADER: header_value(decision)}


def stamp(resp: web.StreamResponse, decision: Decision) -> web.StreamResponse:
    resp.headers[DECISION_HEADER] = header_value(decision)
    return resp


def error(request: web.Request, refusal: Refusal, decision: Decision) -> web.Response:
    """A refusal's content-free error answer, carrying the decision header."""
    resp = json_error(
        request,
        refusal.status,
        primary_reason(decision),
        upstream_status=refusal.upstream_status,
        headers=refusal.headers,
    )
    stamp(resp, decision)
    return resp


def json_answer(status: int, payload: object, decision: Decision) -> web.Response:
    resp = web.Response(status=status, body=dumps(payload), content_type="application/json")
    stamp(resp, decision)
    return resp
