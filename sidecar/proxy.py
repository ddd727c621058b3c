"""The data-plane application: classify every request, then dispatch it by traffic class.

Middleware order (outermost first): governance middlewares (context spending) → ``observe_data``
(classification, decision id, metrics, one sanitized log line, content-free 500 on any
unexpected error) → ``admit`` (per-client concurrency) → dispatch via the class table. Governed classes get
their handlers from ``sidecar.enforce`` (passed in by ``server``); both build on ``sidecar.relay``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Final

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sidecar import metrics, tracing
from sidecar.logs import get_logger
from sidecar.reasons import Reason, Refusal, new_decision_id
from sidecar.relay import (
    CONTROLLER,
    DECISION_ID,
    EMBEDDING,
    MATCH,
    MEMORY,
    NO_EMBEDDING_UPSTREAM,
    SETTINGS,
    ClassHandler,
    forward,
    refusal_answer,
)
from sidecar.routes import CONTENT_CLASSES, Operation, RouteClass, RouteMatch, Traffic, classify
from sidecar.settings import Settings
from sidecar.state.lanes import data_lane
from sidecar.upstream import Upstreams, open_upstreams
from sidecar.wsproxy import is_websocket, relay_websocket

HANDLERS: Final = web.AppKey("handlers", dict[RouteClass, ClassHandler])
INFLIGHT: Final = web.AppKey("inflight", dict[tuple[str, str], int])

log = get_logger("proxy")


async def passthrough(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    """Relay to the controller as it came (a WebSocket upgrade included), minus the headers no route forwards."""
    if is_websocket(request):
        return await relay_websocket(request, request.app[CONTROLLER])
    return await forward(request, request.app[CONTROLLER])


async def _content(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    return await forward(request, request.app[MEMORY], replace_errors=True)


async def _embedding(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    if EMBEDDING not in request.app:
        raise Refusal(Reason.ROUTE_DENIED, status=NO_EMBEDDING_UPSTREAM)
    return await forward(request, request.app[EMBEDDING], path="/embeddings", replace_errors=True)


async def _route_denied(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    raise Refusal(Reason.ROUTE_DENIED)


async def _bad_target(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    raise Refusal(Reason.BAD_REQUEST)


async def _ungoverned(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    raise Refusal(Reason.UNGOVERNED_STORE)


def default_handlers() -> dict[RouteClass, ClassHandler]:
    """The class table before governance: transparent relay, content-safe relay, refusals."""
    table: dict[RouteClass, ClassHandler] = {c: _content for c in CONTENT_CLASSES}
    table.update(
        {
            Traffic.PASSTHROUGH: passthrough,
            Operation.A2A_INVOKE: passthrough,
            Traffic.A2A_CARD: passthrough,
            Operation.EMBEDDING: _embedding,
            Traffic.MEMORY_OTHER: _route_denied,
            Traffic.A2A_NONCANONICAL: _route_denied,
            Traffic.CONTROLLER_NONCANONICAL: _route_denied,
            Operation.CONTROLLER_WRITE: passthrough,
            Operation.SESSION_SHARE: passthrough,
            Operation.MEMORY_UNGOVERNED: _ungoverned,
            Traffic.INVALID: _bad_target,
        }
    )
    return table


@web.middleware
async def observe_data(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Classify, time, count and log every request; turn failures into content-free errors."""
    started = time.perf_counter()
    with tracing.span("memgov.classify"):
        match = classify(request.method, request.raw_path)
    tracing.annotate(route_class=match.cls.value, route=match.template)  # on the request's SERVER span
    request[MATCH] = match
    request[DECISION_ID] = new_decision_id()
    resp: web.StreamResponse
    try:
        if match.cls is Traffic.INVALID:
            # SECURITY: a target that is not origin-form never reaches a route (not even the router's 404).
            raise Refusal(Reason.BAD_REQUEST)
        with data_lane():  # agents' calls never take the state connections withdrawals and the sweeper need
            resp = await handler(request)
    except Refusal as refusal:
        resp = refusal_answer(request, refusal)
    except web.HTTPException:
        raise
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        raise
    except Exception as exc:  # noqa: BLE001 - SECURITY: never let an exception text reach the client
        log.error(
            "request.failed",
            route_class=match.cls.value,
            route=match.template,
            error_type=type(exc).__name__,
            decision_id=request[DECISION_ID],
        )
        resp = refusal_answer(request, Refusal(Reason.INTERNAL_ERROR))
    elapsed = time.perf_counter() - started
    counted, timed = metrics.request_children(match.cls.value, resp.status)
    counted.inc()
    timed.observe(elapsed)
    # Successful pass-through traffic is counted by the metrics above; a log line per such request
    # would cost more than the relay itself, so it is kept for debug level.
    emit = log.debug if match.cls is Traffic.PASSTHROUGH and resp.status < 400 else log.info
    emit(
        "request.done",
        method=request.method if request.method in _METHODS else "OTHER",
        route_class=match.cls.value,
        route=match.template,
        status=resp.status,
        duration_ms=round(elapsed * 1000, 3),
        decision_id=request[DECISION_ID],
    )
    return resp


_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


#: Traffic groups for per-client concurrency: a client saturating one cannot starve another.
_GROUP: Final = {cls: "memory" for cls in CONTENT_CLASSES} | {
    Operation.EMBEDDING: "embedding",
    Operation.A2A_INVOKE: "a2a",
    Traffic.A2A_CARD: "a2a",
}


@web.middleware
async def admit(request: web.Request, handler: Handler) -> web.StreamResponse:
    """At most ``listen.max_concurrent_per_client`` requests in flight per client address and group."""
    key = (request.remote or "", _GROUP.get(request[MATCH].cls, "passthrough"))
    inflight = request.app[INFLIGHT]
    if inflight.get(key, 0) >= request.app[SETTINGS].listen.max_concurrent_per_client:
        # SECURITY: one client holding many slow streams must not take every slot from the others.
        raise Refusal(Reason.CONCURRENCY_LIMITED)
    inflight[key] = inflight.get(key, 0) + 1
    try:
        return await handler(request)
    finally:
        left = inflight[key] - 1
        if left:
            inflight[key] = left
        else:
            del inflight[key]


async def _dispatch(request: web.Request) -> web.StreamResponse:
    match = request[MATCH]
    if is_websocket(request) and match.cls is not Traffic.PASSTHROUGH:
        # SECURITY: governed routes are plain HTTP; an upgrade there would bypass body inspection.
        raise Refusal(Reason.ROUTE_DENIED)
    return await request.app[HANDLERS][match.cls](request, match)


def create_data_app(
    settings: Settings,
    upstreams: Upstreams | None = None,
    *,
    handlers: dict[RouteClass, ClassHandler] | None = None,
    middlewares: tuple[Middleware, ...] = (),
) -> web.Application:
    """Build the data-plane app; ``handlers`` overrides entries of the class table, ``middlewares``
    run first, right after tracing, before anything else looks at the request (governance spends
    contexts there, so even a request refused on its target spends the context it carried).

    ``upstreams`` are the gateway's pools (the composition root owns them); a bare relay without
    governance opens and closes its own."""
    app = web.Application(
        middlewares=[tracing.trace_requests, *middlewares, observe_data, admit],
        client_max_size=settings.listen.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[INFLIGHT] = {}
    table = default_handlers()
    table.update(handlers or {})
    app[HANDLERS] = table

    def attach(ups: Upstreams) -> None:
        app[CONTROLLER], app[MEMORY] = ups.controller, ups.memory
        if ups.embedding is not None:
            app[EMBEDDING] = ups.embedding

    if upstreams is not None:
        attach(upstreams)
    else:

        async def own(app: web.Application) -> AsyncIterator[None]:
            async with open_upstreams(settings.upstream) as ups:
                attach(ups)
                yield

        app.cleanup_ctx.append(own)
    app.router.add_route("*", "/{tail:.*}", _dispatch)
    return app
