"""Scopes, consent and fencing: the generation is the fencing token every memory call carries.

Atomicity: grant, withdraw and disable change the scope row, switch its storage namespace and
(for consent) append a receipt in one transaction, so the live namespace always belongs to the
current generation of an enabled scope. ``begin_write`` reads the scope under a share lock
(PostgreSQL ``FOR SHARE``; SQLite's write lock) and records the in-flight row in the same
transaction, so a withdrawal either sees that row (and erasure waits for it) or the write is
refused as stale.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sidecar.identity.keys import new_salt
from sidecar.reasons import Reason
from sidecar.state import codec
from sidecar.state.codec import (
    AGENT_MAX,
    CODE_MAX,
    MXID_MAX,
    PURPOSE_MAX,
    ROOM_MAX,
    Columns,
    to_us,
    valid_scope_id,
)
from sidecar.state.db import Facet, Row, Tx
from sidecar.state.types import Namespace, Receipt, Scope, StateError

_SCOPE: Final = Columns(Scope, omit=("namespace",))
#: A live namespace as a scope row joins it: its scope and state are the scope's and ``live``.
_LIVE_NAMESPACE: Final = Columns(Namespace, omit=("scope_id", "state", "retired_at", "cleared_at", "rotation_id"))
_RECEIPT: Final = Columns(Receipt)
#: scope_id, principal_mxid, origin, agent, kind, room_id, enabled, generation, purpose, policy_version,
#: created_us, updated_us, consented_us
_SCOPE_COLS: Final = _SCOPE.select()
#: A scope's columns and its live namespace's (ns_id, generation, salt, possibly_until_us, created_us,
#: frozen_by; none while disabled), in the order ``scope_of_row`` reads them.
SCOPE_COLUMNS: Final = f"{_SCOPE.select('s.')}, {_LIVE_NAMESPACE.select('n.')}"
SCOPE_FROM = "scopes s LEFT JOIN namespaces n ON n.scope_id = s.scope_id AND n.state = 'live'"
SCOPE_SELECT = f"SELECT {SCOPE_COLUMNS} FROM {SCOPE_FROM}"
#: receipt_id, scope_id, action, purpose, policy_version, generation_after, at_us
_RECEIPT_COLS: Final = _RECEIPT.select()
_NS_AT: Final = len(_SCOPE)


def scope_of_row(r: Row) -> Scope:
    namespace = None
    if r[_NS_AT] is not None:
        namespace = _LIVE_NAMESPACE.read(r, _NS_AT, scope_id=r[0], state="live")
    return _SCOPE.read(r, namespace=namespace)


def _receipt(r: Row) -> Receipt:
    return _RECEIPT.read(r)


def _triple(mxid: str, origin: str, agent: str, kind: str, room_id: str) -> tuple[str, str, str, str, str]:
    return (
        codec.check_bounded(mxid, "principal_mxid", MXID_MAX),
        codec.check_code(origin, "origin"),
        codec.check_bounded(agent, "agent", AGENT_MAX),
        codec.check_code(kind, "kind"),
        codec.check_bounded(room_id, "room_id", ROOM_MAX, allow_empty=True),
    )


def share_lock(tx: Tx) -> str:
    """Row-lock clause (on the scope row ``s``) that blocks a concurrent consent change.

    SQLite's write lock already does.
    """
    return " FOR SHARE OF s" if tx.dialect == "postgresql" else ""


def update_lock(tx: Tx) -> str:
    """Row-lock clause (on the scope row ``s``) that serializes writers of one scope."""
    return " FOR UPDATE OF s" if tx.dialect == "postgresql" else ""


async def fence(tx: Tx, scope_id: str, generation: int, ns_id: str, lock: str) -> None:
    """Raise StateError with a fence code unless the scope exists, is enabled at ``generation`` and ``ns_id``
    is its live namespace."""
    row = await tx.fetchrow(
        "SELECT s.enabled, s.generation, n.ns_id, n.frozen_by FROM scopes s"
        " LEFT JOIN namespaces n ON n.scope_id = s.scope_id AND n.state = 'live'"
        f" WHERE s.scope_id = $1{lock}",
        scope_id,
    )
    if row is None:
        raise StateError(Reason.CONSENT_MISSING)
    if int(row[1]) != generation:
        raise StateError(Reason.STALE_GENERATION)
    if not row[0]:
        raise StateError(Reason.CONSENT_DISABLED)
    if row[2] != ns_id or row[3] is not None:
        # SECURITY: the namespace was switched since the caller looked, or a rotation is copying it
        # (frozen): write nowhere the rotation could leave behind.
        raise StateError(Reason.STALE_GENERATION)


async def switch_namespace(tx: Tx, scope_id: str, generation: int, live: bool, at: int) -> None:
    """Retire the scope's live namespace (and any a rotation staged) and, when ``live``, open a fresh
    salted one at ``generation``."""
    # A rotation under way finds its namespaces retired and stops; erasure clears what it wrote.
    await tx.execute(
        "UPDATE namespaces SET state = 'retired', retired_us = $2 WHERE scope_id = $1 AND state IN ('live', 'staged')",
        scope_id,
        at,
    )
    if live:
        await tx.execute(
            "INSERT INTO namespaces (ns_id, scope_id, generation, salt, state, created_us)"
            " VALUES ($1, $2, $3, $4, 'live', $5)",
            codec.new_id("n"),
            scope_id,
            generation,
            new_salt(),
            at,
        )


async def _reload(tx: Tx, scope_id: str) -> Row:
    row = await tx.fetchrow(f"{SCOPE_SELECT} WHERE s.scope_id = $1", scope_id)
    if row is None:  # pragma: no cover - read inside the transaction that just changed it
        raise StateError(Reason.NOT_FOUND)
    return row


class ScopeOps(Facet):
    """Scope records, consent receipts and in-flight write leases."""

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
                codec.new_id("s"),
                *triple,
                at,
            )
            if row is not None:
                return scope_of_row((*row, None, None, None, None, None, None)), True
            row = await tx.fetchrow(
                f"{SCOPE_SELECT} WHERE s.principal_mxid = $1 AND s.origin = $2 AND s.agent = $3"
                " AND s.kind = $4 AND s.room_id = $5",
                *triple,
            )
        if row is None:  # pragma: no cover - the conflicting row is committed before ON CONFLICT yields
            raise StateError(Reason.STATE_UNAVAILABLE)
        return scope_of_row(row), False

    async def get_scope(self, scope_id: str) -> Scope | None:
        """Return the scope, or None when unknown."""
        if not valid_scope_id(scope_id):
            return None
        row = await self._fetchrow("read", f"{SCOPE_SELECT} WHERE s.scope_id = $1", scope_id)
        return None if row is None else scope_of_row(row)

    async def find_scope(self, mxid: str, origin: str, agent: str, kind: str, room_id: str) -> Scope | None:
        """Return the scope of exactly this triple, or None."""
        triple = _triple(mxid, origin, agent, kind, room_id)
        row = await self._fetchrow(
            "read",
            f"{SCOPE_SELECT} WHERE s.principal_mxid = $1 AND s.origin = $2 AND s.agent = $3"
            " AND s.kind = $4 AND s.room_id = $5",
            *triple,
        )
        return None if row is None else scope_of_row(row)

    async def scopes_for_principal(self, mxid: str) -> list[Scope]:
        """Every scope of one MXID (any origin, agent, room), oldest first; used by offboarding."""
        codec.check_bounded(mxid, "principal_mxid", MXID_MAX)
        rows = await self._fetch(
            "read", f"{SCOPE_SELECT} WHERE s.principal_mxid = $1 ORDER BY s.created_us, s.scope_id", mxid
        )
        return [scope_of_row(r) for r in rows]

    async def has_enabled_scope(self, agent: str) -> bool:
        """True when at least one scope of this agent is enabled."""
        codec.check_bounded(agent, "agent", AGENT_MAX)
        row = await self._fetchrow("read", "SELECT 1 FROM scopes WHERE agent = $1 AND enabled LIMIT 1", agent)
        return row is not None

    async def _consent(
        self,
        scope_id: str,
        now: datetime,
        *,
        enable: bool,
        receipt: bool,
        purpose: str | None = None,
        policy_version: str | None = None,
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
                " WHERE scope_id = $1 RETURNING generation",
                scope_id,
                enable,
                at,
                purpose,
                policy_version,
            )
            if row is None:
                raise StateError(Reason.NOT_FOUND)
            await switch_namespace(tx, scope_id, int(row[0]), enable, at)
            scope = scope_of_row(await _reload(tx, scope_id))
            if not receipt:
                return scope, None
            rrow = await tx.fetchrow(
                f"INSERT INTO receipts ({_RECEIPT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_RECEIPT_COLS}",
                codec.new_id("r"),
                scope_id,
                "grant" if enable else "withdraw",
                scope.purpose or "",
                scope.policy_version or "",
                scope.generation,
                at,
            )
        assert rrow is not None
        return scope, _receipt(rrow)

    async def grant(self, scope_id: str, purpose: str, policy_version: str, now: datetime) -> tuple[Scope, Receipt]:
        """Enable the scope for ``purpose`` under ``policy_version``: generation+1 and a receipt, atomically."""
        codec.check_bounded(purpose, "purpose", PURPOSE_MAX)
        codec.check_bounded(policy_version, "policy_version", CODE_MAX)
        scope, receipt = await self._consent(
            scope_id, now, enable=True, receipt=True, purpose=purpose, policy_version=policy_version
        )
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
        at = to_us(now)
        async with self._db.tx("write") as tx:
            # Same row lock as a consent change, so a begin_write either precedes it or is fenced.
            row = await tx.fetchrow(
                "UPDATE scopes SET generation = generation + 1, updated_us = $2 WHERE scope_id = $1"
                " RETURNING generation, enabled",
                scope_id,
                at,
            )
            if row is None:
                raise StateError(Reason.NOT_FOUND)
            await switch_namespace(tx, scope_id, int(row[0]), bool(row[1]), at)
            return scope_of_row(await _reload(tx, scope_id))

    async def receipts(self, scope_id: str) -> list[Receipt]:
        """Every consent receipt of the scope, oldest first."""
        return await self._scope_rows(
            _receipt, f"SELECT {_RECEIPT_COLS} FROM receipts WHERE scope_id = $1 ORDER BY generation_after", scope_id
        )

    async def begin_write(self, scope_id: str, generation: int, ns_id: str, lease_s: float, now: datetime) -> str:
        """Check the fence and record an in-flight write to namespace ``ns_id`` in one step; return its op id."""
        if not valid_scope_id(scope_id):
            raise StateError(Reason.CONSENT_MISSING)
        at, op_id = to_us(now), codec.new_id("w")
        async with self._db.tx("write") as tx:
            await fence(tx, scope_id, generation, ns_id, share_lock(tx))
            await tx.execute(
                "INSERT INTO inflight (op_id, scope_id, generation, started_us, lease_us, ns_id)"
                " VALUES ($1, $2, $3, $4, $5, $6)",
                op_id,
                scope_id,
                generation,
                at,
                at + int(lease_s * 1_000_000),
                ns_id,
            )
        return op_id

    async def write_outcome_unknown(self, op_id: str, until: datetime) -> None:
        """Keep an in-flight write whose upstream outcome is unknown until ``until``, and mark its
        namespace possibly written until then (SPEC D4): erasure waits for it or re-clears after it."""
        at = to_us(until)
        async with self._db.tx("write") as tx:
            row = await tx.fetchrow(
                "UPDATE inflight SET lease_us = CASE WHEN lease_us > $2 THEN lease_us ELSE $2 END,"
                " outcome_unknown = TRUE WHERE op_id = $1 RETURNING ns_id",
                op_id,
                at,
            )
            if row is not None and row[0] is not None:
                # A namespace cleared meanwhile is no longer known to be empty: back to retired.
                await tx.execute(
                    "UPDATE namespaces SET possibly_until_us = CASE WHEN possibly_until_us > $2"
                    " THEN possibly_until_us ELSE $2 END,"
                    " state = CASE WHEN state = 'cleared' THEN 'retired' ELSE state END WHERE ns_id = $1",
                    row[0],
                    at,
                )

    async def end_write(self, op_id: str) -> None:
        """Drop an in-flight record (finished or abandoned write); unknown ids are ignored."""
        await self._execute("single", "DELETE FROM inflight WHERE op_id = $1", op_id)

    async def inflight_count(
        self,
        scope_id: str,
        now: datetime,
        *,
        ns_id: str | None = None,
        except_ns: str | None = None,
        running: bool = False,
    ) -> int:
        """Count unexpired in-flight writes of the scope: into ``ns_id`` only, or into any namespace but ``except_ns``.

        ``running`` leaves out writes whose outcome is unknown: their call has ended, only its
        effect may still land (the namespace is marked possibly written until then).
        """
        row = await self._fetchrow(
            "read",
            "SELECT COUNT(*) FROM inflight WHERE scope_id = $1 AND lease_us > $2"
            " AND (CAST($3 AS TEXT) IS NULL OR ns_id = $3)"
            " AND (CAST($4 AS TEXT) IS NULL OR ns_id IS NULL OR ns_id <> $4)"
            " AND NOT (outcome_unknown AND $5)",
            scope_id,
            to_us(now),
            ns_id,
            except_ns,
            running,
        )
        return int(row[0]) if row else 0
