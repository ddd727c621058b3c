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
from sidecar.state.db import Database

_OPEN = """
INSERT INTO budgets (kind, bkey, level, mark, at_us, expires_us) VALUES ('pwin', $1, 0, $2, $3, $2)
ON CONFLICT (kind, bkey) DO UPDATE SET level = 0, mark = excluded.mark, at_us = excluded.at_us,
  expires_us = excluded.expires_us
"""
CURRENT_WINDOW = "SELECT at_us FROM budgets WHERE kind = 'pwin' AND bkey = $1 AND mark > $2"


def window_key(scope_id: str) -> str:
    """The budgets key of a scope's prefetch window."""
    return codec.digest("pwin:" + scope_id)


class PrefetchOps:
    """Open and look up a scope's prefetch window."""

    _db: Database

    async def open_prefetch_window(self, scope_id: str, now: datetime, until: datetime) -> None:
        """Start a new window for the scope (a new conversation replaces the previous window)."""
        codec.check_scope_id(scope_id)
        async with self._db.tx("write") as tx:
            await tx.execute(_OPEN, window_key(scope_id), to_us(until), to_us(now))

    async def prefetch_window(self, scope_id: str, now: datetime) -> str | None:
        """An opaque id of the scope's open window (for its prefetch counter), or None."""
        async with self._db.tx("read") as tx:
            row = await tx.fetchrow(CURRENT_WINDOW, window_key(scope_id), to_us(now))
        return None if row is None else f"{scope_id}.{int(row[0])}"
