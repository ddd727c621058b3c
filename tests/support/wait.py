"""Waiting for a condition another task or process reaches, within a bound (never a fixed sleep)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    """Wait for an observable condition (a state another task or process reaches), within a bound."""
    async with asyncio.timeout(timeout_s):
        while not await condition():
            await asyncio.sleep(0.01)
