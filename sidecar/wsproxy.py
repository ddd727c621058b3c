"""WebSocket relay for passthrough routes (agent harness gateway, sandbox SSH).

Frames are pumped both ways unchanged; memory routes never upgrade, so nothing here is governed.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import WSMsgType, web

from sidecar.upstream import Upstream, UpstreamUnavailable, filter_headers

_WS_HEADERS = ("Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Extensions", "Sec-WebSocket-Protocol")


def is_websocket(request: web.Request) -> bool:
    """True when the client asks to upgrade to a WebSocket."""
    return request.headers.get("Upgrade", "").lower() == "websocket"


async def _pump(
    src: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    dst: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
) -> None:
    async for msg in src:
        if msg.type == WSMsgType.TEXT:
            await dst.send_str(msg.data)
        elif msg.type == WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        elif msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
            break
    await dst.close()


async def relay_websocket(request: web.Request, upstream: Upstream) -> web.StreamResponse:
    """Open the upstream WebSocket first (so failures map to 502), then accept and pump frames."""
    headers = filter_headers(request.headers, drop=("Host", *_WS_HEADERS))
    protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    try:
        upstream_ws = await upstream.session.ws_connect(
            upstream.url(request.raw_path),
            headers=headers,
            protocols=protocols,
            autoclose=False,
        )
    except (TimeoutError, aiohttp.ClientError, OSError):
        raise UpstreamUnavailable(timeout=False) from None
    client_ws = web.WebSocketResponse(protocols=protocols, autoclose=False)
    await client_ws.prepare(request)
    try:
        await asyncio.gather(_pump(client_ws, upstream_ws), _pump(upstream_ws, client_ws))
    finally:
        await upstream_ws.close()
        await client_ws.close()
    return client_ws
