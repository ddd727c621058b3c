"""The one runner every governed data-plane route goes through (see docs/architecture.md).

A route is declared as a :class:`RouteSpec`: how its request is parsed, how it is admitted (the
key or context checked, its scope read and its budgets reserved, in one state transaction) into
the decision's typed :class:`Facts`, and how an allowed call is forwarded and finished. The runner
executes the stages in that order, always pairs the decision with its record, undoes what admission
reserved when the policy refuses, and turns every refusal and state failure into a governed answer
carrying a decision header::

    parse → admit → decide + record → forward → finish
            (refused: release) ──────────┴────→ answer the refusal (degrade or error)

A route's stages are built with exactly the parts they use (``root.py`` hands them over); the
runner holds the decider, so a stage never sees more than its own bundle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final, Generic, TypeVar

from aiohttp import web

from sidecar.decide.decider import Decider, Facts
from sidecar.decide.respond import Denied, error, json_answer, stamp
from sidecar.policy.model import Decision, Operation
from sidecar.policy.outcome import deny_action
from sidecar.reasons import Action, Reason, Refusal
from sidecar.relay import CONTROLLER, DECISION_ID, ClassHandler, forward, refusal_answer
from sidecar.routes import RouteMatch
from sidecar.state.types import StateError

P = TypeVar("P")
T = TypeVar("T")
B = TypeVar("B")

#: The request or the upstream failed, or the request may not be answered by any agent (a share
#: token on a memory agent's route): there is nothing to degrade to, the answer is the error.
_FAILED_EXCHANGE: Final = frozenset(
    {
        Reason.BODY_TOO_LARGE,
        Reason.BODY_TIMEOUT,
        Reason.UPSTREAM_ERROR,
        Reason.UPSTREAM_UNAVAILABLE,
        Reason.SHARE_REFUSED,
    }
)


@dataclass(slots=True)
class Call:
    """One governed request as every stage sees it; ``credentialed`` is set once it proved a genuine
    credential (a session key or a context that verified), so a later refusal is audited as such, with
    the scope the credential named (``scope_id``), even when the state store cannot be asked (R-15)."""

    request: web.Request
    match: RouteMatch
    operation: Operation
    credentialed: bool = False
    scope_id: str | None = None

    @property
    def decision_id(self) -> str:
        return self.request[DECISION_ID]


class Stages(Generic[B]):
    """A governed route's stages, built with the one bundle of parts they use (``root.py`` fills it)."""

    __slots__ = ("_p",)

    def __init__(self, parts: B) -> None:
        self._p = parts


@dataclass(frozen=True, slots=True)
class Admitted(Generic[T]):
    """What admission established: the decision's facts, whom the call concerns, and what the
    forward stage needs (``held``); ``release`` undoes admission's reservations when the policy refuses."""

    facts: Facts
    held: T
    scope_id: str | None = None
    credentialed: bool = False
    release: Callable[[], Awaitable[None]] | None = None


@dataclass(frozen=True, slots=True)
class RouteSpec(Generic[P, T]):
    """A governed route, declared: its operation and its three stages.

    - ``parse``: the body read once and strictly; a malformed request raises ``Refusal(bad_request)``.
    - ``admit``: identity, scope and budgets into typed facts; raises a refusal made in code.
    - ``forward``: runs only for an allowed decision; sends what was checked and builds the answer.
    - ``governs``: when given and False, the request is none of governance's business (an
      invocation of an agent without memory) and is relayed as it came, with no decision.
    - ``degrade``: how a refused call is answered when the operation's refusal is to rewrite (an
      invocation goes to the agent's memory-disabled variant).
    """

    operation: Operation
    parse: Callable[[Call], Awaitable[P]]
    admit: Callable[[Call, P], Awaitable[Admitted[T]]]
    forward: Callable[[Call, T, Decision], Awaitable[web.StreamResponse]]
    governs: Callable[[Call], bool] | None = None
    degrade: Callable[[Call, Decision], Awaitable[web.StreamResponse]] | None = None

    def __post_init__(self) -> None:
        if (deny_action(self.operation) is Action.REWRITE_DISABLED) != (self.degrade is not None):
            raise TypeError(f"{self.operation.value}: a degrade stage is given exactly when refusals rewrite")


async def _stages(spec: RouteSpec[P, T], call: Call, decider: Decider) -> web.StreamResponse:
    if spec.governs is not None and not spec.governs(call):
        return await forward(call.request, call.request.app[CONTROLLER])
    parsed = await spec.parse(call)
    admitted = await spec.admit(call, parsed)
    call.credentialed = call.credentialed or admitted.credentialed
    decision = await decider.decide(
        call.operation,
        admitted.facts,
        decision_id=call.decision_id,
        scope_id=admitted.scope_id,
        credentialed=admitted.credentialed,
    )
    if not decision.allowed:
        if admitted.release is not None:
            await admitted.release()
        raise Denied(decision)
    return await spec.forward(call, admitted.held, decision)


def run(spec: RouteSpec[P, T], decider: Decider) -> ClassHandler:
    """The class handler of one spec: its stages in order, every refusal answered the governed way."""

    async def handler(request: web.Request, match: RouteMatch) -> web.StreamResponse:
        call = Call(request, match, spec.operation)
        try:
            return await _stages(spec, call, decider)
        except StateError:
            # SECURITY: no control state, no memory: degrade the way a denial would, or answer 503.
            refusal = Refusal(Reason.STATE_UNAVAILABLE)
        except Refusal as raised:
            refusal = raised
        return await answer(call, refusal, spec.degrade, decider)

    return handler


def closed(operation: Operation, reason: Reason, decider: Decider) -> ClassHandler:
    """A route the data plane never serves (whole-namespace list and delete are control-plane work)."""

    async def handler(request: web.Request, match: RouteMatch) -> web.StreamResponse:
        return await answer(Call(request, match, operation), Refusal(reason), None, decider)

    return handler


async def answer(
    call: Call,
    refusal: Refusal,
    degrade: Callable[[Call, Decision], Awaitable[web.StreamResponse]] | None,
    decider: Decider,
) -> web.StreamResponse:
    """The one way a governed request is refused: record the refusal, then degrade or answer the error.

    A policy decision (:class:`Denied`) is already recorded; a refusal made in code is recorded here
    (log, metric, audit row or refusal count). Invocations then go to the memory-disabled agent and
    searches answer ``200 []`` (SPEC D6) unless the request or the upstream itself failed; every
    other refusal answers its status. The decision header is on every answer.
    """
    request, operation = call.request, call.operation
    if isinstance(refusal, Denied):
        decision = refusal.decision
    else:
        decision = await decider.refuse(
            operation,
            refusal.reason,
            decision_id=call.decision_id,
            scope_id=refusal.scope_id or call.scope_id,
            credentialed=refusal.credentialed or call.credentialed,
        )
    action = deny_action(operation)
    if action is Action.DENY or refusal.reason in _FAILED_EXCHANGE:
        return error(request, refusal, decision)
    if action is Action.REWRITE_DISABLED and degrade is not None:
        try:
            return await degrade(call, decision)
        except Refusal as failed:
            # The decision stands (the memory-free variant); the exchange with it then failed.
            resp = refusal_answer(request, failed)
            stamp(resp, decision)
            return resp
    return json_answer(HTTPStatus.OK, [], decision)
