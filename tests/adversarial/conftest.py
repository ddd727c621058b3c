"""The attacker's bench: a real ``memgov serve`` process in front of the kagent stand-in.

Every test here probes the gateway the way a compromised agent pod, a tool or an anonymous
in-cluster client would: over HTTP only, with tokens minted by hand (PyJWT), reading the
stand-in's table to see what really landed. Nothing inside the gateway process is touched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.adversarial import (
    Launch,
    Target,
    launched,
)


@pytest.fixture
async def launch(tmp_path: Path) -> AsyncIterator[Launch]:
    """Factory: a gateway with settings overrides; everything stops after the test."""
    stack: list[Any] = []

    async def start(**settings: Any) -> Target:
        cm = launched(tmp_path / f"t{len(stack)}", **settings)
        stack.append(cm)
        return await cm.__aenter__()

    yield start
    for cm in reversed(stack):
        await cm.__aexit__(None, None, None)


@pytest.fixture
async def target(launch: Launch) -> Target:
    """A gateway with the test defaults (rest adapter, SQLite state)."""
    return await launch()
