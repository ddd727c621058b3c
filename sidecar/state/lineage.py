"""What rotations leave behind: the lineage of copied entries, the scopes due for one, their evidence's purge.

A rotation re-saves a scope's kept entries under new ids. An id shown before a rotation still
names its entry: ``lineage`` follows it to the current copy, and forgetting it tombstones every
copy (``tombstone_forgotten``). The sweepers ask which scopes need a rotation and purge the
evidence of finished ones after the audit retention.
"""

from __future__ import annotations

from datetime import datetime

from sidecar.state import codec
from sidecar.state.codec import to_us
from sidecar.state.db import Facet
from sidecar.state.ledger import placeholders
from sidecar.state.scopes import share_lock
from sidecar.state.types import ERASURE_TERMINAL_SQL

#: Longest chain of rotations followed from a forgotten id to its current copy.
_MAX_HOPS = 64
#: The copies a switched rotation of scope $1 made (the moves of one not yet switched are not copies yet).
#: Read from the rotation's own records, so a chain survives the compaction of the ledger rows in between.
_SWITCHED_MOVES = (
    "erasure_moves m JOIN erasures e ON e.erasure_id = m.erasure_id"
    " WHERE e.scope_id = $1 AND e.ns_id = m.ns_id AND m.new_entry_id IS NOT NULL"
)


class LineageOps(Facet):
    """The copies rotations made of entries, the sweepers' rotation candidates, and their evidence's retention."""

    async def tombstone_forgotten(
        self, scope_id: str, erasure_id: str, entry_ids: list[str], now: datetime
    ) -> list[str]:
        """Tombstone forgotten entries and every copy a rotation made of them; return all of them.

        The scope's share lock orders this against a rotation's switch: either the switch sees the
        tombstone (and copies again without the entry) or this sees the copy (and erases it too).
        The copies join the erasure's entries, so its evidence covers every copy.
        """
        ids = {codec.check_id(e, "entry_id") for e in entry_ids}
        async with self._db.tx("write") as tx:
            await tx.fetchrow(f"SELECT 1 FROM scopes s WHERE s.scope_id = $1{share_lock(tx)}", scope_id)
            frontier = set(ids)
            for _ in range(_MAX_HOPS):
                if not frontier:
                    break
                follow = placeholders(2, len(frontier))
                rows = await tx.fetch(
                    f"SELECT m.new_entry_id FROM {_SWITCHED_MOVES} AND m.old_entry_id IN ({follow})",
                    scope_id,
                    *frontier,
                )
                frontier = {r[0] for r in rows} - ids
                ids |= frontier
            added = ids - set(entry_ids)
            if added:
                await tx.executemany(
                    "INSERT INTO erasure_entries (erasure_id, entry_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    [(erasure_id, e) for e in sorted(added)],
                )
            await tx.execute(
                "UPDATE ledger SET tombstoned_us = $2 WHERE scope_id = $1 AND tombstoned_us IS NULL"
                f" AND entry_id IN ({placeholders(3, len(ids))})",
                scope_id,
                to_us(now),
                *sorted(ids),
            )
        return sorted(ids)

    async def lineage(self, scope_id: str, entry_id: str) -> list[str]:
        """``entry_id`` followed by each copy a rotation made of it, oldest first (the last is current)."""
        chain = [entry_id]
        async with self._db.tx("read") as tx:
            for _ in range(_MAX_HOPS):
                row = await tx.fetchrow(
                    f"SELECT m.new_entry_id FROM {_SWITCHED_MOVES} AND m.old_entry_id = $2",
                    scope_id,
                    chain[-1],
                )
                if row is None:
                    break
                chain.append(row[0])
        return chain

    async def rotation_candidates(self, now: datetime, expired_before: datetime, limit: int) -> list[str]:
        """Scopes whose live namespace must be rotated: it holds a forgotten or rolled-back entry, or one
        expired before ``expired_before``, that kagent still has; or it is legacy (unsalted).

        Found from the ledger rows and namespaces that need it (partial indexes), never by scanning scopes.
        """
        rows = await self._fetch(
            "read",
            "SELECT n.scope_id FROM namespaces n WHERE n.state = 'live' AND n.frozen_by IS NULL AND n.ns_id IN ("
            "SELECT l.ns_id FROM ledger l WHERE l.deleted_us IS NULL AND l.expires_us <= $1"
            " UNION SELECT l.ns_id FROM ledger l WHERE l.tombstoned_us IS NOT NULL AND l.deleted_us IS NULL)"
            " UNION SELECT n.scope_id FROM namespaces n WHERE n.state = 'live' AND n.salt = ''"
            " AND n.frozen_by IS NULL LIMIT $2",
            to_us(min(now, expired_before)),
            limit,
        )
        return [r[0] for r in rows]

    async def purge_erasures(self, older_than: datetime) -> int:
        """Delete evidence past its retention: finished rotations, and verified forget-ones whose every entry
        was physically deleted (with their steps, read-backs, moves). Whole-scope erasures and failed
        forget-ones stay: they decide whether a scope may be consented again."""
        done = (
            f"updated_us < $1 AND ((kind = 'rotate' AND state IN ({ERASURE_TERMINAL_SQL}))"
            " OR (kind = 'forget_one' AND state = 'verified' AND NOT EXISTS (SELECT 1 FROM erasure_entries ee"
            " LEFT JOIN ledger l ON l.entry_id = ee.entry_id WHERE ee.erasure_id = erasures.erasure_id"
            " AND COALESCE(l.deleted_us, ee.deleted_us) IS NULL)))"
        )
        async with self._db.tx("write") as tx:
            for table in ("erasure_moves", "erasure_steps", "erasure_readbacks", "erasure_entries"):
                await tx.execute(
                    f"DELETE FROM {table} WHERE erasure_id IN (SELECT erasure_id FROM erasures WHERE {done})",
                    to_us(older_than),
                )
            return await tx.execute(f"DELETE FROM erasures WHERE {done}", to_us(older_than))
