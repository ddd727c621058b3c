"""A UTC clock the stand-ins share, which tests and the admin API can move forward."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class DevClock:
    """Wall-clock UTC time plus an offset; ``frozen`` clocks only move through :meth:`advance`."""

    __slots__ = ("_frozen_at", "_offset")

    def __init__(self, start: datetime | None = None, *, frozen: bool = False) -> None:
        real = datetime.now(UTC)
        begin = start if start is not None else real
        self._frozen_at: datetime | None = begin if frozen else None
        self._offset = begin - real

    def __call__(self) -> datetime:
        if self._frozen_at is not None:
            return self._frozen_at
        return datetime.now(UTC) + self._offset

    def advance(self, seconds: float) -> None:
        """Move the clock forward (or back, with a negative value)."""
        step = timedelta(seconds=seconds)
        if self._frozen_at is not None:
            self._frozen_at += step
        self._offset += step
