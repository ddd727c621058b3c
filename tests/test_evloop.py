"""memgov runs on uvloop when it is installed and on asyncio's own loop when it is not."""

from __future__ import annotations

import asyncio
import sys

import pytest

from sidecar import evloop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_when_installed() -> None:
    """The test environment installs memgov[fast]: the loop is uvloop's."""
    assert evloop.run(_loop_module()).startswith("uvloop")
    assert evloop.name().startswith("uvloop ")


def test_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the package the same call runs on asyncio's loop."""
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import fails as if it were not installed
    assert evloop.run(_loop_module()).startswith("asyncio")
    assert evloop.name() == "asyncio"
