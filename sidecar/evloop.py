"""The event loop memgov runs on: uvloop when it is installed (``memgov[fast]``), asyncio's own otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop's loop when the package is importable."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def name() -> str:
    """Which loop ``run`` uses, for reports."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    version: str = getattr(uvloop, "__version__", "?")
    return f"uvloop {version}"
