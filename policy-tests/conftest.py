"""A real OPA server on loopback with the reference Rego pack pushed, shared by the case tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.policy.opa import OpaEngine
from sidecar.policy.opa_server import start_opa
from sidecar.policy.pack import read_pack

PACK_DIR = Path(__file__).resolve().parent.parent / "policies"


async def _push(url: str) -> None:
    engine = OpaEngine(url, 5.0)
    try:
        await engine.commit(engine.prepare(read_pack(PACK_DIR)))
    finally:
        await engine.close()


@pytest.fixture(scope="session")
def reference_opa_url() -> Iterator[str]:
    """URL of a real OPA server holding the reference Rego pack."""
    server = start_opa()
    try:
        asyncio.run(_push(server.url))
        yield server.url
    finally:
        server.stop()
