"""Content-free figures about the state an operator watches: erasures by state and age, expiry backlog.

Failed erasures are counted only while no later verified erasure supersedes them (``audit.superseding``).

Counts and ages only, read in one snapshot; no id, scope or entry ever leaves this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sidecar.state.audit import superseding
from sidecar.state.codec import to_us
from sidecar.state.db import Database, Row
from sidecar.state.types import ERASURE_STATES, ERASURE_TERMINAL_SQL

# A failed erasure a later verified one supersedes (a retry of it, a whole-scope erasure) is no longer
# failed to an operator: it is left out, so the alert on it clears once the erasure is retried.
_BY_STATE = (
    f"SELECT e.state, COUNT(*) FROM erasures e WHERE e.state <> 'failed' OR {superseding('e')} IS NULL GROUP BY e.state"
)
_OLDEST_UNFINISHED = f"SELECT MIN(created_us) FROM erasures WHERE state NOT IN ({ERASURE_TERMINAL_SQL})"
# Entries past their hard expiry that are not physically deleted yet (the sweeper's backlog).
_OLDEST_OVERDUE = "SELECT MIN(expires_us) FROM ledger WHERE deleted_us IS NULL AND expires_us <= $1"


@dataclass(frozen=True)
class StateGauges:
    """One reading."""

    erasures: dict[str, int]
    oldest_unfinished_erasure_s: float
    oldest_overdue_expiry_s: float


async def read_gauges(db: Database, now: datetime) -> StateGauges:
    """Read the figures; raises StateError(state_unavailable) when the backend does not answer."""
    now_us = to_us(now)
    async with db.tx("snapshot") as tx:
        by_state = {str(state): int(count) for state, count in await tx.fetch(_BY_STATE)}
        unfinished = await tx.fetchrow(_OLDEST_UNFINISHED)
        overdue = await tx.fetchrow(_OLDEST_OVERDUE, now_us)

    def age(row: Row | None) -> float:
        return max(0.0, (now_us - int(row[0])) / 1e6) if row is not None and row[0] is not None else 0.0

    return StateGauges({s: by_state.get(s, 0) for s in ERASURE_STATES}, age(unfinished), age(overdue))
