"""The one stack builder of the tests: an upstream, an optional gate, a gateway in this process or its own.

Every test stack is assembled here, in one order, torn down in the reverse one: the kagent side
(the stand-ins, or kagent v0.9.11 itself on a fresh database of the session's PostgreSQL), a gate
in front of it when a test must hold or fail kagent's answers, the gateway with the settings the
caller builds from the addresses it now knows, and a client session. The views tests act
through (tests/support/stack.py for the data plane, harness.py for the control API,
adversarial.py for a gateway process) are built from the one :class:`Deployment` this yields.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from sidecar.dev.devstack import Devstack
from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.deployment import Keys, serving, write_keys
from sidecar.dev.devstack.pg import PgServer
from sidecar.server import Gateway
from tests.support.process import Gate, GatewayProcess, gate, gateway_process
from tests.support.upstream import STANDIN, Upstream, start_stack

#: Builds the gateway's settings from the deployment's keys, the URL it reaches kagent at (the gate's,
#: when there is one) and the running kagent side.
ConfigOf = Callable[[Keys, str, Devstack], Awaitable[dict[str, Any]]]


@dataclass
class Deployment:
    """What one test stack is made of. Exactly one of ``gw`` (in this process) and ``process`` is set."""

    dev: Devstack
    keys: Keys
    config: dict[str, Any]
    http: aiohttp.ClientSession
    gw: Gateway | None = None
    process: GatewayProcess | None = None
    gate: Gate | None = None
    clock: DevClock | None = None

    @property
    def gateway(self) -> Gateway:
        assert self.gw is not None, "this deployment runs its gateway as a process"
        return self.gw

    @property
    def gateway_process(self) -> GatewayProcess:
        assert self.process is not None, "this deployment runs its gateway in the test's process"
        return self.process


@asynccontextmanager
async def deploy(
    tmp: Path,
    config_of: ConfigOf,
    *,
    upstream: Upstream = STANDIN,
    pg_server: PgServer | None = None,
    agents: Iterable[str] = (),
    clock: DevClock | None = None,
    gateway_clock: DevClock | None = None,
    process: bool = False,
    gated: bool = False,
    **devstack: Any,
) -> AsyncIterator[Deployment]:
    """Start a stack in ``tmp`` and stop all of it when the block ends.

    ``agents`` are the agents the real kagent knows (it proxies their invocations to the stand-in
    agents); ``devstack`` goes to the stand-ins (``store_url``, ``stream_delay_s``, ...). With
    ``process`` the gateway runs as ``memgov serve`` on fixed free ports; otherwise in this
    process on port 0, returned once its start-up sweep has finished. ``gateway_clock`` moves the
    gateway's time alone (the stand-ins keep ``clock``, or real time).
    """
    keys = write_keys(tmp / "keys")
    if clock is not None:
        devstack["clock"] = clock
    dev = await start_stack(upstream, pg_server=pg_server, log_dir=tmp / "kagent", agents=agents, **devstack)
    try:
        async with contextlib.AsyncExitStack() as stack:
            g = await stack.enter_async_context(gate(dev.kagent_url)) if gated else None
            config = await config_of(keys, g.url if g is not None else dev.kagent_url, dev)
            gw: Gateway | None = None
            proc: GatewayProcess | None = None
            if process:
                proc = await stack.enter_async_context(gateway_process(tmp / "gw", config))
            else:
                gw = await stack.enter_async_context(serving(config, gateway_clock or clock))
            http = await stack.enter_async_context(aiohttp.ClientSession())
            yield Deployment(dev, keys, config, http, gw=gw, process=proc, gate=g, clock=clock)
    finally:
        await dev.stop()
