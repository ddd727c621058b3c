"""The relay every data-plane handler builds on: app and request keys, body reading, forwarding, errors.

``proxy`` assembles the data-plane app from these pieces and ``enforce`` answers governed classes
with them; neither imports the other. Every error answer here is ``reasons.error_body`` and
nothing else, so no request or upstream text reaches a client through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Final

from aiohttp import web

from sidecar.reasons import Code, Reason, Refusal, error_body
from sidecar.routes import RouteMatch
from sidecar.settings import Settings
from sidecar.upstream import BodyRefused, Upstream, filter_headers, relay_response

ClassHandler = Callable[[web.Request, RouteMatch], Awaitable[web.StreamResponse]]

SETTINGS: Final = web.AppKey("settings", Settings)
CONTROLLER: Final = web.AppKey("controller", Upstream)
MEMORY: Final = web.AppKey("memory_upstream", Upstream)
EMBEDDING: Final = web.AppKey("embedding", Upstream)
MATCH: Final = web.RequestKey("match", RouteMatch)
DECISION_ID: Final = web.RequestKey("decision_id", str)
BODY: Final = web.RequestKey("body", bytes)
#: Embedding calls where no provider is configured: the route does not exist here (governed or not).
NO_EMBEDDING_UPSTREAM: Final = HTTPStatus.NOT_FOUND
#: Grace before the minimum body rate applies (a client may pause briefly after the headers).
_RATE_GRACE_S: Final = 1.0


def json_error(
    request: web.Request,
    status: int,
    reason: Code,
    *,
    upstream_status: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """Build a content-free error response from a reason code and the request's decision id."""
    return web.Response(
        status=status,
        body=error_body(reason, request[DECISION_ID], status=upstream_status),
        content_type="application/json",
        headers=headers,
    )


def refusal_answer(request: web.Request, refusal: Refusal) -> web.Response:
    """The content-free answer to a refusal that no governed decision stands behind."""
    return json_error(
        request, refusal.status, refusal.reason, upstream_status=refusal.upstream_status, headers=refusal.headers
    )


async def _chunks(request: web.Request) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive, within the size limit, the deadline and the minimum rate.

    A slow body holds a listener slot and, on relayed routes, an upstream connection; these
    limits bound how long any one client can hold them (docs/boundary.md, fair use).
    """
    listen = request.app[SETTINGS].listen
    limit, rate = listen.max_body_bytes, listen.body_min_rate_bps
    if request.content_length is not None and request.content_length > limit:
        raise BodyRefused(Reason.BODY_TOO_LARGE)
    loop, content = asyncio.get_running_loop(), request.content
    started, size = loop.time(), 0
    while True:
        # Latest moment the next chunk may arrive: the overall deadline, or when the average rate
        # since the grace period would drop below the minimum.
        due = listen.body_timeout_s
        if rate:
            due = min(due, _RATE_GRACE_S + size / rate)
        wait = started + due - loop.time()
        if wait <= 0:
            raise BodyRefused(Reason.BODY_TIMEOUT)
        # What has already arrived is taken without a timer (most bodies arrive with their headers);
        # only a wait for more data is bounded: asyncio.timeout arms one timer, where wait_for would
        # also wrap each read in a new task.
        chunk = content.read_nowait()
        if not chunk and not content.is_eof():
            try:
                async with asyncio.timeout(wait):
                    chunk = await content.readany()
            except TimeoutError:
                raise BodyRefused(Reason.BODY_TIMEOUT) from None
        if not chunk:
            return
        size += len(chunk)
        if size > limit:
            raise BodyRefused(Reason.BODY_TOO_LARGE)
        yield chunk


async def read_body(request: web.Request) -> bytes:
    """Read the whole body within the listener limits (governed routes need it parsed); read once."""
    if BODY in request:
        return request[BODY]
    request[BODY] = b"".join([chunk async for chunk in _chunks(request)])
    return request[BODY]


def _request_body(request: web.Request) -> object:
    if BODY in request:
        return request[BODY]  # read already (a share token's session was looked for in it)
    if request.content_length == 0 or not request.body_exists:
        return None
    return _chunks(request)


async def forward(
    request: web.Request,
    upstream: Upstream,
    *,
    path: str | None = None,
    headers: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    body: bytes | None = None,
    response_headers: dict[str, str] | None = None,
    replace_errors: bool = False,
) -> web.StreamResponse:
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
    async with upstream.request(request.method, path or request.raw_path, headers=out, data=data) as resp:
        if replace_errors and resp.status >= 400:
            # SECURITY: kagent and provider error texts can carry DB errors or memory text.
            resp.release()
            return json_error(
                request,
                HTTPStatus.BAD_GATEWAY,
                Reason.UPSTREAM_ERROR,
                upstream_status=resp.status,
                headers=response_headers,
            )
        return await relay_response(request, resp, response_headers)
