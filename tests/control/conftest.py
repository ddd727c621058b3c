"""Fixtures: a gateway in front of the kagent stand-in over SQLite and over a real PostgreSQL.

Tests marked ``kagent`` also run ``h`` in front of kagent itself, each release in each auth mode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.harness import Harness, harness
from tests.support.upstream import REAL, STANDIN, STANDINS, marked_upstreams, upstream_params

STANDIN_STORES = ("sqlite", "postgresql")
#: Every other kagent a test may ask for by its marker: the real releases and the stand-in's other models.
OTHER = {u.id: u for u in (*STANDINS, *REAL) if u != STANDIN}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        others = tuple(u for u in marked_upstreams(metafunc.definition) if u != STANDIN)
        real = upstream_params(others, lambda u: u.id)
        metafunc.parametrize("backend", [*STANDIN_STORES, *real], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The stand-in's store (``sqlite``, ``postgresql``), a real kagent (``kagent-<release>-<auth mode>``) or
    another model of the stand-in (``standin-<release>``, over SQLite)."""
    name: str = request.param
    return name


@pytest.fixture
async def h(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """A gateway (REST erasure adapter, SQLite state) in front of the stand-in or the real kagent."""
    if backend in OTHER:
        upstream = OTHER[backend]
        pg = request.getfixturevalue("pg_server") if upstream.real else None
        async with harness(tmp_path, store_url=None, upstream=upstream, pg_server=pg) as running:
            yield running
        return
    store_url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    async with harness(tmp_path, store_url=store_url, upstream=STANDIN) as running:
        yield running


@pytest.fixture
async def sh(tmp_path: Path) -> AsyncIterator[Harness]:
    """The same gateway over an in-memory SQLite stand-in only, where the backend does not matter."""
    async with harness(tmp_path, store_url=None) as running:
        yield running
