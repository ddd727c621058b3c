"""In-memory record of the requests a stand-in received, for tests to inspect and await.

Kept in process memory only and never logged: it holds request bodies and headers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from sidecar.dev.devstack.gojson import go_query


@dataclass(frozen=True)
class RecordedRequest:
    """One request as it arrived: ``kind`` is memory, a2a, api, health or unmatched."""

    kind: str
    method: str
    raw_path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    agent: str | None = None

    def header(self, name: str) -> str | None:
        """First value of a header (case-insensitive), or None."""
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)

    @property
    def user_id_header(self) -> str | None:
        """The X-User-Id header."""
        return self.header("X-User-Id")

    @property
    def agent_name_header(self) -> str | None:
        """The X-Agent-Name header."""
        return self.header("X-Agent-Name")

    @property
    def authorization_present(self) -> bool:
        """Whether an Authorization header arrived."""
        return self.header("Authorization") is not None

    @property
    def user_id_query(self) -> str | None:
        """The ``user_id`` query parameter (kagent reads it before X-User-Id), or None."""
        values = go_query(self.raw_path.partition("?")[2]).get("user_id")
        return values[0] if values else None


class Recorder:
    """Append-only list of requests with an awaitable condition."""

    def __init__(self) -> None:
        self._items: list[RecordedRequest] = []
        self._changed = asyncio.Event()

    def add(self, item: RecordedRequest) -> None:
        """Record one request and wake waiters."""
        self._items.append(item)
        self._changed.set()

    async def record(self, request: web.Request, kind: str, agent: str | None = None) -> RecordedRequest:
        """Read the request body and record the request."""
        item = RecordedRequest(
            kind, request.method, request.raw_path, tuple(request.headers.items()), await request.read(), agent
        )
        self.add(item)
        return item

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of everything recorded, oldest first."""
        return list(self._items)

    def of_kind(self, kind: str) -> list[RecordedRequest]:
        """Recorded requests of one kind."""
        return [r for r in self._items if r.kind == kind]

    def clear(self) -> None:
        """Forget everything recorded so far."""
        self._items.clear()

    async def wait_for(
        self, predicate: Callable[[RecordedRequest], bool], count: int = 1, timeout: float = 10.0
    ) -> list[RecordedRequest]:
        """Wait until ``count`` recorded requests satisfy ``predicate``; return them."""
        async with asyncio.timeout(timeout):
            while True:
                found = [r for r in self._items if predicate(r)]
                if len(found) >= count:
                    return found
                self._changed.clear()
                await self._changed.wait()
