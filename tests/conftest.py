"""Shared fixtures: a real PostgreSQL server per test session, fresh databases per test, recorded spans."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar import tracing
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


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for one test, every finished span kept in memory."""
    exporter = InMemorySpanExporter()
    tracing.export_to(exporter)
    yield exporter
    tracing.shutdown()
