"""A recording echo upstream for transparency tests (raw bytes in, raw bytes out)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web


@dataclass
class Seen:
    method: str
    raw_path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class EchoState:
    seen: list[Seen] = field(default_factory=list)
    sse_release: asyncio.Event = field(default_factory=asyncio.Event)
    sse_first_sent: asyncio.Event = field(default_factory=asyncio.Event)
    slow: asyncio.Event = field(default_factory=asyncio.Event)


ECHO: web.AppKey[EchoState] = web.AppKey("echo", EchoState)


async def _echo(request: web.Request) -> web.StreamResponse:
    state = request.app[ECHO]
    body = await request.read()
    state.seen.append(Seen(request.method, request.raw_path, list(request.headers.items()), body))
    status = int(request.headers.get("X-Echo-Status", "200"))
    reply = request.headers.get("X-Echo-Body")
    headers = {"X-Upstream": "echo", "Set-Cookie": "a=b; Path=/"}
    if reply is not None:
        return web.Response(status=status, text=reply, headers=headers, content_type="application/json")
    return web.Response(
        status=status,
        body=body or b"{}",
        headers=headers,
        content_type=request.content_type or "application/octet-stream",
    )


async def _sse(request: web.Request) -> web.StreamResponse:
    state = request.app[ECHO]
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    await resp.write(b'data: {"n": 1}\n\n')
    state.sse_first_sent.set()
    await state.sse_release.wait()  # the test releases the rest only after the client saw event 1
    await resp.write(b'data: {"n": 2}\n\n')
    await resp.write(b'data: {"n": 3, "final": true}\n\n')
    await resp.write_eof()
    return resp


async def _stall(request: web.Request) -> web.StreamResponse:
    await request.app[ECHO].slow.wait()
    return web.Response(text="late")


async def _ws(request: web.Request) -> web.StreamResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        if msg.type == WSMsgType.TEXT:
            await ws.send_str("echo:" + msg.data)
        elif msg.type == WSMsgType.BINARY:
            await ws.send_bytes(msg.data[::-1])
    return ws


def create_echo_app() -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[ECHO] = EchoState()
    app.router.add_post("/api/a2a/{ns}/{name}/stream-test", _sse)
    app.router.add_get("/api/sessions/stall", _stall)
    app.router.add_get("/api/sandbox/ssh", _ws)
    app.router.add_route("*", "/{tail:.*}", _echo)
    return app
