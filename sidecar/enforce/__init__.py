"""Governed handlers for the data plane, in pipeline order per traffic class (see docs/enforcement.md)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Middleware

from sidecar.enforce.embedding import handle_embedding
from sidecar.enforce.invoke import handle_invoke, rewrite_disabled
from sidecar.enforce.memory import handle_list_or_delete, handle_save, handle_save_batch, handle_search
from sidecar.enforce.context import spend_contexts
from sidecar.enforce.respond import CREDENTIALED, error, json_answer, refuse
from sidecar.policy.model import Action, Operation
from sidecar.proxy import ClassHandler
from sidecar.reasons import Reason
from sidecar.routes import RouteClass, RouteMatch
from sidecar.state.types import StateError
from sidecar.upstream import BodyRefused, UpstreamUnavailable


def _fail_closed(operation: Operation, handler: ClassHandler) -> ClassHandler:
    """Turn failures into governed answers that carry a decision.

    The state store failing degrades the way a denial would (chat without memory, ``[]``, or
    503); an unreachable upstream and a refused body answer their status with the decision header.
    """

    async def guarded(request: web.Request, match: RouteMatch) -> web.StreamResponse:
        try:
            return await handler(request, match)
        except StateError:
            # SECURITY: no control state, no memory. The audit write would fail too, so only log and count.
            decision = await refuse(request, operation, Reason.STATE_UNAVAILABLE, audit=False)
            if operation is Operation.A2A_INVOKE:
                return await rewrite_disabled(request, match, decision)
            if operation is Operation.MEMORY_SEARCH:
                return json_answer(200, [], decision)
            return error(request, 503, decision)
        except UpstreamUnavailable as exc:
            # Whatever was decided, the upstream did not answer: the header says deny, not a rewrite.
            decision = await refuse(request, operation, Reason.UPSTREAM_UNAVAILABLE, action=Action.DENY,
                                    credentialed=request.get(CREDENTIALED, False))
            return error(request, 504 if exc.timeout else 502, decision)
        except BodyRefused as exc:
            return error(request, exc.status, await refuse(request, operation, exc.reason))

    return guarded


def governed_handlers() -> dict[RouteClass, ClassHandler]:
    """The class table entries that replace the transparent defaults once governance is on."""
    table: dict[RouteClass, tuple[Operation, ClassHandler]] = {
        RouteClass.A2A_INVOKE: (Operation.A2A_INVOKE, handle_invoke),
        RouteClass.MEMORY_SAVE: (Operation.MEMORY_SAVE, handle_save),
        RouteClass.MEMORY_SAVE_BATCH: (Operation.MEMORY_SAVE_BATCH, handle_save_batch),
        RouteClass.MEMORY_SEARCH: (Operation.MEMORY_SEARCH, handle_search),
        RouteClass.MEMORY_LIST: (Operation.MEMORY_LIST, handle_list_or_delete),
        RouteClass.MEMORY_DELETE_ALL: (Operation.MEMORY_DELETE_ALL, handle_list_or_delete),
        RouteClass.EMBEDDING: (Operation.EMBEDDING, handle_embedding),
    }
    return {cls: _fail_closed(op, handler) for cls, (op, handler) in table.items()}


def governed_middlewares() -> tuple[Middleware, ...]:
    """Data-plane middlewares governance adds: every delegation context is spent where it is seen."""
    return (spend_contexts,)
