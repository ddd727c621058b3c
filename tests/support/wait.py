"""Waiting for a condition another task or process reaches, within a bound (never a fixed sleep)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    """Wait for an observable condition (a state another task or process reaches), within a bound.

    Polls soon at first, then less often (up to every 100 ms): a condition read over HTTP (a
    metrics scrape, a readiness probe) costs the process under test CPU that its neighbours in a
    parallel run would otherwise have.
    """
    pause = 0.005
    async with asyncio.timeout(timeout_s):
        while not await condition():
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, 0.1)
