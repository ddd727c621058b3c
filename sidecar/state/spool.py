"""Audit records written while the state store is down: kept in a bounded local spool, replayed on recovery.

An audit row or refusal count that cannot be written because the store does not answer is kept
here, already checked by the codec (codes, opaque ids and times only, like the row it becomes), and
written with its original time once the store answers again. The spool holds at most ``max_rows``
audit rows and ``max_rows`` refusal-count keys (a count key absorbs any number of refusals of one
hour, operation and reason). Anything beyond that, or still spooled when the process stops with
the store down, is counted in ``memgov_audit_spool_dropped_total`` and logged: nothing is lost
without being counted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Final

from sidecar import metrics
from sidecar.logs import get_logger
from sidecar.state.db import Database

_log = get_logger("state")

INSERT_AUDIT: Final = (
    "INSERT INTO audit (at_us, kind, reason, decision_id, scope_id, entry_id, erasure_id, operation, policy_revision)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
)
UPSERT_COUNT: Final = (
    "INSERT INTO audit_counts AS c (hour_us, operation, reason, n) VALUES ($1, $2, $3, $4)"
    " ON CONFLICT (hour_us, operation, reason) DO UPDATE SET n = c.n + EXCLUDED.n"
)
#: (hour in microseconds, operation, reason) of a refusal count.
CountKey = tuple[int, str, str]


class AuditSpool:
    """Audit rows and refusal counts waiting for the store, bounded; overflow is counted, never silent."""

    __slots__ = ("_counts", "_flushing", "_rows", "max_rows")

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._rows: deque[tuple[Any, ...]] = deque()
        self._counts: dict[CountKey, int] = {}
        self._flushing = asyncio.Lock()
        self._publish()

    def __len__(self) -> int:
        return len(self._rows) + sum(self._counts.values())

    def snapshot(self) -> tuple[list[tuple[Any, ...]], dict[CountKey, int]]:
        """A copy of what waits: the audit rows and the refusal counts (for inspection; nothing is taken)."""
        return list(self._rows), dict(self._counts)

    def _publish(self) -> None:
        metrics.AUDIT_SPOOLED.set(len(self))

    def _drop(self, kind: str, n: int) -> None:
        metrics.AUDIT_SPOOL_DROPPED.labels(kind).inc(n)
        _log.error("audit.spool_dropped", kind=kind, count=n)

    def add_row(self, values: tuple[Any, ...]) -> None:
        """Keep one audit row (the values of ``INSERT_AUDIT``) until the store answers."""
        if len(self._rows) >= self.max_rows:
            self._drop("audit", 1)
            return
        self._rows.append(values)
        self._publish()

    def add_count(self, key: CountKey, n: int = 1) -> None:
        """Keep ``n`` refusals of one hour, operation and reason until the store answers."""
        if key not in self._counts and len(self._counts) >= self.max_rows:
            self._drop("refusal_count", n)
            return
        self._counts[key] = self._counts.get(key, 0) + n
        self._publish()

    async def flush(self, db: Database) -> int:
        """Write everything spooled in one transaction; return how many records landed (0 when empty).

        Raises StateError when the store failed: then nothing was written and everything stays spooled.
        """
        async with self._flushing:
            rows, counts = list(self._rows), dict(self._counts)
            if not rows and not counts:
                return 0
            async with db.tx("write") as tx:
                if rows:
                    await tx.executemany(INSERT_AUDIT, rows)
                if counts:
                    await tx.executemany(UPSERT_COUNT, [(*key, n) for key, n in sorted(counts.items())])
            for _ in rows:  # rows spooled during the write were appended after these
                self._rows.popleft()
            for key, n in counts.items():
                left = self._counts[key] - n
                if left:
                    self._counts[key] = left
                else:
                    del self._counts[key]
            landed = len(rows) + sum(counts.values())
            metrics.AUDIT_WRITES.labels("replayed").inc(landed)
            self._publish()
            _log.info("audit.spool_replayed", count=landed)
            return landed

    def lose(self) -> int:
        """The process stops with records still spooled: count them as dropped; return how many."""
        rows, counts = len(self._rows), sum(self._counts.values())
        if rows:
            self._drop("audit", rows)
        if counts:
            self._drop("refusal_count", counts)
        self._rows.clear()
        self._counts.clear()
        self._publish()
        return rows + counts
