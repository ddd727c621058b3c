"""Every state test runs against a SQLite file and a real PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sidecar.state import Scope, StateStore, open_store
from tests.state.workers import Pool

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WEEK = timedelta(days=7)


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


async def new_scope(store: StateStore, room: str = "!room:example.org", *, granted: bool = True) -> Scope:
    """Create a scope for a fixed principal and agent, granted unless told otherwise."""
    scope, _ = await store.create_scope("@alice:example.org", "native", "team/helper", "control_room", room, NOW)
    if granted:
        scope, _ = await store.grant(scope.scope_id, "remember preferences", "v1", NOW)
    return scope


#: A namespace id no scope has (for calls that must be refused before any namespace matters).
NO_NAMESPACE = "n" + "0" * 24


async def ns_of(store: StateStore, scope_id: str) -> str:
    """The scope's live namespace id (a non-existent one while it has none)."""
    scope = await store.get_scope(scope_id)
    return scope.namespace.ns_id if scope is not None and scope.namespace is not None else NO_NAMESPACE
