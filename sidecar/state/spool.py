"""Audit records written while the state store is down: kept in a bounded local spool, replayed on recovery.

An audit row or refusal count that cannot be written because the store does not answer is kept
here, already checked by the codec (codes, opaque ids and times only, like the row it becomes), and
written with its original time once the store answers again. The spool holds at most ``max_rows``
audit rows and ``max_rows`` refusal-count keys (a count key absorbs any number of refusals of one
hour, operation and reason). Anything beyond that is counted in ``memgov_audit_spool_dropped_total``
and logged: nothing is lost without being counted.

With a :class:`~sidecar.state.journal.Journal` (``audit.spool_dir``) every spooled record is also
in its file before the answer is sent, so it outlives the process: one that stops, or is killed,
with the store down leaves its segment for the next process to replay (``journal.py``), exactly
once. A process that stops with records still spooled reports them, by kind: left in the folder
(``memgov_audit_spool_left_total``, log ``audit.spool_left``: lost only if the folder goes too, as
an emptyDir with its pod) or, without a journal or where it could not write, dropped
(``memgov_audit_spool_dropped_total``, log ``audit.spool_dropped``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from pathlib import Path
from typing import Final

from sidecar import metrics
from sidecar.logs import get_logger
from sidecar.state.db import Database, Param, Tx
from sidecar.state.journal import MARK_SEGMENT, Journal, read_segment

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

    __slots__ = ("_counts", "_flushing", "_journal", "_rows", "_volatile", "_volatile_counts", "max_rows")

    def __init__(self, max_rows: int, journal: Journal | None = None) -> None:
        self.max_rows = max_rows
        self._rows: deque[tuple[Param, ...]] = deque()
        self._counts: dict[CountKey, int] = {}
        self._flushing = asyncio.Lock()
        self._journal = journal
        self._volatile = 0  # rows kept in memory only: the journal could not take them
        self._volatile_counts = 0  # refusals likewise
        self._publish()

    def __len__(self) -> int:
        return len(self._rows) + sum(self._counts.values())

    def snapshot(self) -> tuple[list[tuple[Param, ...]], dict[CountKey, int]]:
        """A copy of what waits: the audit rows and the refusal counts (for inspection; nothing is taken)."""
        return list(self._rows), dict(self._counts)

    def _publish(self) -> None:
        metrics.AUDIT_SPOOLED.set(len(self))

    def _drop(self, kind: str, n: int) -> None:
        metrics.AUDIT_SPOOL_DROPPED.labels(kind).inc(n)
        _log.error("audit.spool_dropped", kind=kind, count=n)

    def add_row(self, values: tuple[Param, ...]) -> None:
        """Keep one audit row (the values of ``INSERT_AUDIT``) until the store answers."""
        if len(self._rows) >= self.max_rows:
            self._drop("audit", 1)
            return
        if self._journal is not None:
            try:
                self._journal.append_row(values)
            except OSError as exc:
                self._volatile += 1
                _log.error("audit.spool_write_failed", error_type=type(exc).__name__)
        self._rows.append(values)
        self._publish()

    def add_count(self, key: CountKey, n: int = 1) -> None:
        """Keep ``n`` refusals of one hour, operation and reason until the store answers."""
        if key not in self._counts and len(self._counts) >= self.max_rows:
            self._drop("refusal_count", n)
            return
        if self._journal is not None:
            try:
                if not self._journal.add_count(key, n):
                    self._drop("refusal_count", n)
                    return
            except OSError as exc:
                self._volatile_counts += n
                _log.error("audit.spool_write_failed", error_type=type(exc).__name__)
        self._counts[key] = self._counts.get(key, 0) + n
        self._publish()

    async def flush(self, db: Database) -> int:
        """Write everything spooled in one transaction; return how many records landed (0 when empty).

        Raises StateError when the store failed: then nothing was written and everything stays spooled.
        """
        async with self._flushing:
            segments: list[str] = []
            if self._journal is not None:
                try:
                    # The records spooled so far are exactly those of the sealed segments (no await between).
                    segments = self._journal.seal()
                except OSError as exc:
                    _log.error("audit.spool_write_failed", error_type=type(exc).__name__)
            rows, counts = list(self._rows), dict(self._counts)
            volatile, volatile_counts = self._volatile, self._volatile_counts
            if not rows and not counts and not segments:
                return 0
            async with db.tx("write") as tx:
                for segment_id in segments:
                    await tx.execute(MARK_SEGMENT, segment_id, _now_us())
                await _insert(tx, rows, counts)
            if self._journal is not None:
                self._journal.replayed(segments)
            self._volatile -= volatile
            self._volatile_counts -= volatile_counts
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

    async def replay_orphans(self, db: Database) -> int:
        """Write the segments that processes which died left in the journal's folder; return how many records
        landed. Raises StateError when the store failed: the segment stays for the next try."""
        if self._journal is None:
            return 0
        landed = 0
        for path in self._journal.orphans():
            with self._journal.orphan(path) as fd:
                if fd is None:
                    continue  # a live process's own segment
                try:
                    rows, counts, bad = read_segment(fd)
                except OSError as exc:
                    _log.error("audit.spool_read_failed", error_type=type(exc).__name__)
                    continue  # left for a later try; the others go on
                async with db.tx("write") as tx:
                    fresh = await tx.execute(MARK_SEGMENT, path.stem, _now_us()) == 1
                    if fresh:
                        await _insert(tx, rows, counts)
                with contextlib.suppress(OSError):  # left behind, it is only removed next time: its id is marked
                    path.unlink()
            if fresh:
                if bad:
                    self._drop("audit", bad)
                n = len(rows) + sum(counts.values())
                landed += n
                metrics.AUDIT_WRITES.labels("replayed").inc(n)
                _log.info("audit.spool_replayed", count=n)
        return landed

    def lose(self) -> int:
        """The process stops with records still spooled: report them. Those on disk stay there for the next
        process to replay (counted as left); the rest are counted as dropped. Return how many were dropped."""
        rows, counts = len(self._rows), sum(self._counts.values())
        lost_rows, lost_counts = rows, counts
        if self._journal is not None:
            lost_rows, lost_counts = self._volatile, self._volatile_counts
            try:
                self._journal.close()
            except OSError as exc:
                _log.error("audit.spool_write_failed", error_type=type(exc).__name__)
                lost_rows, lost_counts = rows, counts
            for kind, n in (("audit", rows - lost_rows), ("refusal_count", counts - lost_counts)):
                if n:
                    metrics.AUDIT_SPOOL_LEFT.labels(kind).inc(n)
                    _log.warning("audit.spool_left", kind=kind, count=n)
        if lost_rows:
            self._drop("audit", lost_rows)
        if lost_counts:
            self._drop("refusal_count", lost_counts)
        self._rows.clear()
        self._counts.clear()
        self._volatile = self._volatile_counts = 0
        self._publish()
        return lost_rows + lost_counts


def open_journal(folder: Path | None, max_rows: int) -> Journal | None:
    """The journal in ``folder`` (None: spool in memory only), with at most ``max_rows`` count lines.

    A folder that cannot be used is logged and the spool stays in memory: the gateway runs on, it
    only loses the spool's durability."""
    if folder is None:
        return None
    try:
        return Journal(folder, max_count_lines=max_rows)
    except OSError as exc:
        _log.error("audit.spool_dir_unusable", error_type=type(exc).__name__)
        return None


async def _insert(tx: Tx, rows: list[tuple[Param, ...]], counts: dict[CountKey, int]) -> None:
    if rows:
        await tx.executemany(INSERT_AUDIT, rows)
    if counts:
        await tx.executemany(UPSERT_COUNT, [(*key, n) for key, n in sorted(counts.items())])


def _now_us() -> int:
    return time.time_ns() // 1000
