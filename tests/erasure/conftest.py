"""Fixtures: gateways whose erasure adapter is REST (stand-in over SQLite) or kagent-db (real PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sidecar.devstack import open_memory_store
from tests.control.harness import Harness, harness, install_role, role_url


async def kagent_table(pg_url: str) -> str:
    """Create kagent's memory table (as kagent does at start), install the role; the role's URL."""
    table = await open_memory_store(pg_url)
    await table.close()
    await install_role(pg_url)
    return role_url(pg_url)


@pytest.fixture
async def sh(tmp_path: Path) -> AsyncIterator[Harness]:
    """A gateway with the REST adapter over an in-memory SQLite stand-in."""
    async with harness(tmp_path, store_url=None) as running:
        yield running


@pytest.fixture
async def kdb(tmp_path: Path, pg_url: str) -> AsyncIterator[Harness]:
    """A gateway erasing through the kagent-db role on the stand-in's PostgreSQL memory table."""
    eraser = await kagent_table(pg_url)
    async with harness(tmp_path, store_url=pg_url, adapter="kagent-db", kagent_db_url=eraser) as running:
        yield running


@pytest.fixture(params=["rest", "kagent-db"])
async def any_adapter(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """The same gateway with either adapter (REST over the SQLite stand-in, kagent-db over PostgreSQL)."""
    if request.param == "rest":
        async with harness(tmp_path, store_url=None) as running:
            yield running
        return
    pg_url: str = request.getfixturevalue("pg_url")
    eraser = await kagent_table(pg_url)
    async with harness(tmp_path, store_url=pg_url, adapter="kagent-db", kagent_db_url=eraser) as running:
        yield running
