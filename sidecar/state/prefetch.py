"""Prefetch windows: the first-turn searches of a new conversation, shared by all replicas.

kagent's memory calls carry no conversation id, so the gateway opens a window for a scope when
it forwards a new conversation's invocation; searches inside the window are prefetch (counted
against the per-conversation prefetch limit), later ones are explicit loads (rate-limited).
Windows live in the budgets table (kind ``pwin``), so the expiry purge already removes them.
"""

from __future__ import annotations

from datetime import datetime

from sidecar.state import codec
from sidecar.state.codec import to_us
from sidecar.state.db import Facet, Script, fetchrow

_OPEN = """
INSERT INTO budgets (kind, bkey, level, mark, at_us, expires_us) VALUES ('pwin', $1, 0, $2, $3, $2)
ON CONFLICT (kind, bkey) DO UPDATE SET level = 0, mark = excluded.mark, at_us = excluded.at_us,
  expires_us = excluded.expires_us
"""
_CURRENT = "SELECT at_us FROM budgets WHERE kind = 'pwin' AND bkey = $1 AND mark > $2"


#: The scope's open window joined to a read of the scope, as one more column (``w.at_us``): its
#: key is the statement's ``$2`` (``window_key``) and the time ``$3``. At most one row joins.
WINDOW_JOIN = " LEFT JOIN budgets w ON w.kind = 'pwin' AND w.bkey = $2 AND w.mark > $3"


def window_key(scope_id: str) -> str:
    return codec.digest("pwin:" + scope_id)


def window_id(scope_id: str, opened_us: int | None) -> str | None:
    """An opaque id of a scope's open window (for its prefetch counter) from its opening time; None if none is open."""
    return None if opened_us is None else f"{scope_id}.{int(opened_us)}"


def current_window(scope_id: str, now_us: int) -> Script[str | None]:
    """Script part: an opaque id of the scope's open window (for its prefetch counter), or None."""
    row = yield fetchrow(_CURRENT, window_key(scope_id), now_us)
    return None if row is None else window_id(scope_id, row[0])


class PrefetchOps(Facet):
    """Open and look up a scope's prefetch window."""

    async def open_prefetch_window(self, scope_id: str, now: datetime, until: datetime) -> None:
        """Start a new window for the scope (a new conversation replaces the previous window)."""
        codec.check_scope_id(scope_id)
        await self._execute("write", _OPEN, window_key(scope_id), to_us(until), to_us(now))

    async def prefetch_window(self, scope_id: str, now: datetime) -> str | None:
        """An opaque id of the scope's open window (for its prefetch counter), or None."""
        now_us = to_us(now)
        return await self._db.run(lambda: current_window(scope_id, now_us), "read")
