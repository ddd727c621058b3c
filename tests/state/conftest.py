"""Every state test runs against a SQLite file and a real PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sidecar.state import StateStore, open_store
from tests.state.workers import Pool


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """URL of an empty state database on one backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/state.db"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture(scope="session")
def pool() -> Iterator[Pool]:
    """Four spawned worker processes, reused by every concurrency test."""
    workers = Pool(4)
    try:
        yield workers
    finally:
        workers.close()


@pytest.fixture
async def store(state_url: str) -> AsyncIterator[StateStore]:
    """A migrated store, closed after the test."""
    st = await open_store(state_url)
    try:
        yield st
    finally:
        await st.close()
