"""The data-plane application: classify every request, then dispatch it by traffic class.

Middleware order (outermost first): ``observe`` (decision id, metrics, one sanitized log line,
content-free 500 on any unexpected error) → dispatch via the class table. Governed classes get
their handlers from ``sidecar.enforce``; this module owns the transparent relay they build on.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from sidecar import metrics, tracing
from sidecar.logs import get_logger
from sidecar.reasons import Reason, error_body, new_decision_id
from sidecar.routes import CONTENT_CLASSES, RouteClass, RouteMatch, classify
from sidecar.settings import Settings
from sidecar.upstream import BodyTooLarge, Upstream, UpstreamUnavailable, filter_headers, make_session, relay_response
from sidecar.wsproxy import is_websocket, relay_websocket

ClassHandler = Callable[[web.Request, RouteMatch], Awaitable[web.StreamResponse]]

SETTINGS: Final = web.AppKey("settings", Settings)
CONTROLLER: Final = web.AppKey("controller", Upstream)
EMBEDDING: Final = web.AppKey("embedding", Upstream)
HANDLERS: Final = web.AppKey("handlers", dict[RouteClass, ClassHandler])
MATCH: Final = web.RequestKey("match", RouteMatch)
DECISION_ID: Final = web.RequestKey("decision_id", str)
BODY: Final = web.RequestKey("body", bytes)

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


async def read_body(request: web.Request) -> bytes:
    """Read the whole body within the configured limit (governed routes need it parsed); read once."""
    if BODY in request:
        return request[BODY]
    limit = request.app[SETTINGS].listen.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    request[BODY] = b"".join(chunks)
    return request[BODY]


async def _limited_stream(request: web.Request, limit: int) -> AsyncIterator[bytes]:
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        yield chunk


def _request_body(request: web.Request) -> object:
    limit = request.app[SETTINGS].listen.max_body_bytes
    if request.content_length is not None:
        if request.content_length > limit:
            raise BodyTooLarge
        return request.content if request.content_length else None
    if request.body_exists:
        return _limited_stream(request, limit)
    return None


async def forward(request: web.Request, upstream: Upstream, *, path: str | None = None,
                  headers: dict[str, str] | None = None, drop: tuple[str, ...] = (),
                  body: bytes | None = None, response_headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Relay a request (body streamed unless already read) and stream the response back."""
    out = filter_headers(request.headers, drop=("Host", *drop))
    for key, value in (headers or {}).items():
        out[key] = value
    if body is None:
        body = _request_body(request)  # type: ignore[assignment]
    else:
        out.popall("Content-Length", None)
    async with (tracing.span("memgov.forward", upstream=upstream.name),
                upstream.request(request.method, path or request.raw_path, headers=out, data=body) as resp):
        return await relay_response(request, resp, response_headers)


async def forward_content(request: web.Request, upstream: Upstream, *, path: str | None = None,
                          body: bytes | None = None, drop: tuple[str, ...] = (),
                          response_headers: dict[str, str] | None = None) -> web.StreamResponse:
    """Relay a memory or embedding request; upstream 4xx/5xx bodies are replaced (they may hold content)."""
    out = filter_headers(request.headers, drop=("Host", *drop))
    if body is None:
        body = _request_body(request)  # type: ignore[assignment]
    else:
        out.popall("Content-Length", None)
    async with (tracing.span("memgov.forward", upstream=upstream.name),
                upstream.request(request.method, path or request.raw_path, headers=out, data=body) as resp):
        if resp.status >= 400:
            # SECURITY: kagent and provider error texts can carry DB errors or memory text.
            resp.release()
            return json_error(request, resp.status, Reason.UPSTREAM_ERROR, upstream_status=resp.status,
                              headers=response_headers)
        return await relay_response(request, resp, response_headers)


async def _passthrough(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    if is_websocket(request):
        return await relay_websocket(request, request.app[CONTROLLER])
    return await forward(request, request.app[CONTROLLER])


async def _content(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    return await forward_content(request, request.app[CONTROLLER])


async def _embedding(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    if EMBEDDING not in request.app:
        return json_error(request, 404, Reason.ROUTE_DENIED)
    return await forward_content(request, request.app[EMBEDDING], path="/embeddings")


async def _route_denied(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    return json_error(request, 403, Reason.ROUTE_DENIED)


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
        resp = await handler(request)
    except BodyTooLarge:
        resp = json_error(request, 413, Reason.BODY_TOO_LARGE)
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


async def _dispatch(request: web.Request) -> web.StreamResponse:
    match = request[MATCH]
    if is_websocket(request) and match.cls is not RouteClass.PASSTHROUGH:
        # SECURITY: governed routes are plain HTTP; an upgrade there would bypass body inspection.
        return json_error(request, 403, Reason.ROUTE_DENIED)
    return await request.app[HANDLERS][match.cls](request, match)


def create_data_app(settings: Settings, *, handlers: dict[RouteClass, ClassHandler] | None = None) -> web.Application:
    """Build the data-plane app; ``handlers`` overrides entries of the class table."""
    app = web.Application(middlewares=[tracing.trace_requests, observe],
                          client_max_size=settings.listen.max_body_bytes)
    app[SETTINGS] = settings
    table = default_handlers()
    table.update(handlers or {})
    app[HANDLERS] = table

    async def upstreams(app: web.Application) -> AsyncIterator[None]:
        session = make_session(settings.upstream)
        app[CONTROLLER] = Upstream("controller", settings.upstream.controller_url, session)
        if settings.upstream.embedding_url:
            app[EMBEDDING] = Upstream("embedding", settings.upstream.embedding_url, session)
        yield
        await session.close()

    app.cleanup_ctx.append(upstreams)
    app.router.add_route("*", "/{tail:.*}", _dispatch)
    return app
