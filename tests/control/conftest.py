"""Fixtures: a gateway in front of the kagent stand-in over SQLite and over a real PostgreSQL.

Tests marked ``kagent`` also run ``h`` in front of kagent v0.9.11 itself, in both auth modes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.harness import Harness, harness
from tests.support.upstream import STANDIN, UPSTREAMS, marked_upstreams, upstream_params

STANDIN_STORES = ("sqlite", "postgresql")
REAL = {u.id: u for u in UPSTREAMS if u.real}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        real = upstream_params(marked_upstreams(metafunc.definition), lambda u: u.id)
        metafunc.parametrize("backend", [*STANDIN_STORES, *real], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The stand-in's store (``sqlite``, ``postgresql``) or a real kagent (``kagent-<auth mode>``)."""
    name: str = request.param
    return name


@pytest.fixture
async def h(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """A gateway (REST erasure adapter, SQLite state) in front of the stand-in or the real kagent."""
    if backend in REAL:
        async with harness(
            tmp_path, store_url=None, upstream=REAL[backend], pg_server=request.getfixturevalue("pg_server")
        ) as running:
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
