"""Bounded history: a scope keeps only the rows still in play, and each erasure keeps its own evidence.

A rotation adds a namespace and a copy of every live entry; a forget-one tombstones one. Left
alone, a scope's ledger and namespaces grow with everything it ever forgot. Once a row is final
(physically deleted and verified, or a namespace cleared and read back empty) and no unfinished
erasure of its scope may still read it, ``compact_history`` copies what the scope's erasures show
of it onto their own rows (an entry's stamps; read-backs and rotations record their namespace
facts when written) and deletes it. Evidence reads the erasure's rows first, so it stays
complete for as long as the erasure record is kept.

Safe with several replicas sweeping at once: each scope is compacted in one transaction that
takes the scope's row lock (PostgreSQL ``FOR UPDATE``; SQLite's write lock) and checks that no
erasure of it is unfinished; ``create_erasure`` takes the same row's key-share lock, so an erasure
either sees the compacted scope or holds compaction off until it is finished. A namespace is
never compacted while a ledger row (a pending slot included) or an in-flight record names it,
or while a write of unknown outcome may still reach it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sidecar.state.codec import to_us, valid_scope_id
from sidecar.state.db import Facet, Param
from sidecar.state.ledger import ENTRY_COLS, by_entry_ids, entry_of, placeholders
from sidecar.state.scopes import update_lock
from sidecar.state.types import ERASURE_TERMINAL_SQL, LedgerEntry

#: A ledger row nothing will change any more: kagent no longer has it, and a read-back said so.
_FINAL = "l.expires_us IS NOT NULL AND l.deleted_us IS NOT NULL AND l.verified_us IS NOT NULL AND l.verified_us <= $2"
_UNFINISHED = f"SELECT 1 FROM erasures e WHERE e.scope_id = $1 AND e.state NOT IN ({ERASURE_TERMINAL_SQL})"
_SNAPSHOT_COLS = "generation, created_us, expires_us, tombstoned_us, deleted_us, verified_us, ns_id"
_DEAD_NAMESPACE = (
    "scope_id = $1 AND state = 'cleared' AND cleared_us <= $2"
    " AND (possibly_until_us IS NULL OR possibly_until_us <= $3)"
    " AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.ns_id = namespaces.ns_id)"
    " AND NOT EXISTS (SELECT 1 FROM inflight i WHERE i.ns_id = namespaces.ns_id)"
)


@dataclass
class Compaction:
    """Counts of one compaction pass (no ids)."""

    scopes: int = 0
    ledger_rows: int = 0
    namespaces: int = 0
    skipped_unfinished: int = 0


class HistoryOps(Facet):
    """Reads bounded by what is live, evidence that outlives the rows, and compaction."""

    async def entries_by_id(self, scope_id: str, entry_ids: list[str]) -> list[LedgerEntry]:
        """The scope's ledger rows of these ids (erased ones included), in no particular order."""
        ids = sorted(set(entry_ids))
        if not valid_scope_id(scope_id) or not ids:
            return []
        out: list[LedgerEntry] = []
        async with self._db.tx("read") as tx:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                rows = await tx.fetch(
                    f"SELECT {ENTRY_COLS} FROM {by_entry_ids(ENTRY_COLS, 2, len(chunk))}"
                    " WHERE scope_id = $1 AND expires_us IS NOT NULL",
                    scope_id,
                    *chunk,
                )
                out.extend(entry_of(r) for r in rows)
        return out

    async def unswept_entries(self, scope_id: str, ns_ids: list[str] | None = None) -> list[LedgerEntry]:
        """The scope's filled entries not yet verified gone (in ``ns_ids`` only, when given), oldest first.

        That is every entry not physically deleted, and any a run stamped deleted but stopped before
        stamping it verified (a read-back stamps it again). Found from a partial index of exactly
        those rows, never by walking the scope's history (hence no ORDER BY in the statement).
        """
        if not valid_scope_id(scope_id) or ns_ids == []:
            return []
        sql = f"SELECT {ENTRY_COLS} FROM ledger WHERE scope_id = $1 AND verified_us IS NULL AND expires_us IS NOT NULL"
        args: list[Param] = [scope_id]
        if ns_ids is not None:
            sql += f" AND ns_id IN ({placeholders(2, len(ns_ids))})"
            args.extend(ns_ids)
        rows = await self._fetch("read", sql, *args)
        return sorted((entry_of(r) for r in rows), key=lambda e: (e.created_at, e.entry_id))

    async def entry_counts(self, scope_id: str, live_ns: str | None, now: datetime) -> tuple[int, int]:
        """(readable entries of the live namespace, entries awaiting physical deletion) of the scope."""
        if not valid_scope_id(scope_id):
            return 0, 0
        row = await self._fetchrow(
            "read",
            "SELECT COALESCE(SUM(CASE WHEN ns_id = $2 AND tombstoned_us IS NULL AND expires_us > $3"
            " THEN 1 ELSE 0 END), 0), COUNT(*) FROM ledger"
            " WHERE scope_id = $1 AND verified_us IS NULL AND deleted_us IS NULL AND expires_us IS NOT NULL",
            scope_id,
            live_ns,
            to_us(now),
        )
        live, unswept = (int(row[0]), int(row[1])) if row is not None else (0, 0)
        return live, unswept - live

    async def evidence_entries(self, erasure_id: str) -> list[LedgerEntry]:
        """Each entry of an erasure as its evidence shows it: the ledger row, or the erasure's copy of it
        once the row was compacted (ids the ledger never filled are left out)."""
        kept = ", ".join(f"COALESCE(l.{c}, ee.{c})" for c in _SNAPSHOT_COLS.split(", "))
        rows = await self._fetch(
            "read",
            f"SELECT ee.entry_id, e.scope_id, {kept} FROM erasure_entries ee"
            " JOIN erasures e ON e.erasure_id = ee.erasure_id"
            " LEFT JOIN ledger l ON l.entry_id = ee.entry_id AND l.expires_us IS NOT NULL"
            " WHERE ee.erasure_id = $1",
            erasure_id,
        )
        # In ENTRY_COLS order: entry_id, scope_id, then the snapshot columns.
        return [entry_of(r) for r in rows if r[2] is not None and r[4] is not None]

    async def compact_history(self, now: datetime, older_than: datetime, limit: int = 500) -> Compaction:
        """Delete final ledger rows and cleared namespaces of scopes with no unfinished erasure.

        Only rows final since before ``older_than`` are taken; each erasure that names an entry keeps
        its stamps first. At most ``limit`` scopes per call.
        """
        cutoff, at = to_us(older_than), to_us(now)
        report = Compaction()
        rows = await self._fetch(
            "read",
            "SELECT scope_id FROM (SELECT l.scope_id FROM ledger l WHERE l.deleted_us IS NOT NULL"
            " AND l.verified_us IS NOT NULL AND l.verified_us <= $1"
            " UNION SELECT n.scope_id FROM namespaces n WHERE n.state = 'cleared' AND n.cleared_us <= $1) c"
            f" WHERE NOT EXISTS ({_UNFINISHED.replace('$1', 'c.scope_id')}) ORDER BY scope_id LIMIT $2",
            cutoff,
            limit,
        )
        for (scope_id,) in rows:
            done = await self._compact_scope(scope_id, cutoff, at)
            if done is None:
                report.skipped_unfinished += 1
                continue
            report.scopes += 1
            report.ledger_rows += done[0]
            report.namespaces += done[1]
        return report

    async def _compact_scope(self, scope_id: str, cutoff: int, at: int) -> tuple[int, int] | None:
        """Compact one scope in one transaction; None when an erasure of it is unfinished."""
        async with self._db.tx("write") as tx:
            await tx.fetchrow(f"SELECT 1 FROM scopes s WHERE s.scope_id = $1{update_lock(tx)}", scope_id)
            if await tx.fetchrow(_UNFINISHED, scope_id) is not None:
                return None
            # The evidence keeps what it showed of each entry before the row goes.
            await tx.execute(
                f"UPDATE erasure_entries SET ({_SNAPSHOT_COLS}) = (SELECT l.generation, l.created_us, l.expires_us,"
                " l.tombstoned_us, l.deleted_us, l.verified_us, l.ns_id FROM ledger l"
                " WHERE l.entry_id = erasure_entries.entry_id)"
                f" WHERE entry_id IN (SELECT l.entry_id FROM ledger l WHERE l.scope_id = $1 AND {_FINAL})",
                scope_id,
                cutoff,
            )
            ledger = await tx.execute(
                f"DELETE FROM ledger WHERE scope_id = $1 AND {_FINAL.replace('l.', '')}", scope_id, cutoff
            )
            namespaces = await tx.execute(f"DELETE FROM namespaces WHERE {_DEAD_NAMESPACE}", scope_id, cutoff, at)
        return ledger, namespaces
