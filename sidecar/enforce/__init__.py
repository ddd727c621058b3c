"""Governed handlers for the data plane, in pipeline order per traffic class (see docs/enforcement.md)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Middleware

from sidecar.decide.context import spend_contexts
from sidecar.decide.respond import CREDENTIALED, Denied, error, json_answer, refuse, stamp
from sidecar.enforce.embedding import handle_embedding
from sidecar.enforce.invoke import handle_invoke, rewrite_disabled
from sidecar.enforce.memory import handle_list_or_delete, handle_save, handle_search
from sidecar.policy.model import Operation
from sidecar.policy.outcome import deny_action
from sidecar.reasons import Action, Reason, Refusal
from sidecar.relay import ClassHandler, refusal_answer
from sidecar.routes import RouteClass, RouteMatch
from sidecar.state.types import StateError

#: The request or the upstream failed: there is nothing to degrade to, the answer is the error.
_FAILED_EXCHANGE: Final = frozenset(
    {Reason.BODY_TOO_LARGE, Reason.BODY_TIMEOUT, Reason.UPSTREAM_ERROR, Reason.UPSTREAM_UNAVAILABLE}
)


async def answer(request: web.Request, match: RouteMatch, operation: Operation, refusal: Refusal) -> web.StreamResponse:
    """The one way a governed request is refused: record the refusal, then degrade or answer the error.

    A policy decision (:class:`Denied`) is already recorded; a refusal made in code is recorded here
    (log, metric, audit row or refusal count). Invocations then go to the memory-disabled agent and
    searches answer ``200 []`` (SPEC D6) unless the request or the upstream itself failed; every
    other refusal answers its status. The decision header is on every answer.
    """
    if isinstance(refusal, Denied):
        decision = refusal.decision
    else:
        decision = await refuse(
            request,
            operation,
            refusal.reason,
            scope_id=refusal.scope_id,
            credentialed=refusal.credentialed or request.get(CREDENTIALED, False),
        )
    degrade = deny_action(operation)
    if degrade is Action.DENY or refusal.reason in _FAILED_EXCHANGE:
        return error(request, refusal, decision)
    if degrade is Action.REWRITE_DISABLED:
        try:
            return await rewrite_disabled(request, match, decision)
        except Refusal as failed:
            # The decision stands (the memory-free variant); the exchange with it then failed.
            resp = refusal_answer(request, failed)
            stamp(resp, decision)
            return resp
    return json_answer(HTTPStatus.OK, [], decision)


def _fail_closed(operation: Operation, handler: ClassHandler) -> ClassHandler:
    """Every refusal and failure of a governed handler becomes a governed answer that carries a decision."""

    async def guarded(request: web.Request, match: RouteMatch) -> web.StreamResponse:
        try:
            return await handler(request, match)
        except StateError:
            # SECURITY: no control state, no memory: degrade the way a denial would, or answer 503.
            refusal = Refusal(Reason.STATE_UNAVAILABLE)
        except Refusal as raised:
            refusal = raised
        return await answer(request, match, operation, refusal)

    return guarded


def governed_handlers() -> dict[RouteClass, ClassHandler]:
    """The class table entries that replace the transparent defaults once governance is on."""
    table: dict[RouteClass, tuple[Operation, ClassHandler]] = {
        RouteClass.A2A_INVOKE: (Operation.A2A_INVOKE, handle_invoke),
        RouteClass.MEMORY_SAVE: (Operation.MEMORY_SAVE, handle_save),
        RouteClass.MEMORY_SAVE_BATCH: (Operation.MEMORY_SAVE_BATCH, handle_save),
        RouteClass.MEMORY_SEARCH: (Operation.MEMORY_SEARCH, handle_search),
        RouteClass.MEMORY_LIST: (Operation.MEMORY_LIST, handle_list_or_delete),
        RouteClass.MEMORY_DELETE_ALL: (Operation.MEMORY_DELETE_ALL, handle_list_or_delete),
        RouteClass.EMBEDDING: (Operation.EMBEDDING, handle_embedding),
    }
    return {cls: _fail_closed(op, handler) for cls, (op, handler) in table.items()}


def governed_middlewares() -> tuple[Middleware, ...]:
    """Data-plane middlewares governance adds: every delegation context is spent where it is seen."""
    return (spend_contexts,)
