"""Fixtures: the stand-ins on loopback over SQLite and over a real PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from sidecar.dev.devstack import V0_10, DevClock, Devstack, start_devstack
from tests.support.devstack import START, Api
from tests.support.pg import PgServer


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


@pytest.fixture
def api(stack: Devstack, http: aiohttp.ClientSession) -> Api:
    """Client of the kagent stand-in over both backends."""
    return Api(http, stack.kagent_url)


@pytest.fixture
def sqlite_api(sqlite_stack: Devstack, http: aiohttp.ClientSession) -> Api:
    """Client of the kagent stand-in over in-memory SQLite."""
    return Api(http, sqlite_stack.kagent_url)


@pytest.fixture
async def v010_stack(clock: DevClock) -> AsyncIterator[Devstack]:
    """The stand-in modelling kagent v0.10.0-rc3 over in-memory SQLite, knowing one agent (team/helper)."""
    ds = await start_devstack(clock=clock, stream_delay_s=0, agents=["team/helper"], release=V0_10)
    try:
        yield ds
    finally:
        await ds.stop()


@pytest.fixture
def v010(v010_stack: Devstack, http: aiohttp.ClientSession) -> Api:
    """Client of the stand-in's v0.10 model."""
    return Api(http, v010_stack.kagent_url)
