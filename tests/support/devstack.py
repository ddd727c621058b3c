"""Calls against the stand-ins themselves: vectors, save bodies and a small API client."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
from yarl import URL

from sidecar.dev.devstack.vectors import embed_text

START = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)


def vec(text: str) -> list[float]:
    """The stand-in provider's 768-float embedding of ``text``."""
    return embed_text(text)


def axis(i: int, dim: int = 768) -> list[float]:
    """Unit vector along one axis."""
    v = [0.0] * dim
    v[i] = 1.0
    return v


def save_body(
    agent: str = "kagent__NS__helper",
    user: str = "alice",
    content: str = "likes tea",
    vector: Sequence[float] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An AddSession body."""
    return {
        "agent_name": agent,
        "user_id": user,
        "content": content,
        "vector": list(vector) if vector is not None else vec(content),
        **extra,
    }


class Api:
    """Calls against the kagent stand-in returning (status, content-type, body bytes)."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http, self.base = http, base

    async def call(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, str | None, bytes]:
        """Send one request with the path exactly as given; ``body`` is JSON-encoded, ``raw`` sent as is."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        async with self.http.request(
            method, URL(self.base + path, encoded=True), data=data, headers=headers, allow_redirects=False
        ) as resp:
            return resp.status, resp.headers.get("Content-Type"), await resp.read()

    async def json(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        """Send one request and decode the JSON answer."""
        status, _ctype, raw = await self.call(method, path, body, **kw)
        return status, json.loads(raw) if raw else None
