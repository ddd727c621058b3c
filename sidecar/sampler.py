"""Publishes content-free figures of the state store as metrics, read every few seconds.

Erasures by state and the age of the oldest unfinished one, and the sweeper's expiry backlog. A
reading that fails keeps the last figures, so they do not jump to zero while the store is down
(``memgov_state_available``, set by the store's health check, says so). While the store is known to
be down (not connected yet at start, or after a failed check) no reading is tried: the store's own
health lines report the outage, and the sampler adds a warning only when a store counted as
available fails it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Final

from sidecar import evloop, metrics
from sidecar.logs import get_logger
from sidecar.state.gauges import read_gauges
from sidecar.state.types import StateError

log = get_logger("sampler")
INTERVAL_S: Final = 15.0


async def sample_once(store: Any, now: datetime) -> bool:
    """Take one reading and publish it; False when the store is known to be down or did not answer."""
    if not store.health.available:
        return False
    try:
        gauges = await read_gauges(store.db, now)
    except StateError:
        log.warning("state.sample_failed", backend=store.backend)
        return False
    for state, count in gauges.erasures.items():
        metrics.ERASURES.labels(state).set(count)
    metrics.ERASURE_OLDEST_UNFINISHED.set(gauges.oldest_unfinished_erasure_s)
    metrics.EXPIRY_OVERDUE.set(gauges.oldest_overdue_expiry_s)
    return True


@asynccontextmanager
async def sampling(store: Any, clock: Callable[[], datetime], interval_s: float = INTERVAL_S) -> AsyncIterator[None]:
    """Sample now and then every interval_s while the context is open."""

    async def loop() -> None:
        while True:
            await sample_once(store, clock())
            await asyncio.sleep(interval_s)

    async with evloop.background(loop()):
        yield
