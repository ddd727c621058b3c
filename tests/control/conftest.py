"""Fixtures: a gateway in front of the kagent stand-in over SQLite and over a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.control.harness import Harness, harness


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """The stand-in's memory store: in-memory SQLite, or a fresh database on the real PostgreSQL."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def h(tmp_path: Path, store_url: str | None) -> AsyncIterator[Harness]:
    """A gateway (REST erasure adapter, SQLite state) in front of the stand-in."""
    async with harness(tmp_path, store_url=store_url) as running:
        yield running


@pytest.fixture
async def sh(tmp_path: Path) -> AsyncIterator[Harness]:
    """The same gateway over an in-memory SQLite stand-in only, where the backend does not matter."""
    async with harness(tmp_path, store_url=None) as running:
        yield running
