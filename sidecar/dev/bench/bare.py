"""The baseline for ``memgov bench proxy``: the least a correct streaming aiohttp proxy must do.

It drops hop-by-hop headers and streams bodies both ways (so SSE flushes event by event), with
one pooled client session, and nothing else: no classification, metrics, logging or policy.
Comparing memgov against it isolates memgov's own cost from aiohttp's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
UPSTREAM: Final = web.AppKey("bare_upstream", str)
SESSION: Final = web.AppKey("bare_session", aiohttp.ClientSession)


def _end_to_end(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _HOP)


async def _relay(request: web.Request) -> web.StreamResponse:
    url = URL(request.app[UPSTREAM] + request.raw_path, encoded=True)
    data = request.content if request.body_exists else None
    async with request.app[SESSION].request(
        request.method,
        url,
        headers=_end_to_end(request.headers),
        data=data,
        allow_redirects=False,
        skip_auto_headers=("Accept", "Accept-Encoding", "Content-Type", "User-Agent"),
    ) as upstream:
        headers = _end_to_end(upstream.headers)
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=headers)
        if "Content-Length" not in headers and request.method != "HEAD" and upstream.status not in (204, 304):
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        async for chunk in upstream.content.iter_any():
            await resp.write(chunk)
        await resp.write_eof()
        return resp


def create_bare_app(upstream_url: str) -> web.Application:
    """Build the baseline proxy relaying every request to ``upstream_url``."""
    app = web.Application(client_max_size=4 * 1024 * 1024)
    app[UPSTREAM] = upstream_url.rstrip("/")

    async def session(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=256, keepalive_timeout=30)
        app[SESSION] = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(None),
        )
        yield
        await app[SESSION].close()

    app.cleanup_ctx.append(session)
    app.router.add_route("*", "/{tail:.*}", _relay)
    return app
