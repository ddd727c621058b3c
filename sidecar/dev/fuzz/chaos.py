"""What the stand-ins received, and the upstream misbehaviour a case asks for.

One middleware wraps both stand-ins (kagent and the embedding provider). It records every request
as it arrived (method, raw target, headers, decoded body or "undecodable") with the status the
stand-in answered, and, while a case arms a :class:`Fault`, answers that fault instead: an error
status whose body and reason phrase carry a sentinel, a non-JSON 200, a dropped connection, or a
delay longer than the gateway's read timeout after which the real handler still runs (kagent
committing a write whose outcome the gateway never learned).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web
from aiohttp.typedefs import Handler

from sidecar.dev.devstack.embedding import EMBEDDING

Upstream = Literal["kagent", "embedding"]
FaultKind = Literal["status", "garbage", "drop", "delay"]


@dataclass(frozen=True)
class Fault:
    """Misbehaviour of one upstream for requests whose path starts with ``prefix``."""

    upstream: Upstream
    kind: FaultKind
    prefix: str = "/"
    status: int = 500
    text: str = ""  # carries a sentinel: the upstream error text that must never be echoed


@dataclass
class Seen:
    """One request a stand-in received (``body`` None when its content encoding did not decode)."""

    upstream: Upstream
    method: str
    raw_path: str
    path: str  # decoded, as the stand-in's router saw it
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    status: int | None

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)


@dataclass
class Chaos:
    """The armed fault, the wire record, and the delayed handlers still running."""

    delay_s: float = 0.6
    fault: Fault | None = None
    seen: list[Seen] = field(default_factory=list)
    _late: set[asyncio.Future[web.StreamResponse]] = field(default_factory=set)

    async def settle(self) -> None:
        """Wait until every delayed request has run its real handler."""
        while self._late:
            await asyncio.gather(*list(self._late), return_exceptions=True)

    def since(self, mark: int) -> list[Seen]:
        """Requests received after ``mark`` (a length of :attr:`seen` taken earlier)."""
        return self.seen[mark:]

    def forget(self) -> None:
        """Drop the record (between cases, so a long run keeps no bodies)."""
        self.seen.clear()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Record the request; answer the armed fault or run the stand-in."""
        upstream: Upstream = "embedding" if EMBEDDING in request.app else "kagent"
        try:
            body: bytes | None = await request.read()
        except Exception:  # noqa: BLE001 - a body the content encoding cannot decode is itself the finding
            body = None
        seen = Seen(
            upstream, request.method, request.raw_path, request.path, tuple(request.headers.items()), body, None
        )
        self.seen.append(seen)
        fault = self.fault
        try:
            if body is None:
                resp: web.StreamResponse = web.Response(status=400, text="undecodable body")
            elif fault is None or fault.upstream != upstream or not request.raw_path.startswith(fault.prefix):
                resp = await handler(request)
            else:
                resp = await self._misbehave(fault, request, handler)
        except web.HTTPException as exc:
            seen.status = exc.status
            raise
        except Exception:
            seen.status = 500  # what aiohttp answers for a crashed handler
            raise
        seen.status = resp.status
        return resp

    async def _misbehave(self, fault: Fault, request: web.Request, handler: Handler) -> web.StreamResponse:
        if fault.kind == "status":
            resp = web.Response(
                status=fault.status, text=json.dumps({"error": fault.text}), content_type="application/json"
            )
            resp.set_status(fault.status, "E " + fault.text.encode("ascii", "ignore").decode())
            return resp
        if fault.kind == "garbage":
            return web.Response(status=200, text="<html>" + fault.text, content_type="text/html")
        if fault.kind == "drop":
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=499)
        # delay: the gateway gives up first, then the real handler still runs (outcome unknown).
        task = asyncio.ensure_future(self._late_run(request, handler))
        self._late.add(task)
        task.add_done_callback(self._late.discard)
        return await asyncio.shield(task)

    async def _late_run(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        await asyncio.sleep(self.delay_s)
        return await handler(request)
