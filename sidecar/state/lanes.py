"""Which lane a caller's state work runs in, and how long its statements may take.

Flags the database reads from the calling task's context (see ``sidecar.state.db``): the data
plane marks its calls with :func:`data_lane`, migrations and bulk loads mark theirs with
:func:`long_statements`. Handlers set a lane without importing the database itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Final

IN_DATA_LANE: ContextVar[bool] = ContextVar("memgov_state_data_lane", default=False)
LONG_STATEMENTS: ContextVar[bool] = ContextVar("memgov_state_long_statements", default=False)
#: The bound of a statement run under :func:`long_statements` (schema migrations).
LONG_STATEMENT_S: Final = 3600.0


@contextmanager
def _flagged(flag: ContextVar[bool]) -> Iterator[None]:
    token = flag.set(True)
    try:
        yield
    finally:
        flag.reset(token)


def data_lane() -> AbstractContextManager[None]:
    """Run the state work of the calls inside in the data lane (see ``sidecar.state.db`` on lanes)."""
    return _flagged(IN_DATA_LANE)


def long_statements() -> AbstractContextManager[None]:
    """Let the statements inside run for up to ``LONG_STATEMENT_S`` (schema migrations)."""
    return _flagged(LONG_STATEMENTS)
