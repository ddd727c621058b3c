"""Fixtures: the stand-ins on loopback over SQLite and over a real PostgreSQL database."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from yarl import URL

from sidecar.dev.devstack import DevClock, Devstack, start_devstack
from sidecar.dev.devstack.vectors import embed_text
from tests.support.pg import PgServer

START = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)


@pytest.fixture(scope="session")
def shared_pg_url(pg_server: PgServer) -> str:
    """One PostgreSQL database for the stand-in tests; each test starts by dropping the table."""
    return pg_server.create_database("devstack_memory")


@pytest.fixture(params=["sqlite", "postgresql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of a database without a memory table, on one backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/memory.db"
    url: str = request.getfixturevalue("shared_pg_url")
    # A fresh database per test costs far more than dropping one table.
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP TABLE IF EXISTS memory")
    finally:
        await conn.close()
    return url


@pytest.fixture
def clock() -> DevClock:
    """A frozen clock that only moves when a test advances it."""
    return DevClock(START, frozen=True)


@pytest.fixture
async def stack(store_url: str, clock: DevClock) -> AsyncIterator[Devstack]:
    """Both stand-ins listening on free loopback ports over one backend."""
    ds = await start_devstack(store_url=store_url, clock=clock, stream_delay_s=0)
    try:
        yield ds
    finally:
        await ds.stop()


@pytest.fixture
async def sqlite_stack(clock: DevClock) -> AsyncIterator[Devstack]:
    """Both stand-ins over an in-memory SQLite table, for tests where the backend does not matter."""
    ds = await start_devstack(clock=clock, stream_delay_s=0)
    try:
        yield ds
    finally:
        await ds.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A plain HTTP client that does not follow redirects."""
    async with aiohttp.ClientSession() as session:
        yield session


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


@pytest.fixture
def api(stack: Devstack, http: aiohttp.ClientSession) -> Api:
    """Client of the kagent stand-in over both backends."""
    return Api(http, stack.kagent_url)


@pytest.fixture
def sqlite_api(sqlite_stack: Devstack, http: aiohttp.ClientSession) -> Api:
    """Client of the kagent stand-in over in-memory SQLite."""
    return Api(http, sqlite_stack.kagent_url)
