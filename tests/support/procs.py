"""Gateway processes configured as the control tests' gateway: their settings, two racing on one store,
and a governance runtime configured like them (the processes themselves: tests/support/process.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from sidecar.control.client import ControlClient, JsonAnswers
from sidecar.dev.devstack.deployment import Keys
from sidecar.identity.keys import SessionKeys
from sidecar.ops import Readiness
from sidecar.root import Parts, open_parts
from sidecar.settings import load_settings
from tests.support.harness import AGENT, ALICE, ROOM, overrides, subject_token
from tests.support.pg import free_port
from tests.support.process import GatewayProcess, gateway_process


def process_settings(keys: Keys, pack: Path, kagent_url: str, state_url: str, **extra: Any) -> dict[str, Any]:
    """Settings of a gateway process on fresh fixed ports."""
    settings = overrides(keys, pack, kagent_url, state_url, **extra)
    ports = {name: f"127.0.0.1:{free_port()}" for name in ("data", "control", "ops")}
    settings["listen"] = {**settings["listen"], **ports}
    settings["policy"]["reload_interval_s"] = 0
    settings["log"] = {"level": "info"}
    return settings


@dataclass
class Pair:
    """Two gateway processes sharing one state store, a client session, and a consented scope of Alice's."""

    a: GatewayProcess
    b: GatewayProcess
    http: aiohttp.ClientSession
    api: JsonAnswers
    scope_id: str
    key: str  # the scope's session key at generation 1


@asynccontextmanager
async def two_gateways(tmp: Path, keys: Keys, first: dict[str, Any], second: dict[str, Any]) -> AsyncIterator[Pair]:
    """Start both gateways and consent once through the first (every save of a race comes from this client).

    The second runs as `memgov serve --workers 2`, so every race also covers workers sharing
    ports: three gateway processes on one state store.
    """
    connector = aiohttp.TCPConnector(limit=0)
    second = {**second, "listen": {**second["listen"], "workers": 2}}
    async with (
        gateway_process(tmp / "a", first) as a,
        gateway_process(tmp / "b", second) as b,
        aiohttp.ClientSession(connector=connector) as http,
    ):
        api = JsonAnswers(ControlClient(a.control_url, lambda: subject_token(keys, int(time.time())), session=http))
        scope_id = (await api.create_scope(ALICE, AGENT, ROOM))["scope_id"]
        await api.grant(scope_id, "remember my preferences", "v1")
        key = SessionKeys(keys.session_file.read_bytes().strip()).session_key(scope_id, 1)
        yield Pair(a, b, http, api, scope_id, key)


@asynccontextmanager
async def governed_like(settings: dict[str, Any]) -> AsyncIterator[Parts]:
    """A gateway's parts, configured as a gateway process is (no listeners), e.g. to sweep after a race."""
    local = load_settings(
        **{**settings, "listen": {"data": "127.0.0.1:0", "control": "127.0.0.1:0", "ops": "127.0.0.1:0"}}
    )
    async with open_parts(local, Readiness()) as parts:
        yield parts
