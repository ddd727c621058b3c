"""Namespace rotation in the state store: freeze, stage, copy leases and the one-transaction switch.

A rotation (issue 16) re-saves a scope's live entries into a fresh namespace so the old one can
be deleted whole over kagent's REST API. What must be atomic happens here:

- ``freeze_namespace`` takes the scope's row lock as a consent change does, so a save either
  recorded its in-flight row before (the quiesce step sees it) or is refused as stale;
- a ``staged`` namespace belongs to one rotation; copies into it hold in-flight rows taken under
  the scope's share lock, so a withdrawal racing the copy either waits for them or stops it;
- ``switch_rotation`` retires the frozen namespace, makes the staged one live, records the copies
  in the ledger with their original hard expiry and tombstones the originals in one transaction,
  and only when nothing reached the old namespace that the copy missed.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from sidecar.identity.keys import new_salt
from sidecar.reasons import Reason
from sidecar.state import codec
from sidecar.state.codec import to_us
from sidecar.state.db import Facet, Param, Tx
from sidecar.state.namespaces import NS_COLS, namespace_of
from sidecar.state.scopes import share_lock, update_lock
from sidecar.state.types import ERASURE_TERMINAL_SQL, Namespace, RunTaken, StateError

SwitchOutcome = Literal["switched", "superseded", "retry"]
#: One copied entry: old id, new id (None when kagent no longer held the row), created, hard expiry.
Move = tuple[str, str | None, datetime, datetime]


async def _abandon(tx: Tx, erasure_id: str, at: int) -> None:
    """Retire the rotation's staged namespace (the sweeper clears it) and forget its uncommitted copies.

    A copy still under way there keeps the namespace possibly written until its lease ends.
    """
    await tx.execute(
        "UPDATE namespaces SET state = 'retired', retired_us = $2, possibly_until_us = COALESCE("
        "(SELECT MAX(i.lease_us) FROM inflight i WHERE i.ns_id = namespaces.ns_id AND i.lease_us > $2),"
        " possibly_until_us) WHERE rotation_id = $1 AND state = 'staged'",
        erasure_id,
        at,
    )
    await tx.execute("DELETE FROM erasure_moves WHERE erasure_id = $1", erasure_id)


async def _staged(tx: Tx, erasure_id: str, ns_id: str) -> bool:
    """Whether ``ns_id`` is (still) the namespace this rotation has staged."""
    row = await tx.fetchrow(
        "SELECT 1 FROM namespaces WHERE ns_id = $1 AND rotation_id = $2 AND state = 'staged'", ns_id, erasure_id
    )
    return row is not None


async def _frozen(tx: Tx, erasure_id: str, lock: str) -> tuple[str, str, int] | None:
    """(namespace id, scope id, generation) of the live namespace this rotation froze, scope locked."""
    row = await tx.fetchrow(
        "SELECT n.ns_id, s.scope_id, n.generation FROM scopes s JOIN namespaces n ON n.scope_id = s.scope_id"
        f" WHERE n.frozen_by = $1 AND n.state = 'live' AND s.enabled{lock}",
        erasure_id,
    )
    return None if row is None else (row[0], row[1], int(row[2]))


async def _count(tx: Tx, sql: str, *args: Param) -> int:
    row = await tx.fetchrow(sql, *args)
    return int(row[0]) if row else 0


class RotationOps(Facet):
    """Rotation steps that must be atomic: freeze, stage, copy leases, switch, release."""

    async def freeze_namespace(self, scope_id: str, erasure_id: str) -> Namespace | None:
        """Freeze the scope's live namespace for this rotation; None when it has none or another rotation holds it."""
        async with self._db.tx("write") as tx:
            # The row lock a consent change takes: a begin_write holding the share lock finishes first.
            row = await tx.fetchrow(f"SELECT s.enabled FROM scopes s WHERE s.scope_id = $1{update_lock(tx)}", scope_id)
            if row is None or not row[0]:
                return None
            frozen = await tx.fetchrow(
                "UPDATE namespaces SET frozen_by = $2 WHERE scope_id = $1 AND state = 'live'"
                f" AND (frozen_by IS NULL OR frozen_by = $2) RETURNING {NS_COLS}",
                scope_id,
                erasure_id,
            )
            if frozen is not None:
                # Kept on the rotation itself: its evidence names the source after the namespace row is compacted.
                await tx.execute("UPDATE erasures SET from_ns_id = $2 WHERE erasure_id = $1", erasure_id, frozen[0])
        return None if frozen is None else namespace_of(frozen)

    async def rotation_namespaces(self, erasure_id: str) -> list[Namespace]:
        """Every namespace a rotation froze or staged, oldest first."""
        rows = await self._fetch(
            "read",
            f"SELECT {NS_COLS} FROM namespaces WHERE frozen_by = $1 OR rotation_id = $1 ORDER BY created_us, ns_id",
            erasure_id,
        )
        return [namespace_of(r) for r in rows]

    async def stage_namespace(self, scope_id: str, erasure_id: str, now: datetime) -> Namespace:
        """Abandon any namespace the rotation staged before and stage a fresh one; StateError(stale_generation)
        when the frozen namespace is no longer the scope's live one."""
        at = to_us(now)
        async with self._db.tx("write") as tx:
            await _abandon(tx, erasure_id, at)
            frozen = await _frozen(tx, erasure_id, share_lock(tx))
            if frozen is None or frozen[1] != scope_id:
                raise StateError(Reason.STALE_GENERATION)
            row = await tx.fetchrow(
                "INSERT INTO namespaces (ns_id, scope_id, generation, salt, state, created_us, rotation_id)"
                f" VALUES ($1, $2, $3, $4, 'staged', $5, $6) RETURNING {NS_COLS}",
                codec.new_id("n"),
                scope_id,
                frozen[2],
                new_salt(),
                at,
                erasure_id,
            )
        assert row is not None
        return namespace_of(row)

    async def begin_copy(self, erasure_id: str, ns_id: str, lease_s: float, now: datetime) -> tuple[str, Namespace]:
        """Record an in-flight copy into the namespace ``ns_id`` this runner staged: (op id, namespace).

        StateError(stale_generation) while the scope changed since the freeze: a withdrawal then never misses the copy.
        RunTaken when ``ns_id`` is no longer the rotation's staged namespace (another runner restaged):
        a copy is only ever made into the namespace whose moves its runner records.
        """
        at, op_id = to_us(now), codec.new_id("w")
        async with self._db.tx("write") as tx:
            frozen = await _frozen(tx, erasure_id, share_lock(tx))
            staged = await tx.fetchrow(
                f"SELECT {NS_COLS} FROM namespaces WHERE rotation_id = $1 AND state = 'staged'", erasure_id
            )
            if frozen is None:
                raise StateError(Reason.STALE_GENERATION)
            ns = None if staged is None else namespace_of(staged)
            if ns is None or ns.ns_id != ns_id:
                raise RunTaken()
            await tx.execute(
                "INSERT INTO inflight (op_id, scope_id, generation, started_us, lease_us, ns_id)"
                " VALUES ($1, $2, $3, $4, $5, $6)",
                op_id,
                ns.scope_id,
                ns.generation,
                at,
                at + int(lease_s * 1_000_000),
                ns.ns_id,
            )
        return op_id, ns

    async def record_moves(self, erasure_id: str, ns_id: str, moves: Iterable[Move]) -> None:
        """Remember copies made into the staged namespace (they enter the ledger only at the switch).

        RunTaken when ``ns_id`` is no longer staged for this rotation: its copies are then abandoned
        with it (the sweeper clears the namespace) and never recorded as moves.
        """
        rows = [
            (
                erasure_id,
                codec.check_id(old, "entry_id"),
                None if new is None else codec.check_id(new, "entry_id"),
                ns_id,
                to_us(created),
                to_us(expires),
            )
            for old, new, created, expires in moves
        ]
        async with self._db.tx("write") as tx:
            if not await _staged(tx, erasure_id, ns_id):
                raise RunTaken()
            await tx.executemany(
                "INSERT INTO erasure_moves (erasure_id, old_entry_id, new_entry_id, ns_id, created_us, expires_us)"
                " VALUES ($1, $2, $3, $4, $5, $6)",
                rows,
            )

    async def switch_rotation(self, erasure_id: str, ns_id: str, now: datetime) -> SwitchOutcome:
        """Switch the scope to ``ns_id``, the namespace this runner staged and copied into, in one transaction.

        ``superseded`` when the scope moved on (consent changed, rotation released); ``retry`` when an
        entry was forgotten, or a save landed, since the copy began (the copy must be redone). RunTaken
        when ``ns_id`` is no longer the staged one. Only the moves recorded into ``ns_id`` count.
        """
        at = to_us(now)
        async with self._db.tx("write") as tx:
            frozen = await _frozen(tx, erasure_id, update_lock(tx))
            staged = await tx.fetchrow(
                "SELECT ns_id, generation FROM namespaces WHERE rotation_id = $1 AND state = 'staged'", erasure_id
            )
            if frozen is None:
                return "superseded"
            if staged is None or staged[0] != ns_id:
                raise RunTaken()
            if int(staged[1]) != frozen[2]:
                return "superseded"
            old, scope_id, new = frozen[0], frozen[1], staged[0]
            running = await _count(
                tx, "SELECT COUNT(*) FROM inflight WHERE ns_id = $1 AND lease_us > $2 AND NOT outcome_unknown", old, at
            )
            forgotten = await _count(
                tx,
                "SELECT COUNT(*) FROM erasure_moves m JOIN ledger l ON l.entry_id = m.old_entry_id"
                " WHERE m.erasure_id = $1 AND m.ns_id = $2 AND l.tombstoned_us IS NOT NULL",
                erasure_id,
                new,
            )
            # SECURITY: a live entry the copy did not carry over would be lost while its save said 201.
            missed = await _count(
                tx,
                "SELECT COUNT(*) FROM ledger l WHERE l.ns_id = $1 AND l.tombstoned_us IS NULL"
                " AND l.deleted_us IS NULL AND l.expires_us > $2 AND NOT EXISTS (SELECT 1 FROM erasure_moves m"
                " WHERE m.erasure_id = $3 AND m.ns_id = $4 AND m.old_entry_id = l.entry_id)",
                old,
                at,
                erasure_id,
                new,
            )
            if running or forgotten or missed:
                return "retry"
            await tx.execute("UPDATE namespaces SET state = 'retired', retired_us = $2 WHERE ns_id = $1", old, at)
            await tx.execute("UPDATE namespaces SET state = 'live' WHERE ns_id = $1", new)
            copies = await tx.fetch(
                "SELECT new_entry_id, created_us, expires_us FROM erasure_moves WHERE erasure_id = $1"
                " AND ns_id = $2 AND new_entry_id IS NOT NULL",
                erasure_id,
                new,
            )
            # The copies keep their original creation time and hard expiry: a rotation never extends one.
            await tx.executemany(
                "INSERT INTO ledger (slot_id, scope_id, generation, entry_id, created_us, expires_us, ns_id)"
                " VALUES ($1, $2, $3, $4, $5, $6, $7)",
                [(codec.new_id("l"), scope_id, frozen[2], r[0], int(r[1]), int(r[2]), new) for r in copies],
            )
            # What this rotation erases rather than moves: forgotten, expired, and rows kagent no longer had.
            await tx.execute(
                "INSERT INTO erasure_entries (erasure_id, entry_id) SELECT $3, l.entry_id FROM ledger l"
                " WHERE l.ns_id = $2 AND l.expires_us IS NOT NULL AND l.deleted_us IS NULL AND NOT EXISTS"
                " (SELECT 1 FROM erasure_moves m WHERE m.erasure_id = $1 AND m.ns_id = $4"
                " AND m.old_entry_id = l.entry_id AND m.new_entry_id IS NOT NULL)",
                erasure_id,
                old,
                erasure_id,
                new,
            )
            await tx.execute(
                "UPDATE ledger SET tombstoned_us = $2 WHERE ns_id = $1 AND tombstoned_us IS NULL"
                " AND expires_us IS NOT NULL",
                old,
                at,
            )
            await tx.execute(
                "UPDATE erasures SET ns_id = $2, updated_us = $3 WHERE erasure_id = $1", erasure_id, new, at
            )
        return "switched"

    async def release_rotation(self, erasure_id: str, now: datetime) -> None:
        """End a rotation that will not switch: unfreeze the live namespace, abandon what it staged."""
        async with self._db.tx("write") as tx:
            await tx.execute(
                "UPDATE namespaces SET frozen_by = NULL WHERE frozen_by = $1 AND state = 'live'", erasure_id
            )
            await _abandon(tx, erasure_id, to_us(now))

    async def touch_erasure(self, erasure_id: str, now: datetime) -> None:
        """Show that a long step is still being worked on (the sweeper resumes only stalled erasures)."""
        await self._execute(
            "single",
            f"UPDATE erasures SET updated_us = $2 WHERE erasure_id = $1 AND state NOT IN ({ERASURE_TERMINAL_SQL})",
            erasure_id,
            to_us(now),
        )
