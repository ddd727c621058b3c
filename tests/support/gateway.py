"""Start an in-process gateway on free loopback ports for HTTP-level tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sidecar.server import Gateway, running_gateway
from sidecar.settings import load_settings


def gateway_settings(controller_url: str, **overrides: Any) -> Any:
    """Settings for a test gateway: loopback listeners on port 0, the given upstream."""
    upstream = {"controller_url": controller_url, **overrides.pop("upstream", {})}
    listen = {"data": "127.0.0.1:0", "control": "127.0.0.1:0", "ops": "127.0.0.1:0", **overrides.pop("listen", {})}
    overrides.setdefault("state", {"url": "sqlite:///:memory:"})
    overrides.setdefault("policy", {"reload_interval_s": 0})
    return load_settings(upstream=upstream, listen=listen, **overrides)


@asynccontextmanager
async def gateway(controller_url: str, **overrides: Any) -> AsyncIterator[Gateway]:
    async with running_gateway(gateway_settings(controller_url, **overrides)) as gw:
        assert gw.parts is not None
        await gw.parts.store.wait_connected()
        yield gw
