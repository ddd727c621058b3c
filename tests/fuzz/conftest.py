"""A fuzz stack per test: stand-ins and a gateway in this process, as ``memgov fuzz`` runs them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sidecar.dev.fuzz.stack import FuzzStack, fuzz_stack


@pytest.fixture
async def stack() -> AsyncIterator[FuzzStack]:
    async with fuzz_stack() as running:
        yield running
