"""The upstream side of the proxy: one pooled ``ClientSession`` per app and a streaming relay.

Bodies flow in both directions without buffering on passthrough routes; hop-by-hop headers
are dropped; the client's bytes reach kagent unchanged (no added compression or user agent).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import lru_cache
from http import HTTPStatus
from types import TracebackType
from typing import Any, Final

import aiohttp
import jwt
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from opentelemetry.trace import SpanKind
from yarl import URL

from sidecar import metrics, tracing
from sidecar.reasons import Reason, Refusal
from sidecar.settings import UpstreamSettings

HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# aiohttp adds these by itself unless told not to; a transparent proxy must not.
_AUTO_HEADERS: Final = ("Accept-Encoding", "User-Agent", "Content-Type", "Accept")


#: Never forwarded, on any route: a delegation context is for memgov alone (SPEC §5).
CONTEXT_HEADER: Final = "X-Memgov-Context"
#: Never forwarded, on any route: an operator's token for a governed definition write is memgov's
#: alone (kagent keeps ``Authorization`` for its own auth mode).
OPERATOR_HEADER: Final = "X-Memgov-Operator"
#: kagent v0.10's share token: kagent then acts as the shared session's owner. Dropped on every
#: route; put back only on the request a session.share decision allowed (``enforce/shares.py``).
SHARE_HEADER: Final = "X-Share-Token"


class BodyRefused(Refusal):
    """The request body broke a listener limit: ``body_too_large`` (``listen.max_body_bytes``) or
    ``body_timeout`` (``listen.body_timeout_s``, ``listen.body_min_rate_bps``)."""


def _refusal_in_chain(exc: BaseException) -> BodyRefused | None:
    """The body refusal, raised inside the client's body writer, that caused ``exc`` (if any)."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, BodyRefused):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class UpstreamUnavailable(Refusal):
    """The upstream could not be reached (502) or did not answer in time (504); ``timeout`` tells which.

    ``sent`` is True unless the connection itself failed: then the request never left, and a
    write certainly did not happen; otherwise (timeout, reset) its outcome is unknown.
    """

    def __init__(self, timeout: bool, sent: bool = True) -> None:
        super().__init__(
            Reason.UPSTREAM_UNAVAILABLE, status=HTTPStatus.GATEWAY_TIMEOUT if timeout else HTTPStatus.BAD_GATEWAY
        )
        self.timeout, self.sent = timeout, sent


@lru_cache(maxsize=32)
def _skipped(drop: tuple[str, ...]) -> frozenset[str]:
    # ``drop`` comes from memgov's code (a handful of fixed tuples), never from a request.
    never = {CONTEXT_HEADER.lower(), OPERATOR_HEADER.lower(), SHARE_HEADER.lower()}
    return HOP_BY_HOP | {d.lower() for d in drop} | never


def filter_headers(headers: Mapping[str, str] | CIMultiDictProxy[str], drop: tuple[str, ...] = ()) -> CIMultiDict[str]:
    """Copy headers without hop-by-hop ones, those named in Connection, ``drop``, the context,
    operator and share headers."""
    skip = _skipped(drop)
    connection = headers.get("Connection")
    if connection:
        skip = skip | {h.strip().lower() for h in connection.split(",") if h.strip()}
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        if key.lower() not in skip:
            out.add(key, value)
    return out


@dataclass(frozen=True, slots=True)
class Upstream:
    """A named upstream base URL sharing the app's client session."""

    name: str
    base: str
    session: aiohttp.ClientSession

    def url(self, raw_path_and_query: str) -> URL:
        """Join the base with a raw, still-encoded path and query, keeping its encoding."""
        return URL(self.base + raw_path_and_query, encoded=True)

    def request(
        self,
        method: str,
        raw_path_and_query: str,
        *,
        headers: CIMultiDict[str],
        data: object = None,
    ) -> Exchange:
        """Send one request; the response once headers arrive; failures map to UpstreamUnavailable.

        The exchange is a CLIENT span (memgov.forward) naming the upstream, its host and port, the
        method and the status; kagent and providers join it through ``traceparent``.
        """
        return Exchange(self, method, raw_path_and_query, headers, data)


class Exchange:
    """One request to an upstream, as ``async with upstream.request(...) as response``.

    A class rather than a generator-based context manager: every relayed request opens one.
    """

    __slots__ = ("_cm", "_data", "_headers", "_method", "_path", "_span", "_upstream")

    def __init__(self, upstream: Upstream, method: str, path: str, headers: CIMultiDict[str], data: object) -> None:
        self._upstream, self._method, self._path, self._headers, self._data = upstream, method, path, headers, data
        self._span: tracing.span | None = None
        self._cm: aiohttp.client._RequestContextManager | None = None

    async def __aenter__(self) -> aiohttp.ClientResponse:
        up, headers = self._upstream, self._headers
        url = up.url(self._path)
        opened = self._span = tracing.span(
            "memgov.forward",
            kind=SpanKind.CLIENT,
            upstream=up.name,
            method=self._method,
            server_address=url.host,
            server_port=url.port,
        )
        client = opened.__enter__()
        try:
            tracing.inject(headers)  # W3C traceparent: kagent and providers join memgov's trace (tracing on)
            skip = [h for h in _AUTO_HEADERS if h not in headers]
            started = time.perf_counter()
            try:
                self._cm = up.session.request(
                    self._method, url, headers=headers, data=self._data, skip_auto_headers=skip, allow_redirects=False
                )
                resp = await self._cm.__aenter__()
            except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
                if (refused := _refusal_in_chain(exc)) is not None:
                    raise refused from None
                metrics.UPSTREAM_FAILURES.labels(up.name, "timeout").inc()
                raise UpstreamUnavailable(timeout=True) from None
            except (aiohttp.ClientError, OSError) as exc:
                if (refused := _refusal_in_chain(exc)) is not None:
                    raise refused from None
                metrics.UPSTREAM_FAILURES.labels(up.name, "connect").inc()
                raise UpstreamUnavailable(
                    timeout=False, sent=not isinstance(exc, aiohttp.ClientConnectorError)
                ) from None
            metrics.upstream_seconds(up.name).observe(time.perf_counter() - started)
            client.set(status=resp.status)
        except BaseException as exc:
            self._cm = None
            opened.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return resp

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._cm is not None:
                await self._cm.__aexit__(None, None, None)
        finally:
            if self._span is not None:
                self._span.__exit__(kind, exc, tb)


class KagentBearer:
    """Bearer tokens for kagent's ``trusted-proxy`` auth mode, which wants a parseable JWT on every
    call and reads its user claim without verifying it (so the secret is random per process)."""

    __slots__ = ("_claim", "_secret", "enabled")

    def __init__(self, cfg: UpstreamSettings) -> None:
        self.enabled = cfg.kagent_auth_mode == "trusted-proxy"
        self._claim = cfg.kagent_user_claim
        self._secret = secrets.token_bytes(32)

    def headers(self, user: str, now: int) -> dict[str, str]:
        """``Authorization`` naming ``user`` in trusted-proxy mode; nothing in unsecure mode."""
        if not self.enabled:
            return {}
        claims = {self._claim: user, "iss": "memgov", "iat": now, "exp": now + 300}
        return {"Authorization": "Bearer " + jwt.encode(claims, self._secret, algorithm="HS256")}


#: The user memgov names on its own calls to kagent (erasure, verification, inspect listings).
MEMGOV_USER: Final = "memgov"


def make_session(
    cfg: UpstreamSettings,
    *,
    pool_size: int | None = None,
    total_timeout_s: float | None = None,
    trust_env: bool = False,
) -> aiohttp.ClientSession:
    """Create one pooled client session; each traffic group gets its own (see docs/boundary.md).

    ``trust_env`` (the embedding provider's sessions, when configured) follows the proxy environment.
    """
    timeout = aiohttp.ClientTimeout(
        total=total_timeout_s or cfg.total_timeout_s, connect=cfg.connect_timeout_s, sock_read=cfg.read_timeout_s
    )
    connector = aiohttp.TCPConnector(limit=pool_size or cfg.pool_size, keepalive_timeout=30, enable_cleanup_closed=True)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        skip_auto_headers=("User-Agent",),
        trust_env=trust_env,
    )


@dataclass(frozen=True, slots=True)
class Upstreams:
    """Every upstream pool of one gateway, each with one owner (:func:`open_upstreams`).

    One pool per traffic group, so long or slow passthrough traffic cannot take the connections
    governed memory and embedding calls need, and rotation never waits on the data plane's.
    """

    #: Passthrough traffic and invocations.
    controller: Upstream
    #: kagent's memory API: governed saves and searches, and memgov's own calls (erasure, inspect, rotation).
    memory: Upstream
    #: The agents' embedding provider (None when no ``embedding_url`` is configured).
    embedding: Upstream | None = None
    #: The same provider, for rotation's re-embedding: a small pool with a whole-call timeout.
    reembedding: Upstream | None = None


@asynccontextmanager
async def open_upstreams(cfg: UpstreamSettings) -> AsyncIterator[Upstreams]:
    """Open every pool the configuration needs; closed, in reverse, when the block ends."""
    async with contextlib.AsyncExitStack() as opened:

        def pool(name: str, base: str, **how: Any) -> Upstream:
            session = make_session(cfg, **how)
            opened.push_async_callback(session.close)
            return Upstream(name, base, session)

        controller = pool("controller", cfg.controller_url)
        memory = pool(
            "memory", cfg.controller_url, pool_size=cfg.memory_pool_size, total_timeout_s=cfg.memory_timeout_s
        )
        embedding = reembedding = None
        if cfg.embedding_url:
            embedding = pool(
                "embedding",
                cfg.embedding_url,
                pool_size=cfg.embedding_pool_size,
                total_timeout_s=cfg.embedding_timeout_s,
                trust_env=cfg.embedding_trust_env,
            )
            reembedding = pool(
                "reembedding",
                cfg.embedding_url,
                pool_size=4,
                total_timeout_s=cfg.embedding_timeout_s,
                trust_env=cfg.embedding_trust_env,
            )
        yield Upstreams(controller, memory, embedding, reembedding)


async def relay_response(
    request: web.Request, upstream: aiohttp.ClientResponse, extra_headers: Mapping[str, str] | None = None
) -> web.StreamResponse:
    """Stream an upstream response to the client chunk by chunk (SSE events flush as they come)."""
    headers = filter_headers(upstream.headers)
    headers.update(extra_headers or {})
    length = upstream.headers.get("Content-Length")
    resp = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
    if length is not None and length.isdigit():
        resp.content_length = int(length)
    else:
        headers.popall("Content-Length", None)
        if request.method != "HEAD" and upstream.status not in (204, 304):
            resp.enable_chunked_encoding()
    await resp.prepare(request)
    if request.method != "HEAD":
        async for chunk in upstream.content.iter_any():
            await resp.write(chunk)
    await resp.write_eof()
    return resp
