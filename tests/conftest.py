"""Shared fixtures: a real PostgreSQL server per test session, fresh databases per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.support.pg import PgServer, start_pg

_db_names = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A real PostgreSQL server on loopback for the whole session."""
    server = start_pg()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """URL of a fresh, empty database on the session's PostgreSQL server."""
    return pg_server.create_database(f"t{next(_db_names)}")
