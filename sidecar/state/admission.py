"""Admitting a governed memory call in one transaction, and finishing a save in one more.

A save used to cost a scope read, a budget reservation, a count, a slot reservation and an
in-flight record (five transactions) before kagent was called, and three after. Admission now
reads the scope under its row lock, checks it is live at the presented generation, reserves the
budget claims, counts the scope's entries and, for a save, reserves the ledger slots and records
the in-flight write, all in one transaction: the same checks ``fence``, ``reserve_entries`` and
``begin_write`` make, on the same locked row, so no guarantee moves. The policy decides
afterwards on the facts the transaction saw; a denial gives the reservation back
(``release_write``). Nothing is cached between calls: every admission reads the database.

A refused budget claim rolls the whole transaction back (no claim is half spent) and the facts
are read again without reserving anything, so the policy still sees the scope and the count.
On PostgreSQL a search's admission runs without an explicit transaction: its scope read is one
statement and its claims are one round trip that rolls itself back when a claim does not fit
(``budgets.reserve(declining=True)``), so BEGIN and COMMIT would only add two round trips.
"""

from __future__ import annotations

import math
from datetime import datetime
from functools import lru_cache

from sidecar.reasons import Reason
from sidecar.state import codec
from sidecar.state.budgets import ClaimRefused, reserve
from sidecar.state.codec import to_us, valid_scope_id
from sidecar.state.db import Facet, MakeScript, Mode, Param, Script, execute, executemany, fetchrow
from sidecar.state.ledger import COUNTS, SLOT_LEASE_S
from sidecar.state.prefetch import WINDOW_JOIN, window_key
from sidecar.state.prefetch import window_id as open_window
from sidecar.state.scopes import SCOPE_COLUMNS, SCOPE_FROM, SCOPE_SELECT, scope_of_row
from sidecar.state.types import Admission, Claims, StateError, WriteAsk

_SCOPE = f"{SCOPE_SELECT} WHERE s.scope_id = $1"
#: A search reads the scope and its open prefetch window in one statement.
_WITH_WINDOW = f"SELECT {SCOPE_COLUMNS}, w.at_us FROM {SCOPE_FROM}{WINDOW_JOIN} WHERE s.scope_id = $1"
_WINDOW_AT = SCOPE_COLUMNS.count(",") + 1  # the column after the scope's


def _admit(
    scope_id: str,
    generation: int | None,
    claims: Claims,
    now_us: int,
    *,
    window: bool,
    write: WriteAsk | None,
    reserving: bool,
    lock: str,
    combined: bool,
) -> Script[Admission]:
    if window:
        # A search reads the prefetch window in the same statement as its scope.
        row = yield fetchrow(_WITH_WINDOW + lock, scope_id, window_key(scope_id), now_us)
    else:
        row = yield fetchrow(_SCOPE + lock, scope_id)
    scope = scope_of_row(row) if row is not None else None
    if scope is None or not scope.enabled or scope.generation != generation or scope.namespace is None:
        return Admission(scope)
    window_id = open_window(scope_id, row[_WINDOW_AT]) if window else None
    levels: dict[str, int] = {}
    if reserving:
        asked = claims(scope, window_id)
        reached = yield from reserve(asked, now_us, declining=combined)
        levels = {c.key: math.floor(level) for c, level in zip(asked, reached, strict=True)}
    if write is None:
        return Admission(scope, live=True, window=window_id, levels=levels)
    ns = scope.namespace
    slots, op_id = [codec.new_id("l") for _ in range(write.n)], codec.new_id("w")
    slot_lease, op_lease = now_us + SLOT_LEASE_S * 1_000_000, now_us + int(write.lease_s * 1_000_000)
    if combined and reserving and ns.frozen_by is None:
        # PostgreSQL: one round trip counts the entries (after the row lock above, so from a fresh
        # snapshot) and, when the cap admits them, writes the in-flight record and the slots.
        row = yield fetchrow(
            _counted_slots(write.n),
            scope_id,
            now_us,
            op_id,
            generation,
            op_lease,
            ns.ns_id,
            slot_lease,
            write.cap,
            *slots,
        )
        if row is None:
            raise StateError(Reason.INTERNAL_ERROR)
        live_count, made = min(int(row[0]), write.cap + 1), int(row[1])
        if made == 0:
            return Admission(scope, live=True, live_count=live_count, blocked=Reason.ENTRY_CAP_REACHED, levels=levels)
        if made != write.n:
            raise StateError(Reason.INTERNAL_ERROR)
        return Admission(scope, live=True, live_count=live_count, slots=slots, op_id=op_id, levels=levels)
    counts = yield fetchrow(COUNTS, scope_id, now_us)
    # Reported up to the cap + 1: every comparison with the cap comes out the same.
    live_count, held = (min(int(counts[0]), write.cap + 1), int(counts[1])) if counts is not None else (0, 0)
    if not reserving:
        return Admission(scope, live=True, live_count=live_count)
    if ns.frozen_by is not None:
        # SECURITY: a rotation is copying the namespace: write nowhere it could leave behind.
        return Admission(scope, live=True, live_count=live_count, blocked=Reason.STALE_GENERATION, levels=levels)
    if held + write.n > write.cap:
        return Admission(scope, live=True, live_count=live_count, blocked=Reason.ENTRY_CAP_REACHED, levels=levels)
    yield executemany(
        "INSERT INTO ledger (slot_id, scope_id, generation, created_us, lease_us, ns_id)"
        " VALUES ($1, $2, $3, $4, $5, $6)",
        [(s, scope_id, generation, now_us, slot_lease, ns.ns_id) for s in slots],
    )
    yield execute(_OP, op_id, scope_id, generation, now_us, op_lease, ns.ns_id)
    return Admission(scope, live=True, live_count=live_count, slots=slots, op_id=op_id, levels=levels)


_OP = "INSERT INTO inflight (op_id, scope_id, generation, started_us, lease_us, ns_id) VALUES ($1, $2, $3, $4, $5, $6)"


@lru_cache(maxsize=16)
def _counted_slots(n: int) -> str:
    """PostgreSQL: the scope's counts ($1 scope, $2 now, as ``COUNTS``) and, when its held entries
    plus ``n`` stay within the cap $8, the in-flight record ($3 op, $4 generation, $5 its lease, $6
    namespace) and ``n`` slots ($9…, lease $7), in one statement. Answers the live count and how
    many slots it wrote (0 or ``n``)."""
    values = ", ".join(f"(${9 + i}::varchar)" for i in range(n))
    return (
        f"WITH k (live, held) AS ({COUNTS}),"
        f" ok AS (SELECT 1 AS one WHERE COALESCE((SELECT held FROM k), 0) + {n} <= $8),"
        " op AS (INSERT INTO inflight (op_id, scope_id, generation, started_us, lease_us, ns_id)"
        " SELECT $3::varchar, $1, $4::bigint, $2, $5::bigint, $6::varchar FROM ok RETURNING op_id),"
        " made AS (INSERT INTO ledger (slot_id, scope_id, generation, created_us, lease_us, ns_id)"
        " SELECT v.slot_id, $1, $4::bigint, $2, $7::bigint, $6::varchar"
        f" FROM (VALUES {values}) AS v (slot_id), op RETURNING 1)"
        " SELECT COALESCE((SELECT live FROM k), 0), (SELECT COUNT(*) FROM made)"
    )


def _release(slots: list[str], op_id: str) -> Script[None]:
    for slot in slots:
        yield execute("DELETE FROM ledger WHERE expires_us IS NULL AND slot_id = $1", slot)
    yield execute("DELETE FROM inflight WHERE op_id = $1", op_id)


_LIVE_NS = (
    "SELECT n.ns_id FROM scopes s LEFT JOIN namespaces n ON n.scope_id = s.scope_id AND n.state = 'live'"
    " WHERE s.scope_id = $1"
)
_END_IF_LIVE = (
    "DELETE FROM inflight WHERE op_id = $1 AND EXISTS (SELECT 1 FROM namespaces n"
    " WHERE n.scope_id = $2 AND n.ns_id = $3 AND n.state = 'live')"
)


def _finish(
    op_id: str, scope_id: str, ns_id: str, fills: list[tuple[str, str, int, int]], combined: bool
) -> Script[bool]:
    if combined and fills:
        # PostgreSQL: one round trip fills the slots and, when every one of them filled and the
        # namespace is still live, ends the in-flight record.
        args: list[Param] = [op_id, scope_id, ns_id]
        for fill in fills:
            args.extend(fill)
        row = yield fetchrow(_fill_and_end(len(fills)), *args)
        if row is None or int(row[0]) != len(fills):
            raise StateError(Reason.INTERNAL_ERROR)
        ended = int(row[1])
    else:
        for slot_id, entry_id, created, expires in fills:
            changed = yield execute(_FILL, slot_id, entry_id, created, expires)
            if changed != 1:
                raise StateError(Reason.INTERNAL_ERROR)
        # The in-flight record ends only while ``ns_id`` is still the scope's live namespace: one
        # statement checks and ends it.
        ended = yield execute(_END_IF_LIVE, op_id, scope_id, ns_id)
    if ended:
        return True
    # Nothing ended: the namespace was withdrawn or switched meanwhile (the in-flight record stays
    # until the undo is done), or the record was already gone while the namespace is live.
    row = yield fetchrow(_LIVE_NS, scope_id)
    return row is not None and row[0] == ns_id


_FILL = (
    "UPDATE ledger SET entry_id = $2, created_us = $3, expires_us = $4, lease_us = NULL"
    " WHERE slot_id = $1 AND expires_us IS NULL AND lease_us > $3"
)


@lru_cache(maxsize=16)
def _fill_and_end(n: int) -> str:
    """``n`` fills ($4… in fours) and the in-flight end ($1–$3) as ``_FILL`` and ``_END_IF_LIVE`` do,
    in one statement (PostgreSQL): it answers how many slots filled and whether the record ended."""
    values = ", ".join(
        f"(${4 + 4 * i}::varchar, ${5 + 4 * i}::varchar, ${6 + 4 * i}::bigint, ${7 + 4 * i}::bigint)" for i in range(n)
    )
    return (
        f"WITH v (slot_id, entry_id, created_us, expires_us) AS (VALUES {values}),"
        " filled AS (UPDATE ledger AS l SET entry_id = v.entry_id, created_us = v.created_us,"
        " expires_us = v.expires_us, lease_us = NULL FROM v"
        " WHERE l.slot_id = v.slot_id AND l.expires_us IS NULL AND l.lease_us > v.created_us RETURNING l.slot_id),"
        f" ended AS ({_END_IF_LIVE} AND (SELECT COUNT(*) FROM filled) = {n} RETURNING 1)"
        " SELECT (SELECT COUNT(*) FROM filled), (SELECT COUNT(*) FROM ended)"
    )


class AdmissionOps(Facet):
    """One transaction before kagent is called, one after."""

    async def admit(
        self,
        scope_id: str | None,
        generation: int | None,
        claims: Claims,
        now: datetime,
        *,
        window: bool = False,
        write: WriteAsk | None = None,
    ) -> Admission:
        """Read the scope and, when it is live at ``generation``, reserve ``claims`` (and a save's slots)."""
        if scope_id is None or not valid_scope_id(scope_id):
            return Admission(None)
        now_us = to_us(now)
        # The scope row lock serializes a scope's savers (as reserve_entries' does) and holds off a
        # consent change until the in-flight record is in (as begin_write's share lock does).
        pg = self._db.dialect == "postgresql"
        lock = " FOR UPDATE OF s" if write is not None and pg else ""

        def script(reserving: bool, lock: str) -> MakeScript[Admission]:
            return lambda: _admit(
                scope_id,
                generation,
                claims,
                now_us,
                window=window,
                write=write,
                reserving=reserving,
                lock=lock,
                combined=pg,
            )

        # PostgreSQL: a search's admission is one read and one round trip of claims that roll
        # themselves back when one does not fit: no transaction, so no BEGIN and COMMIT round trips.
        # A save's keeps its transaction (the scope's row lock must be held until its slots are in).
        mode: Mode = "single" if pg and write is None else "write"
        try:
            return await self._db.run(script(True, lock), mode)
        except ClaimRefused as refused:
            seen = await self._db.run(script(False, ""), "snapshot")
            return Admission(
                seen.scope, live=seen.live, refused=refused.reason, live_count=seen.live_count, window=seen.window
            )

    async def release_write(self, admission: Admission) -> None:
        """Give back an admitted save's slots and in-flight record (the policy refused it)."""
        if admission.op_id is not None:
            op_id = admission.op_id
            await self._db.run(lambda: _release(admission.slots, op_id), "single")

    async def finish_write(
        self, op_id: str, scope_id: str, ns_id: str, fills: list[tuple[str, str, datetime, datetime]]
    ) -> bool:
        """Bind the last slots to kagent's ids and, when ``ns_id`` is still the scope's live namespace,
        drop the in-flight record; False when it is not (the caller undoes the write, then ends it)."""
        rows = []
        for slot_id, entry_id, created_at, expires_at in fills:
            codec.check_id(entry_id, "entry_id")
            rows.append((slot_id, entry_id, to_us(created_at), to_us(expires_at)))
        combined = self._db.dialect == "postgresql"
        return await self._db.run(lambda: _finish(op_id, scope_id, ns_id, rows, combined), "single")
