"""Scopes, consent and fencing: the generation is the fencing token every memory call carries.

Atomicity: grant, withdraw and disable change the scope row and (for consent) append a receipt
in one transaction. ``begin_write`` reads the scope under a share lock (PostgreSQL ``FOR SHARE``;
SQLite's write lock) and records the in-flight row in the same transaction, so a withdrawal
either sees that row (and erasure waits for it) or the write is refused as stale.
"""

from __future__ import annotations

from datetime import datetime

from sidecar.reasons import Reason
from sidecar.state import codec
from sidecar.state.codec import AGENT_MAX, CODE_MAX, MXID_MAX, PURPOSE_MAX, ROOM_MAX, from_us, opt_from_us, to_us
from sidecar.state.db import Database, Row, Tx
from sidecar.state.types import Fenced, Receipt, Scope, StateError

_SCOPE_COLS = (
    "scope_id, principal_mxid, origin, agent, kind, room_id, enabled, generation, purpose, policy_version,"
    " created_us, updated_us, consented_us"
)
_RECEIPT_COLS = "receipt_id, scope_id, action, purpose, policy_version, generation_after, at_us"


def _scope(r: Row) -> Scope:
    return Scope(
        scope_id=r[0], principal_mxid=r[1], origin=r[2], agent=r[3], kind=r[4], room_id=r[5], enabled=bool(r[6]),
        generation=int(r[7]), purpose=r[8], policy_version=r[9], created_at=from_us(r[10]),
        updated_at=from_us(r[11]), consented_at=opt_from_us(r[12]),
    )


def _receipt(r: Row) -> Receipt:
    return Receipt(
        receipt_id=r[0], scope_id=r[1], action=r[2], purpose=r[3], policy_version=r[4],
        generation_after=int(r[5]), at=from_us(r[6]),
    )


def _triple(mxid: str, origin: str, agent: str, kind: str, room_id: str) -> tuple[str, str, str, str, str]:
    return (
        codec.check_bounded(mxid, "principal_mxid", MXID_MAX),
        codec.check_code(origin, "origin"),
        codec.check_bounded(agent, "agent", AGENT_MAX),
        codec.check_code(kind, "kind"),
        codec.check_bounded(room_id, "room_id", ROOM_MAX, allow_empty=True),
    )


def share_lock(tx: Tx) -> str:
    """Row-lock clause that blocks a concurrent consent change (SQLite's write lock already does)."""
    return " FOR SHARE" if tx.dialect == "postgresql" else ""


def update_lock(tx: Tx) -> str:
    """Row-lock clause that serializes writers of one scope."""
    return " FOR UPDATE" if tx.dialect == "postgresql" else ""


async def fence(tx: Tx, scope_id: str, generation: int, lock: str) -> None:
    """Raise Fenced unless the scope exists, is at ``generation`` and is enabled."""
    row = await tx.fetchrow(f"SELECT enabled, generation FROM scopes WHERE scope_id = $1{lock}", scope_id)
    if row is None:
        raise Fenced(Reason.CONSENT_MISSING)
    if int(row[1]) != generation:
        raise Fenced(Reason.STALE_GENERATION)
    if not row[0]:
        raise Fenced(Reason.CONSENT_DISABLED)


def valid_scope_id(scope_id: str) -> bool:
    """True when ``scope_id`` has the stored shape (anything else cannot name a scope)."""
    try:
        codec.check_scope_id(scope_id)
    except ValueError:
        return False
    return True


class ScopeOps:
    """Scope records, consent receipts and in-flight write leases."""

    _db: Database

    async def create_scope(
        self, mxid: str, origin: str, agent: str, kind: str, room_id: str, now: datetime
    ) -> tuple[Scope, bool]:
        """Create a disabled scope at generation 0; the same triple again returns the existing one."""
        triple, at = _triple(mxid, origin, agent, kind, room_id), to_us(now)
        async with self._db.tx("write") as tx:
            row = await tx.fetchrow(
                "INSERT INTO scopes (scope_id, principal_mxid, origin, agent, kind, room_id, enabled, generation,"
                " created_us, updated_us) VALUES ($1, $2, $3, $4, $5, $6, FALSE, 0, $7, $7)"
                f" ON CONFLICT (principal_mxid, origin, agent, kind, room_id) DO NOTHING RETURNING {_SCOPE_COLS}",
                codec.new_id("s"), *triple, at,
            )
            if row is not None:
                return _scope(row), True
            row = await tx.fetchrow(
                f"SELECT {_SCOPE_COLS} FROM scopes WHERE principal_mxid = $1 AND origin = $2 AND agent = $3"
                " AND kind = $4 AND room_id = $5", *triple,
            )
        if row is None:  # pragma: no cover - the conflicting row is committed before ON CONFLICT yields
            raise StateError(Reason.STATE_UNAVAILABLE)
        return _scope(row), False

    async def get_scope(self, scope_id: str) -> Scope | None:
        """Return the scope, or None when unknown."""
        if not valid_scope_id(scope_id):
            return None
        async with self._db.tx("read") as tx:
            row = await tx.fetchrow(f"SELECT {_SCOPE_COLS} FROM scopes WHERE scope_id = $1", scope_id)
        return None if row is None else _scope(row)

    async def find_scope(self, mxid: str, origin: str, agent: str, kind: str, room_id: str) -> Scope | None:
        """Return the scope of exactly this triple, or None."""
        triple = _triple(mxid, origin, agent, kind, room_id)
        async with self._db.tx("read") as tx:
            row = await tx.fetchrow(
                f"SELECT {_SCOPE_COLS} FROM scopes WHERE principal_mxid = $1 AND origin = $2 AND agent = $3"
                " AND kind = $4 AND room_id = $5", *triple,
            )
        return None if row is None else _scope(row)

    async def scopes_for_principal(self, mxid: str) -> list[Scope]:
        """Every scope of one MXID (any origin, agent, room), oldest first; used by offboarding."""
        codec.check_bounded(mxid, "principal_mxid", MXID_MAX)
        async with self._db.tx("read") as tx:
            rows = await tx.fetch(
                f"SELECT {_SCOPE_COLS} FROM scopes WHERE principal_mxid = $1 ORDER BY created_us, scope_id", mxid
            )
        return [_scope(r) for r in rows]

    async def has_enabled_scope(self, agent: str) -> bool:
        """True when at least one scope of this agent is enabled."""
        codec.check_bounded(agent, "agent", AGENT_MAX)
        async with self._db.tx("read") as tx:
            row = await tx.fetchrow("SELECT 1 FROM scopes WHERE agent = $1 AND enabled LIMIT 1", agent)
        return row is not None

    async def _consent(
        self, scope_id: str, now: datetime, *, enable: bool, receipt: bool,
        purpose: str | None = None, policy_version: str | None = None,
    ) -> tuple[Scope, Receipt | None]:
        at = to_us(now)
        if not valid_scope_id(scope_id):
            raise StateError(Reason.NOT_FOUND)
        async with self._db.tx("write") as tx:
            # The row lock taken by UPDATE waits for every begin_write holding a share lock.
            row = await tx.fetchrow(
                "UPDATE scopes SET enabled = $2, generation = generation + 1, updated_us = $3,"
                " purpose = COALESCE($4, purpose), policy_version = COALESCE($5, policy_version),"
                " consented_us = CASE WHEN $2 THEN $3 ELSE consented_us END"
                f" WHERE scope_id = $1 RETURNING {_SCOPE_COLS}",
                scope_id, enable, at, purpose, policy_version,
            )
            if row is None:
                raise StateError(Reason.NOT_FOUND)
            scope = _scope(row)
            if not receipt:
                return scope, None
            rrow = await tx.fetchrow(
                f"INSERT INTO receipts ({_RECEIPT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_RECEIPT_COLS}",
                codec.new_id("r"), scope_id, "grant" if enable else "withdraw", scope.purpose or "",
                scope.policy_version or "", scope.generation, at,
            )
        assert rrow is not None
        return scope, _receipt(rrow)

    async def grant(self, scope_id: str, purpose: str, policy_version: str, now: datetime) -> tuple[Scope, Receipt]:
        """Enable the scope for ``purpose`` under ``policy_version``: generation+1 and a receipt, atomically."""
        codec.check_bounded(purpose, "purpose", PURPOSE_MAX)
        codec.check_bounded(policy_version, "policy_version", CODE_MAX)
        scope, receipt = await self._consent(scope_id, now, enable=True, receipt=True, purpose=purpose,
                                             policy_version=policy_version)
        assert receipt is not None
        return scope, receipt

    async def withdraw(self, scope_id: str, now: datetime) -> tuple[Scope, Receipt]:
        """Disable the scope: generation+1 and a withdraw receipt, atomically."""
        scope, receipt = await self._consent(scope_id, now, enable=False, receipt=True)
        assert receipt is not None
        return scope, receipt

    async def disable(self, scope_id: str, now: datetime) -> Scope:
        """Fence the scope without a consent change (erasure 'off', offboarding): disable, generation+1."""
        scope, _ = await self._consent(scope_id, now, enable=False, receipt=False)
        return scope

    async def advance_generation(self, scope_id: str, now: datetime) -> Scope:
        """Fence in-flight work without a consent change (forget-all): generation+1, enabled as it was."""
        if not valid_scope_id(scope_id):
            raise StateError(Reason.NOT_FOUND)
        async with self._db.tx("write") as tx:
            # Same row lock as a consent change, so a begin_write either precedes it or is fenced.
            row = await tx.fetchrow(
                "UPDATE scopes SET generation = generation + 1, updated_us = $2 WHERE scope_id = $1"
                f" RETURNING {_SCOPE_COLS}", scope_id, to_us(now),
            )
        if row is None:
            raise StateError(Reason.NOT_FOUND)
        return _scope(row)

    async def receipts(self, scope_id: str) -> list[Receipt]:
        """Every consent receipt of the scope, oldest first."""
        if not valid_scope_id(scope_id):
            return []
        async with self._db.tx("read") as tx:
            rows = await tx.fetch(
                f"SELECT {_RECEIPT_COLS} FROM receipts WHERE scope_id = $1 ORDER BY generation_after", scope_id
            )
        return [_receipt(r) for r in rows]

    async def begin_write(self, scope_id: str, generation: int, lease_s: float, now: datetime) -> str:
        """Check the fence and record an in-flight write in one step; return its op id."""
        if not valid_scope_id(scope_id):
            raise Fenced(Reason.CONSENT_MISSING)
        at, op_id = to_us(now), codec.new_id("w")
        async with self._db.tx("write") as tx:
            await fence(tx, scope_id, generation, share_lock(tx))
            await tx.execute(
                "INSERT INTO inflight (op_id, scope_id, generation, started_us, lease_us) VALUES ($1, $2, $3, $4, $5)",
                op_id, scope_id, generation, at, at + int(lease_s * 1_000_000),
            )
        return op_id

    async def end_write(self, op_id: str) -> None:
        """Drop an in-flight record (finished or abandoned write); unknown ids are ignored."""
        async with self._db.tx("single") as tx:
            await tx.execute("DELETE FROM inflight WHERE op_id = $1", op_id)

    async def inflight_count(self, scope_id: str, now: datetime, generation: int | None = None) -> int:
        """Count unexpired in-flight writes of the scope (optionally of one generation)."""
        async with self._db.tx("read") as tx:
            row = await tx.fetchrow(
                "SELECT COUNT(*) FROM inflight WHERE scope_id = $1 AND lease_us > $2"
                " AND (CAST($3 AS BIGINT) IS NULL OR generation = $3)",
                scope_id, to_us(now), generation,
            )
        return int(row[0]) if row else 0
