"""Whether the state store answers, known without waiting on it: the gateway degrades, never hangs.

A :class:`StoreHealth` is watched by one background task while a gateway runs. It checks the
store with ``SELECT 1`` (bounded by a timeout) every ``interval_s`` while the store answers,
every second while it does not, and at once when a call failed as if the store were gone. While
the store is down, every call through :class:`GuardedDatabase` fails at once with
``StateError(state_unavailable)``, so a request degrades in microseconds instead of waiting for a
connect timeout; the first check that passes brings the store back and replays the audit spool.
Without a watcher (the CLI, a test) the store is always taken as available.

``memgov_state_available`` is 1 while the store answers and 0 while it does not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final, TypeVar

from sidecar import metrics
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.state.db import Database, MakeScript, Mode, Tx
from sidecar.state.types import StateError

_log = get_logger("state")
T = TypeVar("T")
#: How often a store that does not answer is checked again.
DOWN_INTERVAL_S: Final = 1.0


class StoreHealth:
    """The store's availability as the last check saw it, and the trigger for the next check."""

    __slots__ = ("_available", "_changed", "_wake", "watched")

    def __init__(self, available: bool = True) -> None:
        self._available = available
        self._wake: asyncio.Event | None = None
        self._changed: asyncio.Event | None = None
        self.watched = False
        metrics.STATE_AVAILABLE.set(1 if available else 0)

    @property
    def available(self) -> bool:
        return self._available

    def check(self) -> None:
        """Raise at once while the store is known to be down."""
        if not self._available:
            # SECURITY: no control state, no governed work; the caller degrades or refuses.
            raise StateError(Reason.STATE_UNAVAILABLE)

    def suspect(self) -> None:
        """A call failed as if the store were gone: check it now rather than at the next interval."""
        if self._wake is not None:
            self._wake.set()

    def set(self, available: bool) -> bool:
        """Record a check's result; True when it changed the availability."""
        changed = available != self._available
        self._available = available
        metrics.STATE_AVAILABLE.set(1 if available else 0)
        if changed and self._changed is not None:
            self._changed.set()
            self._changed = None
        return changed

    async def wait_for(self, available: bool) -> None:
        """Return once the availability is ``available`` (tools and tests await the change, never sleep)."""
        while self._available != available:
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()

    async def watch(
        self, ping: Callable[[], Awaitable[None]], interval_s: float, recovered: Callable[[], Awaitable[object]]
    ) -> None:
        """Check the store until cancelled; ``recovered`` runs after every passing check (it replays the
        spool), and the store counts as available again only once it has."""
        self._wake = asyncio.Event()
        self.watched = True
        timeout = min(2.0, interval_s)
        try:
            while True:
                self._wake.clear()
                try:
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation that
                    # arrives as the inner await completes, and the watcher would then never end.
                    async with asyncio.timeout(timeout):
                        await ping()
                    await recovered()
                    ok = True
                except (StateError, TimeoutError):
                    ok = False
                except Exception as exc:  # noqa: BLE001 - a watcher that dies would report "available" for ever
                    _log.error("state.check_failed", error_type=type(exc).__name__)
                    ok = False
                if self.set(ok):
                    _log.warning("state.available" if ok else "state.unavailable")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval_s if ok else DOWN_INTERVAL_S):
                        await self._wake.wait()
        finally:
            self._wake, self.watched = None, False


class LateDatabase:
    """The database of a store that connects after the gateway started: until it is attached, every call
    fails as if the store were down (``StateError(state_unavailable)``), so memory degrades meanwhile."""

    __slots__ = ("dialect", "inner")

    def __init__(self, dialect: str, inner: Database | None = None) -> None:
        self.dialect, self.inner = dialect, inner

    def _connected(self) -> Database:
        if self.inner is None:
            # SECURITY: no control state yet, no governed work; the caller degrades or refuses.
            raise StateError(Reason.STATE_UNAVAILABLE)
        return self.inner

    def tx(self, mode: Mode = "write") -> AbstractAsyncContextManager[Tx]:
        return self._connected().tx(mode)

    async def run(self, make: MakeScript[T], mode: Mode = "write") -> T:
        return await self._connected().run(make, mode)

    async def close(self) -> None:
        if self.inner is not None:
            await self.inner.close()


class GuardedDatabase:
    """A :class:`Database` that fails fast while the store is down and reports failures that look like an outage."""

    __slots__ = ("_health", "_inner", "dialect")

    def __init__(self, inner: Database, health: StoreHealth) -> None:
        self._inner, self._health = inner, health
        self.dialect = inner.dialect

    @property
    def inner(self) -> Database:
        """The unguarded connection(s): the health check itself goes through here."""
        return self._inner

    def tx(self, mode: Mode = "write") -> AbstractAsyncContextManager[Tx]:
        return self._tx(mode)

    @asynccontextmanager
    async def _tx(self, mode: Mode) -> AsyncIterator[Tx]:
        self._health.check()
        try:
            async with self._inner.tx(mode) as tx:
                yield tx
        except StateError as exc:
            if exc.reason is Reason.STATE_UNAVAILABLE:
                self._health.suspect()
            raise

    async def run(self, make: MakeScript[T], mode: Mode = "write") -> T:
        self._health.check()
        try:
            return await self._inner.run(make, mode)
        except StateError as exc:
            if exc.reason is Reason.STATE_UNAVAILABLE:
                self._health.suspect()
            raise

    async def close(self) -> None:
        await self._inner.close()
