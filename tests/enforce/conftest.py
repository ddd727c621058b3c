"""A governed stack on loopback: kagent and embedding stand-ins, and a gateway in front of them.

The test itself plays two roles: the bridge (it mints delegation contexts and invokes agents)
and the agent runtime (it calls the memory API with the session key the stand-in received).
Tests marked ``kagent`` run the same stack with kagent v0.9.11 itself as the controller
(tests/support/upstream.py): its A2A proxy forwards invocations to the stand-in agents.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sidecar.control.http import SWEEPERS
from sidecar.dev.devstack.clock import DevClock
from sidecar.server import running_gateway
from tests.support.stack import (
    KNOWN_AGENTS,
    OTHER_AGENT,
    Stack,
    stack_settings,
)
from tests.support.upstream import Upstream, start_stack


@pytest.fixture
async def make_stack(tmp_path, upstream: Upstream, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """Factory: build a stack with settings overrides; everything is torn down after the test."""
    cleanups: list[Any] = []
    pg_server = request.getfixturevalue("pg_server") if upstream.real else None

    async def build(**overrides: Any) -> Stack:
        clock = DevClock()
        dev = await start_stack(
            upstream, pg_server=pg_server, log_dir=tmp_path / "kagent", agents=KNOWN_AGENTS, clock=clock
        )
        cleanups.append(dev.stop)
        bridge_key = secrets.token_hex(32).encode()
        settings = stack_settings(tmp_path, dev, bridge_key, upstream, **overrides)
        cm = running_gateway(settings, clock=clock)
        gw = await cm.__aenter__()
        cleanups.append(lambda: cm.__aexit__(None, None, None))
        # The start-up sweep runs in the background: let it finish, so its spans, logs and audit rows
        # never land in a test's window.
        await next(r.app[SWEEPERS] for r in gw.runners if SWEEPERS in r.app).swept.wait()
        http = aiohttp.ClientSession()
        cleanups.append(http.close)
        return Stack(
            dev=dev,
            gw=gw,
            http=http,
            bridge_key=bridge_key,
            clock=clock,
            ghosts={OTHER_AGENT: "@helper:example.org"},
            upstream=upstream,
        )

    yield build
    for cleanup in reversed(cleanups):
        await cleanup()


@pytest.fixture
async def stack(make_stack) -> Stack:
    return await make_stack()
