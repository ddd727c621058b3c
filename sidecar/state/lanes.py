"""Which lane a caller's state work runs in, and how long its statements may take.

Flags the database reads from the calling task's context (see ``sidecar.state.db``): the data
plane marks its calls with :func:`data_lane`, migrations and bulk loads mark theirs with
:func:`long_statements`. Handlers set a lane without importing the database itself.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from typing import Final

IN_DATA_LANE: ContextVar[bool] = ContextVar("memgov_state_data_lane", default=False)
LONG_STATEMENTS: ContextVar[bool] = ContextVar("memgov_state_long_statements", default=False)
#: The bound of a statement run under :func:`long_statements` (schema migrations).
LONG_STATEMENT_S: Final = 3600.0


class _Flagged(AbstractContextManager[None]):
    """Sets a flag for the block (a class, not a generator: the data plane enters one per request)."""

    __slots__ = ("_flag", "_token")

    def __init__(self, flag: ContextVar[bool]) -> None:
        self._flag = flag
        self._token: Token[bool] | None = None

    def __enter__(self) -> None:
        self._token = self._flag.set(True)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            self._flag.reset(self._token)
            self._token = None


def data_lane() -> AbstractContextManager[None]:
    """Run the state work of the calls inside in the data lane (see ``sidecar.state.db`` on lanes)."""
    return _Flagged(IN_DATA_LANE)


def long_statements() -> AbstractContextManager[None]:
    """Let the statements inside run for up to ``LONG_STATEMENT_S`` (schema migrations)."""
    return _Flagged(LONG_STATEMENTS)
