"""The data-plane application: classify every request, then dispatch it by traffic class.

Middleware order (outermost first): governance middlewares (context spending) → ``observe``
(classification, decision id, metrics, one sanitized log line, content-free 500 on any
unexpected error) → ``admit`` (per-client concurrency) → dispatch via the class table. Governed classes get
their handlers from ``sidecar.enforce``; this module owns the transparent relay they build on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sidecar import metrics, tracing
from sidecar.logs import get_logger
from sidecar.reasons import Reason, error_body, new_decision_id
from sidecar.routes import CONTENT_CLASSES, RouteClass, RouteMatch, classify
from sidecar.settings import Settings
from sidecar.upstream import (
    BodyRefused,
    BodyTooLarge,
    BodyTooSlow,
    Upstream,
    UpstreamUnavailable,
    filter_headers,
    make_session,
    relay_response,
)
from sidecar.wsproxy import is_websocket, relay_websocket

ClassHandler = Callable[[web.Request, RouteMatch], Awaitable[web.StreamResponse]]

SETTINGS: Final = web.AppKey("settings", Settings)
CONTROLLER: Final = web.AppKey("controller", Upstream)
MEMORY: Final = web.AppKey("memory_upstream", Upstream)
EMBEDDING: Final = web.AppKey("embedding", Upstream)
HANDLERS: Final = web.AppKey("handlers", dict[RouteClass, ClassHandler])
INFLIGHT: Final = web.AppKey("inflight", dict[tuple[str, str], int])
MATCH: Final = web.RequestKey("match", RouteMatch)
DECISION_ID: Final = web.RequestKey("decision_id", str)
BODY: Final = web.RequestKey("body", bytes)
#: Grace before the minimum body rate applies (a client may pause briefly after the headers).
_RATE_GRACE_S: Final = 1.0

log = get_logger("proxy")


def json_error(request: web.Request, status: int, reason: Reason, *, upstream_status: int | None = None,
               headers: dict[str, str] | None = None) -> web.Response:
    """Build a content-free error response from a reason code and the request's decision id."""
    return web.Response(
        status=status,
        body=error_body(reason, request[DECISION_ID], status=upstream_status),
        content_type="application/json",
        headers=headers,
    )


async def _chunks(request: web.Request) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive, within the size limit, the deadline and the minimum rate.

    A slow body holds a listener slot and, on relayed routes, an upstream connection; these
    limits bound how long any one client can hold them (docs/boundary.md, fair use).
    """
    listen = request.app[SETTINGS].listen
    limit, rate = listen.max_body_bytes, listen.body_min_rate_bps
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    loop = asyncio.get_running_loop()
    started, size = loop.time(), 0
    while True:
        # Latest moment the next chunk may arrive: the overall deadline, or when the average rate
        # since the grace period would drop below the minimum.
        due = listen.body_timeout_s
        if rate:
            due = min(due, _RATE_GRACE_S + size / rate)
        wait = started + due - loop.time()
        if wait <= 0:
            raise BodyTooSlow
        try:
            chunk = await asyncio.wait_for(request.content.readany(), wait)
        except TimeoutError:
            raise BodyTooSlow from None
        if not chunk:
            return
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        yield chunk


async def read_body(request: web.Request) -> bytes:
    """Read the whole body within the listener limits (governed routes need it parsed); read once."""
    if BODY in request:
        return request[BODY]
    request[BODY] = b"".join([chunk async for chunk in _chunks(request)])
    return request[BODY]


def _request_body(request: web.Request) -> object:
    if request.content_length == 0 or not request.body_exists:
        return None
    return _chunks(request)


async def forward(request: web.Request, upstream: Upstream, *, path: str | None = None,
                  headers: dict[str, str] | None = None, drop: tuple[str, ...] = (),
                  body: bytes | None = None, response_headers: dict[str, str] | None = None,
                  replace_errors: bool = False) -> web.StreamResponse:
    """Relay a request (body streamed unless already read) and stream the response back.

    With ``replace_errors`` (memory and embedding routes) an upstream 4xx/5xx answer becomes a
    content-free ``502 upstream_error`` naming the upstream status, since kagent and provider
    error texts can carry content (and a body memgov built was refused: the gateway's failure).
    """
    out = filter_headers(request.headers, drop=("Host", *drop))
    for key, value in (headers or {}).items():
        out[key] = value
    data: object = body
    if body is None:
        data = _request_body(request)
    else:
        out.popall("Content-Length", None)
    async with (tracing.span("memgov.forward", upstream=upstream.name),
                upstream.request(request.method, path or request.raw_path, headers=out, data=data) as resp):
        if replace_errors and resp.status >= 400:
            # SECURITY: kagent and provider error texts can carry DB errors or memory text.
            resp.release()
            return json_error(request, 502, Reason.UPSTREAM_ERROR, upstream_status=resp.status,
                              headers=response_headers)
        return await relay_response(request, resp, response_headers)


async def _passthrough(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    if is_websocket(request):
        return await relay_websocket(request, request.app[CONTROLLER])
    return await forward(request, request.app[CONTROLLER])


async def _content(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    return await forward(request, request.app[MEMORY], replace_errors=True)


async def _embedding(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    if EMBEDDING not in request.app:
        return json_error(request, 404, Reason.ROUTE_DENIED)
    return await forward(request, request.app[EMBEDDING], path="/embeddings", replace_errors=True)


async def _route_denied(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    return json_error(request, 403, Reason.ROUTE_DENIED)


async def _bad_target(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    return json_error(request, 400, Reason.BAD_REQUEST)


async def _ungoverned(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    return json_error(request, 403, Reason.UNGOVERNED_STORE)


def default_handlers() -> dict[RouteClass, ClassHandler]:
    """The class table before governance: transparent relay, content-safe relay, refusals."""
    table: dict[RouteClass, ClassHandler] = {c: _content for c in CONTENT_CLASSES}
    table.update(
        {
            RouteClass.PASSTHROUGH: _passthrough,
            RouteClass.A2A_INVOKE: _passthrough,
            RouteClass.A2A_CARD: _passthrough,
            RouteClass.EMBEDDING: _embedding,
            RouteClass.MEMORY_OTHER: _route_denied,
            RouteClass.A2A_NONCANONICAL: _route_denied,
            RouteClass.MEMORY_UNGOVERNED: _ungoverned,
            RouteClass.INVALID: _bad_target,
        }
    )
    return table


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Classify, time, count and log every request; turn failures into content-free errors."""
    started = time.perf_counter()
    with tracing.span("memgov.classify") as traced:
        match = classify(request.method, request.raw_path)
        traced.set(route_class=match.cls.value, route=match.template)
    request[MATCH] = match
    request[DECISION_ID] = new_decision_id()
    try:
        # SECURITY: a target that is not origin-form never reaches a route (not even the router's 404).
        resp = json_error(request, 400, Reason.BAD_REQUEST) if match.cls is RouteClass.INVALID else await handler(request)
    except BodyRefused as exc:
        resp = json_error(request, exc.status, exc.reason)
    except UpstreamUnavailable as exc:
        resp = json_error(request, 504 if exc.timeout else 502, Reason.UPSTREAM_UNAVAILABLE)
    except web.HTTPException:
        raise
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        raise
    except Exception as exc:  # noqa: BLE001 - SECURITY: never let an exception text reach the client
        log.error("request.failed", route_class=match.cls.value, route=match.template, error_type=type(exc).__name__,
                  decision_id=request[DECISION_ID])
        resp = json_error(request, 500, Reason.INTERNAL_ERROR)
    elapsed = time.perf_counter() - started
    counted, timed = metrics.request_children(match.cls.value, resp.status)
    counted.inc()
    timed.observe(elapsed)
    # Successful pass-through traffic is counted by the metrics above; a log line per such request
    # would cost more than the relay itself, so it is kept for debug level.
    emit = log.debug if match.cls is RouteClass.PASSTHROUGH and resp.status < 400 else log.info
    emit("request.done", method=request.method if request.method in _METHODS else "OTHER",
         route_class=match.cls.value, route=match.template, status=resp.status,
         duration_ms=round(elapsed * 1000, 3), decision_id=request[DECISION_ID])
    return resp


_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


#: Traffic groups for per-client concurrency: a client saturating one cannot starve another.
_GROUP: Final = {cls: "memory" for cls in CONTENT_CLASSES} | {
    RouteClass.EMBEDDING: "embedding", RouteClass.A2A_INVOKE: "a2a", RouteClass.A2A_CARD: "a2a",
}


@web.middleware
async def admit(request: web.Request, handler: Handler) -> web.StreamResponse:
    """At most ``listen.max_concurrent_per_client`` requests in flight per client address and group."""
    key = (request.remote or "", _GROUP.get(request[MATCH].cls, "passthrough"))
    inflight = request.app[INFLIGHT]
    if inflight.get(key, 0) >= request.app[SETTINGS].listen.max_concurrent_per_client:
        # SECURITY: one client holding many slow streams must not take every slot from the others.
        return json_error(request, 429, Reason.CONCURRENCY_LIMITED)
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
    if is_websocket(request) and match.cls is not RouteClass.PASSTHROUGH:
        # SECURITY: governed routes are plain HTTP; an upgrade there would bypass body inspection.
        return json_error(request, 403, Reason.ROUTE_DENIED)
    return await request.app[HANDLERS][match.cls](request, match)


def create_data_app(settings: Settings, *, handlers: dict[RouteClass, ClassHandler] | None = None,
                    middlewares: tuple[Middleware, ...] = ()) -> web.Application:
    """Build the data-plane app; ``handlers`` overrides entries of the class table, ``middlewares``
    run first, right after tracing, before anything else looks at the request (governance spends
    contexts there, so even a request refused on its target spends the context it carried)."""
    app = web.Application(middlewares=[tracing.trace_requests, *middlewares, observe, admit],
                          client_max_size=settings.listen.max_body_bytes)
    app[SETTINGS] = settings
    app[INFLIGHT] = {}
    table = default_handlers()
    table.update(handlers or {})
    app[HANDLERS] = table

    async def upstreams(app: web.Application) -> AsyncIterator[None]:
        cfg = settings.upstream
        # One pool per traffic group, so long or slow passthrough traffic cannot take the
        # connections governed memory and embedding calls need.
        sessions = [make_session(cfg), make_session(cfg, pool_size=cfg.memory_pool_size,
                                                    total_timeout_s=cfg.memory_timeout_s)]
        app[CONTROLLER] = Upstream("controller", cfg.controller_url, sessions[0])
        app[MEMORY] = Upstream("memory", cfg.controller_url, sessions[1])
        if cfg.embedding_url:
            sessions.append(make_session(cfg, pool_size=cfg.embedding_pool_size,
                                         total_timeout_s=cfg.embedding_timeout_s))
            app[EMBEDDING] = Upstream("embedding", cfg.embedding_url, sessions[2])
        yield
        for session in sessions:
            await session.close()

    app.cleanup_ctx.append(upstreams)
    app.router.add_route("*", "/{tail:.*}", _dispatch)
    return app
