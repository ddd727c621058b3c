"""Fixtures: gateways whose erasure adapter is REST (stand-in over SQLite) or kagent-db (real PostgreSQL).

For tests marked ``kagent`` the ``upstream`` fixture also puts kagent v0.9.11 itself behind the
gateway (both auth modes); ``kagent-db`` then connects as the erasure role on kagent's own schema.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.erasure import kagent_table
from tests.support.harness import Harness, harness
from tests.support.upstream import Upstream


@pytest.fixture
async def sh(tmp_path: Path) -> AsyncIterator[Harness]:
    """A gateway with the REST adapter over an in-memory SQLite stand-in."""
    async with harness(tmp_path, store_url=None) as running:
        yield running


@pytest.fixture
async def kdb(tmp_path: Path, upstream: Upstream, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """A gateway erasing through the kagent-db role on the stand-in's (or the real kagent's) memory table."""
    if upstream.real:
        async with harness(
            tmp_path,
            store_url=None,
            adapter="kagent-db",
            upstream=upstream,
            pg_server=request.getfixturevalue("pg_server"),
        ) as running:
            yield running
        return
    pg_url: str = request.getfixturevalue("pg_url")
    eraser = await kagent_table(pg_url)
    async with harness(tmp_path, store_url=pg_url, adapter="kagent-db", kagent_db_url=eraser) as running:
        yield running


@pytest.fixture(params=["rest", "kagent-db"])
async def any_adapter(request: pytest.FixtureRequest, tmp_path: Path, upstream: Upstream) -> AsyncIterator[Harness]:
    """The same gateway with either adapter (REST over the SQLite stand-in, kagent-db over PostgreSQL)."""
    if upstream.real:
        async with harness(
            tmp_path,
            store_url=None,
            adapter=request.param,
            upstream=upstream,
            pg_server=request.getfixturevalue("pg_server"),
        ) as running:
            yield running
        return
    if request.param == "rest":
        async with harness(tmp_path, store_url=None) as running:
            yield running
        return
    pg_url: str = request.getfixturevalue("pg_url")
    eraser = await kagent_table(pg_url)
    async with harness(tmp_path, store_url=pg_url, adapter="kagent-db", kagent_db_url=eraser) as running:
        yield running
