"""The gateway's sense of time: one callable, handed to every part that needs "now"."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeAlias

#: What every part is given to read the time with (tests hand in a clock they can move).
Clock: TypeAlias = Callable[[], datetime]


def utcnow() -> datetime:
    """The wall clock, in UTC."""
    return datetime.now(UTC)
