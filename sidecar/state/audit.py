"""Content-free evidence: audit records with their own retention, and erasure state machines.

Audit rows hold a kind, a reason code, opaque ids and a policy revision; every value is checked
against its shape before it is written. Erasures move forward one state at a time
(``types.ERASURE_NEXT``) with a conditional update, so two replicas resuming the same erasure
after a crash cannot both advance it, and every step is kept with its time as evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sidecar.reasons import Reason
from sidecar.settings import AdapterName
from sidecar.state import codec
from sidecar.state.codec import from_us, opt_from_us, to_us
from sidecar.state.db import Database, Facet, Param, Row, Tx
from sidecar.state.spool import INSERT_AUDIT, UPSERT_COUNT, AuditSpool
from sidecar.state.types import (
    ERASURE_NEXT,
    ERASURE_TERMINAL_SQL,
    WHOLE_SCOPE,
    Erasure,
    ErasureFilter,
    ErasureKind,
    ErasureState,
    ErasureSummary,
    StateError,
)

_AUDIT_COLS = (
    "at",
    "kind",
    "reason",
    "decision_id",
    "scope_id",
    "entry_id",
    "erasure_id",
    "operation",
    "policy_revision",
)
_ERASURE_COLS = (
    "erasure_id, scope_id, kind, state, adapter, requested_by_kind, failure_reason, created_us,"
    " updated_us, not_before_us, ns_id, from_ns_id, retry_of"
)
_HOUR_US = 3600 * 1_000_000
_WHOLE_SCOPE_SQL = ", ".join(f"'{k}'" for k in sorted(WHOLE_SCOPE))


def superseding(e: str) -> str:
    """SQL: the first verified erasure that supersedes the failed erasure aliased ``e``, or NULL.

    A failure is superseded by a verified erasure of the same scope that covers what it left: a retry
    of its chain (the same kind and entries), or one created after it that erases the whole scope;
    a failed rotation also by a later verified rotation (which moves everything out of the namespace
    the failed one left live). The one rule for the failed gauge, the re-consent guard and listings.
    """
    return (
        f"(SELECT v.erasure_id FROM erasures v WHERE v.scope_id = {e}.scope_id AND v.state = 'verified'"
        f" AND (v.retry_of = COALESCE({e}.retry_of, {e}.erasure_id) OR (v.created_us > {e}.created_us"
        f" AND (v.kind IN ({_WHOLE_SCOPE_SQL}) OR ({e}.kind = 'rotate' AND v.kind = 'rotate'))))"
        " ORDER BY v.created_us, v.erasure_id LIMIT 1)"
    )


def _opt(value: str | None, check: Callable[[str, str], str], field: str) -> str | None:
    return None if value is None else check(value, field)


def _outage(exc: StateError) -> bool:
    return exc.reason is Reason.STATE_UNAVAILABLE and type(exc) is StateError


class AuditOps(Facet):
    """Audit records and hourly refusal counts; what the store cannot take now waits in the spool."""

    def __init__(self, db: Database, spool: AuditSpool) -> None:
        super().__init__(db)
        self.spool = spool

    async def audit(
        self,
        kind: str,
        reason: str,
        *,
        decision_id: str | None = None,
        scope_id: str | None = None,
        entry_id: str | None = None,
        erasure_id: str | None = None,
        operation: str | None = None,
        policy_revision: str | None = None,
        now: datetime,
    ) -> None:
        """Append one content-free audit record; while the store is down it waits in the spool."""
        values = (
            to_us(now),
            codec.check_code(kind, "kind"),
            codec.check_reason(reason),
            _opt(decision_id, codec.check_id, "decision_id"),
            _opt(scope_id, codec.check_id, "scope_id"),
            _opt(entry_id, codec.check_id, "entry_id"),
            _opt(erasure_id, codec.check_id, "erasure_id"),
            _opt(operation, codec.check_code, "operation"),
            _opt(policy_revision, codec.check_id, "policy_revision"),
        )
        try:
            await self._execute("single", INSERT_AUDIT, *values)
        except StateError as exc:
            if not _outage(exc):
                raise
            self.spool.add_row(values)

    async def count_refusal(self, operation: str, reason: str, now: datetime) -> None:
        """Count one refusal that carried no valid credential (R-15): one row per hour, operation and reason.

        While the store is down the count waits in the spool."""
        hour = to_us(now) // _HOUR_US * _HOUR_US
        key = (hour, codec.check_code(operation, "operation"), codec.check_reason(reason))
        try:
            await self._execute("single", UPSERT_COUNT, *key, 1)
        except StateError as exc:
            if not _outage(exc):
                raise
            self.spool.add_count(key)

    async def refusal_counts(self) -> list[tuple[datetime, str, str, int]]:
        """Counted refusals: (hour, operation, reason, count), newest first."""
        rows = await self._fetch(
            "read", "SELECT hour_us, operation, reason, n FROM audit_counts ORDER BY hour_us DESC, operation, reason"
        )
        return [(from_us(r[0]), r[1], r[2], int(r[3])) for r in rows]

    async def audit_rows(self, scope_id: str | None = None, limit: int = 1000) -> list[dict[str, object]]:
        """The newest audit records (of one scope when given), newest first."""
        cols = "at_us, kind, reason, decision_id, scope_id, entry_id, erasure_id, operation, policy_revision"
        async with self._db.tx("read") as tx:
            if scope_id is None:
                rows = await tx.fetch(f"SELECT {cols} FROM audit ORDER BY at_us DESC, audit_id DESC LIMIT $1", limit)
            else:
                rows = await tx.fetch(
                    f"SELECT {cols} FROM audit WHERE scope_id = $1 ORDER BY at_us DESC, audit_id DESC LIMIT $2",
                    scope_id,
                    limit,
                )
        return [{"at": from_us(r[0]), **dict(zip(_AUDIT_COLS[1:], r[1:], strict=True))} for r in rows]

    async def purge_audit(self, older_than: datetime) -> int:
        """Delete audit records and refusal counts older than the retention cut-off; return how many records."""
        async with self._db.tx("single") as tx:
            await tx.execute("DELETE FROM audit_counts WHERE hour_us < $1", to_us(older_than) - _HOUR_US)
            await tx.execute("DELETE FROM audit_spool_segments WHERE replayed_us < $1", to_us(older_than))
            return await tx.execute("DELETE FROM audit WHERE at_us < $1", to_us(older_than))


class ErasureReads(Facet):
    """Erasure records as read: one with its entries and steps, a scope's, the failures an operator
    lists and retries, and the unfinished ones a start resumes."""

    async def get_erasure(self, erasure_id: str) -> Erasure | None:
        """Return the erasure with its entries and steps, or None."""
        async with self._db.tx("snapshot") as tx:
            return await _load(tx, erasure_id)

    async def erasures_of_scope(
        self, scope_id: str, limit: int = 100, *, kind: ErasureKind | None = None, not_kind: ErasureKind | None = None
    ) -> list[Erasure]:
        """The scope's erasures, newest first (status, and the re-consent guard); of ``kind`` only, or
        of every kind but ``not_kind``, when given."""
        async with self._db.tx("snapshot") as tx:
            rows = await tx.fetch(
                "SELECT erasure_id FROM erasures WHERE scope_id = $1"
                " AND (CAST($3 AS TEXT) IS NULL OR kind = $3) AND (CAST($4 AS TEXT) IS NULL OR kind <> $4)"
                " ORDER BY created_us DESC, erasure_id DESC LIMIT $2",
                scope_id,
                limit,
                kind,
                not_kind,
            )
            loaded = [await _load(tx, r[0]) for r in rows]
        return [e for e in loaded if e is not None]

    async def rotations_after(self, erasure: Erasure) -> list[Erasure]:
        """For a forget-one's evidence, newest first: the rotations that erased one of its entries, and the
        newest rotation of its scope since it (whatever the scope's history since, a handful of rows)."""
        async with self._db.tx("snapshot") as tx:
            rows = await tx.fetch(
                "SELECT e.erasure_id, e.created_us FROM erasures e WHERE e.kind = 'rotate' AND e.erasure_id IN"
                " (SELECT r.erasure_id FROM erasure_entries f JOIN erasure_entries r ON r.entry_id = f.entry_id"
                " WHERE f.erasure_id = $1 AND r.erasure_id <> $1) AND e.scope_id = $2"
                " UNION SELECT n.erasure_id, n.created_us FROM (SELECT erasure_id, created_us FROM erasures"
                " WHERE scope_id = $2 AND kind = 'rotate' AND created_us >= $3"
                " ORDER BY created_us DESC, erasure_id DESC LIMIT 1) n",
                erasure.erasure_id,
                erasure.scope_id,
                to_us(erasure.created_at),
            )
            loaded = [await _load(tx, r[0]) for r in sorted(rows, key=lambda r: (int(r[1]), r[0]), reverse=True)]
        return [e for e in loaded if e is not None]

    async def retry_head(self, erasure: Erasure) -> Erasure:
        """The newest erasure of ``erasure``'s chain of retries (the erasure itself when it has none)."""
        root = erasure.retry_of or erasure.erasure_id
        async with self._db.tx("snapshot") as tx:
            row = await tx.fetchrow(
                "SELECT erasure_id FROM erasures WHERE retry_of = $1 ORDER BY created_us DESC, erasure_id DESC LIMIT 1",
                root,
            )
            head = await _load(tx, row[0]) if row is not None else None
        return erasure if head is None or head.created_at < erasure.created_at else head

    async def superseded_by(self, erasure_id: str) -> str | None:
        """The verified erasure that supersedes a failed one, or None (also for one that is not failed)."""
        row = await self._fetchrow(
            "read",
            f"SELECT {superseding('e')} FROM erasures e WHERE e.erasure_id = $1 AND e.state = 'failed'",
            erasure_id,
        )
        return None if row is None or row[0] is None else str(row[0])

    async def open_failures(self, scope_id: str, *, not_kind: ErasureKind | None = None) -> int:
        """How many failed erasures of the scope no later verified erasure supersedes (every kind but ``not_kind``)."""
        row = await self._fetchrow(
            "read",
            "SELECT COUNT(*) FROM erasures e WHERE e.scope_id = $1 AND e.state = 'failed'"
            f" AND (CAST($2 AS TEXT) IS NULL OR e.kind <> $2) AND {superseding('e')} IS NULL",
            scope_id,
            not_kind,
        )
        return int(row[0]) if row is not None else 0

    async def list_erasures(
        self, which: ErasureFilter, limit: int, after: tuple[datetime, str] | None = None
    ) -> list[ErasureSummary]:
        """Erasures matching ``which``, newest first, at most ``limit``, those after the cursor ``after``
        (the creation time and id of the last one of the previous page). Ids, codes and times only."""
        where: list[str] = []
        args: list[Param] = []

        def arg(value: Param) -> str:
            args.append(value)
            return f"${len(args)}"

        if which.state is not None:
            where.append(f"e.state = {arg(str(which.state))}")
        if which.kind is not None:
            where.append(f"e.kind = {arg(str(which.kind))}")
        if which.scope_id is not None:
            where.append(f"e.scope_id = {arg(codec.check_scope_id(which.scope_id))}")
        if which.since is not None:
            where.append(f"e.created_us >= {arg(to_us(which.since))}")
        if which.until is not None:
            where.append(f"e.created_us < {arg(to_us(which.until))}")
        if after is not None:
            at, last = to_us(after[0]), codec.check_id(after[1], "cursor")
            where.append(f"(e.created_us < {arg(at)} OR (e.created_us = {arg(at)} AND e.erasure_id < {arg(last)}))")
        superseded = superseding("e")
        if which.superseded is True:
            where.append(f"e.state = 'failed' AND {superseded} IS NOT NULL")
        elif which.superseded is False:
            where.append(f"(e.state <> 'failed' OR {superseded} IS NULL)")
        cond = " AND ".join(where) or "TRUE"
        sql = (
            "SELECT e.erasure_id, e.scope_id, e.kind, e.state, e.adapter, e.requested_by_kind, e.failure_reason,"
            f" e.created_us, e.updated_us, e.retry_of, CASE WHEN e.state = 'failed' THEN {superseded} END"
            f" FROM erasures e WHERE {cond} ORDER BY e.created_us DESC, e.erasure_id DESC LIMIT {arg(int(limit))}"
        )
        rows = await self._fetch("snapshot", sql, *args)
        return [ErasureSummary(**_head(r), retry_of=r[9], superseded_by=r[10]) for r in rows]

    async def unfinished_erasures(self) -> list[Erasure]:
        """Erasures that are neither verified nor failed, oldest first (resumed on start)."""
        async with self._db.tx("snapshot") as tx:
            rows = await tx.fetch(
                f"SELECT erasure_id FROM erasures WHERE state NOT IN ({ERASURE_TERMINAL_SQL})"
                " ORDER BY created_us, erasure_id"
            )
            loaded = [await _load(tx, r[0]) for r in rows]
        return [e for e in loaded if e is not None]


class ErasureOps(ErasureReads):
    """Erasure records: created, advanced through their states, claimed by one runner at a time
    (and read, :class:`ErasureReads`)."""

    async def create_erasure(
        self,
        scope_id: str,
        kind: ErasureKind,
        entry_ids: list[str],
        adapter: AdapterName,
        requested_by_kind: str,
        now: datetime,
    ) -> Erasure:
        """Record a requested erasure of the given entries (empty for whole-scope erasures)."""
        erasure = await self._create(scope_id, kind, entry_ids, adapter, requested_by_kind, now, None)
        assert erasure is not None
        return erasure

    async def create_retry(
        self, failed: Erasure, entry_ids: list[str], adapter: AdapterName, requested_by_kind: str, now: datetime
    ) -> Erasure | None:
        """Record a retry of a failed erasure (same scope and kind); None when its chain already has an
        unfinished retry (another caller started one first)."""
        root = failed.retry_of or failed.erasure_id
        return await self._create(failed.scope_id, failed.kind, entry_ids, adapter, requested_by_kind, now, root)

    async def _create(
        self,
        scope_id: str,
        kind: ErasureKind,
        entry_ids: list[str],
        adapter: AdapterName,
        requested_by_kind: str,
        now: datetime,
        retry_of: str | None,
    ) -> Erasure | None:
        codec.check_scope_id(scope_id)
        codec.check_code(kind, "kind")
        codec.check_code(adapter, "adapter")
        codec.check_code(requested_by_kind, "requested_by_kind")
        if retry_of is not None:
            codec.check_id(retry_of, "retry_of")
        ids = sorted({codec.check_id(e, "entry_id") for e in entry_ids})
        erasure_id, at = codec.new_id("e"), to_us(now)
        async with self._db.tx("write") as tx:
            # History compaction holds the scope row (FOR UPDATE) while it runs: an erasure starts before or
            # after it. KEY SHARE, the lock the erasure row's foreign key takes anyway, waits for nothing else.
            key_share = " FOR KEY SHARE OF s" if tx.dialect == "postgresql" else ""
            await tx.fetchrow(f"SELECT 1 FROM scopes s WHERE s.scope_id = $1{key_share}", scope_id)
            # A retry conflicts with its chain's unfinished retry (a unique index): then nothing is written.
            created = await tx.execute(
                f"INSERT INTO erasures ({_ERASURE_COLS})"
                " VALUES ($1, $2, $3, 'requested', $4, $5, NULL, $6, $6, NULL, NULL, NULL, $7) ON CONFLICT DO NOTHING",
                erasure_id,
                scope_id,
                kind,
                adapter,
                requested_by_kind,
                at,
                retry_of,
            )
            if created != 1:
                return None
            if ids:
                await tx.executemany(
                    "INSERT INTO erasure_entries (erasure_id, entry_id) VALUES ($1, $2)", [(erasure_id, e) for e in ids]
                )
            await tx.execute(
                "INSERT INTO erasure_steps (erasure_id, seq, state, at_us) VALUES ($1, 0, 'requested', $2)",
                erasure_id,
                at,
            )
            return await _load(tx, erasure_id)

    async def advance_erasure(
        self, erasure_id: str, state: ErasureState, now: datetime, failure_reason: str | None = None
    ) -> Erasure:
        """Move an erasure to its next state; an illegal or lost transition raises StateError(internal_error)."""
        allowed_from = sorted(s for s, nxt in ERASURE_NEXT.items() if state in nxt)
        if not allowed_from or (failure_reason is not None) != (state == ErasureState.FAILED):
            raise ValueError("erasure transition is invalid")
        if failure_reason is not None:
            codec.check_reason(failure_reason, "failure_reason")
        at, sources = to_us(now), ", ".join(f"'{s}'" for s in allowed_from)
        async with self._db.tx("write") as tx:
            # The conditional update is the compare-and-set: a concurrent advancer finds no row.
            changed = await tx.execute(
                "UPDATE erasures SET state = $2, failure_reason = $3, updated_us = $4"
                f" WHERE erasure_id = $1 AND state IN ({sources})",
                erasure_id,
                state,
                failure_reason,
                at,
            )
            if changed != 1:
                raise StateError(Reason.INTERNAL_ERROR)
            await tx.execute(
                "INSERT INTO erasure_steps (erasure_id, seq, state, at_us)"
                " SELECT $4, COALESCE(MAX(seq), -1) + 1, $2, $3 FROM erasure_steps WHERE erasure_id = $1",
                erasure_id,
                state,
                at,
                erasure_id,
            )
            erasure = await _load(tx, erasure_id)
        assert erasure is not None
        return erasure

    async def record_readback(self, erasure_id: str, ns_id: str, remaining: int, what: str, now: datetime) -> None:
        """Keep one read-back of an erasure as evidence: the namespace, when, and how many rows were found."""
        codec.check_code(what, "what")
        # The namespace's generation and kind are kept with the read-back: evidence outlives the namespace row.
        await self._execute(
            "write",
            "INSERT INTO erasure_readbacks (erasure_id, seq, ns_id, at_us, remaining, scope_of_check,"
            " generation, legacy) SELECT $1, COALESCE(MAX(seq), -1) + 1, $2, $3, $4, $5,"
            " (SELECT n.generation FROM namespaces n WHERE n.ns_id = $7),"
            " (SELECT n.salt = '' FROM namespaces n WHERE n.ns_id = $7)"
            " FROM erasure_readbacks WHERE erasure_id = $6",
            erasure_id,
            codec.check_id(ns_id, "ns_id"),
            to_us(now),
            int(remaining),
            what,
            erasure_id,
            ns_id,
        )

    async def claim_erasure(self, erasure_id: str, runner: str, until: datetime, now: datetime) -> bool:
        """Take (or keep) the erasure's run lease for ``runner`` until ``until``: True when it is now ours.

        False while another runner's lease is unexpired, or once the erasure is verified or failed.
        The conditional update is the compare-and-set, so of two processes claiming at once one wins.
        """
        codec.check_id(runner, "runner")
        changed = await self._execute(
            "write",
            "UPDATE erasures SET runner = $2, runner_until_us = $3 WHERE erasure_id = $1"
            f" AND state NOT IN ({ERASURE_TERMINAL_SQL})"
            " AND (runner IS NULL OR runner = $2 OR runner_until_us <= $4)",
            erasure_id,
            runner,
            to_us(until),
            to_us(now),
        )
        return bool(changed == 1)

    async def renew_erasure(self, erasure_id: str, runner: str, until: datetime) -> bool:
        """Extend a run lease ``runner`` still holds; False when another runner took it (or it was released)."""
        changed = await self._execute(
            "write",
            "UPDATE erasures SET runner_until_us = $3 WHERE erasure_id = $1 AND runner = $2",
            erasure_id,
            codec.check_id(runner, "runner"),
            to_us(until),
        )
        return bool(changed == 1)

    async def release_erasure(self, erasure_id: str, runner: str) -> None:
        """Give up ``runner``'s run lease (a deferred or finished run); another runner may claim it at once."""
        await self._execute(
            "write",
            "UPDATE erasures SET runner = NULL, runner_until_us = NULL WHERE erasure_id = $1 AND runner = $2",
            erasure_id,
            codec.check_id(runner, "runner"),
        )

    async def defer_erasure(self, erasure_id: str, until: datetime | None) -> None:
        """Set (or clear) the time before which an erasure's verification must not run."""
        await self._execute(
            "single",
            "UPDATE erasures SET not_before_us = $2 WHERE erasure_id = $1",
            erasure_id,
            None if until is None else to_us(until),
        )


def _head(row: Row) -> dict[str, Any]:
    """The fields every erasure row starts with (``_ERASURE_COLS`` up to ``updated_us``), decoded."""
    return {
        "erasure_id": row[0],
        "scope_id": row[1],
        "kind": ErasureKind(row[2]),
        "state": ErasureState(row[3]),
        "adapter": AdapterName(row[4]),
        "requested_by_kind": row[5],
        "failure_reason": row[6],
        "created_at": from_us(row[7]),
        "updated_at": from_us(row[8]),
    }


async def _load(tx: Tx, erasure_id: str) -> Erasure | None:
    row = await tx.fetchrow(f"SELECT {_ERASURE_COLS} FROM erasures WHERE erasure_id = $1", erasure_id)
    if row is None:
        return None
    entries = await tx.fetch("SELECT entry_id FROM erasure_entries WHERE erasure_id = $1 ORDER BY entry_id", erasure_id)
    steps = await tx.fetch("SELECT state, at_us FROM erasure_steps WHERE erasure_id = $1 ORDER BY seq", erasure_id)
    readbacks = await tx.fetch(
        "SELECT ns_id, at_us, remaining, scope_of_check, generation, legacy FROM erasure_readbacks"
        " WHERE erasure_id = $1 ORDER BY seq",
        erasure_id,
    )
    moves = (
        await tx.fetch(
            "SELECT old_entry_id, new_entry_id FROM erasure_moves WHERE erasure_id = $1"
            " ORDER BY created_us, old_entry_id",
            erasure_id,
        )
        if row[2] == "rotate"
        else []
    )
    return Erasure(
        **_head(row),
        not_before=opt_from_us(row[9]),
        entry_ids=[r[0] for r in entries],
        steps=[(r[0], from_us(r[1])) for r in steps],
        readbacks=[(r[0], from_us(r[1]), int(r[2]), r[3]) for r in readbacks],
        ns_id=row[10],
        moves=[(r[0], r[1]) for r in moves],
        ns_facts={r[0]: (int(r[4]), bool(r[5])) for r in readbacks if r[4] is not None and r[5] is not None},
        from_ns_id=row[11],
        retry_of=row[12],
    )
