"""The event loop memgov runs on: uvloop when it is installed (``memgov[fast]``), asyncio's own otherwise;
and the one way a long-lived background loop is tied to a ``with`` block."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
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


@asynccontextmanager
async def background(coro: Coroutine[Any, Any, object]) -> AsyncIterator[None]:
    """Run ``coro`` as a task while the block runs; cancel it and wait for it on the way out."""
    task = asyncio.get_running_loop().create_task(coro)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
