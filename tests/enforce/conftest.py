"""A governed stack on loopback: kagent and embedding stand-ins, and a gateway in front of them.

The test itself plays two roles: the bridge (it mints delegation contexts and invokes agents)
and the agent runtime (it calls the memory API with the session key the stand-in received).
Tests marked ``kagent`` run the same stack with kagent v0.9.11 itself as the controller
(tests/support/upstream.py): its A2A proxy forwards invocations to the stand-in agents.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from sidecar.dev.devstack import Devstack
from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.deployment import Keys
from tests.support.deployment import Deployment, deploy
from tests.support.stack import KNOWN_AGENTS, OTHER_AGENT, Stack, stack_settings
from tests.support.upstream import Upstream


@pytest.fixture
async def make_stack(tmp_path, upstream: Upstream, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """Factory: build a stack with settings overrides; everything is torn down after the test.

    ``in_kagent`` (an async function of the devstack) runs once kagent is up and before the gateway
    starts: what a cluster already holds when memgov is deployed (definitions, sessions)."""
    pg_server = request.getfixturevalue("pg_server") if upstream.real else None
    async with contextlib.AsyncExitStack() as stacks:

        async def build(in_kagent: Callable[[Devstack], Awaitable[None]] | None = None, **overrides: Any) -> Stack:
            async def config_of(keys: Keys, kagent_url: str, dev: Devstack) -> dict[str, Any]:
                if in_kagent is not None:
                    await in_kagent(dev)
                return stack_settings(keys, kagent_url, dev, upstream, **overrides)

            d = await stacks.enter_async_context(
                deploy(
                    tmp_path / f"stack{len(built)}",
                    config_of,
                    upstream=upstream,
                    pg_server=pg_server,
                    agents=KNOWN_AGENTS,
                    clock=DevClock(),
                )
            )
            built.append(d)
            assert d.clock is not None
            return Stack(
                dev=d.dev,
                gw=d.gateway,
                http=d.http,
                bridge_key=d.keys.bridge,
                operator_key=d.keys.operator,
                clock=d.clock,
                ghosts={OTHER_AGENT: "@helper:example.org"},
                upstream=upstream,
            )

        built: list[Deployment] = []
        yield build


@pytest.fixture
async def stack(make_stack) -> Stack:
    return await make_stack()
