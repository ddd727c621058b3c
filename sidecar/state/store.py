"""The StateStore: every operation the gateway, control API and sweepers need, one object.

Each concern lives in its own module (scopes, ledger, budgets, tokens, evidence); this class
joins them over one :class:`~sidecar.state.db.Database` and adds lifecycle and housekeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

from sidecar import evloop
from sidecar.state.admission import AdmissionOps
from sidecar.state.audit import AuditOps, ErasureOps
from sidecar.state.budgets import BudgetOps
from sidecar.state.codec import to_us
from sidecar.state.db import ACQUIRE_TIMEOUT_S, STATEMENT_TIMEOUT_S, Database, connect
from sidecar.state.health import GuardedDatabase, StoreHealth
from sidecar.state.history import HistoryOps
from sidecar.state.ledger import LedgerOps
from sidecar.state.lineage import LineageOps
from sidecar.state.migrations import migrate, schema_version
from sidecar.state.namespaces import NamespaceOps
from sidecar.state.prefetch import PrefetchOps
from sidecar.state.rotations import RotationOps
from sidecar.state.scopes import ScopeOps
from sidecar.state.single_use import SingleUseOps
from sidecar.state.spool import AuditSpool, open_journal
from sidecar.state.types import ERASURE_TERMINAL_SQL, StateError

_STATS = {
    "scopes": "SELECT COUNT(*) FROM scopes",
    "scopes_enabled": "SELECT COUNT(*) FROM scopes WHERE enabled",
    "namespaces_live": "SELECT COUNT(*) FROM namespaces WHERE state = 'live'",
    "namespaces_retired": "SELECT COUNT(*) FROM namespaces WHERE state = 'retired'",
    "namespaces_staged": "SELECT COUNT(*) FROM namespaces WHERE state = 'staged'",
    "receipts": "SELECT COUNT(*) FROM receipts",
    "ledger_entries": "SELECT COUNT(*) FROM ledger WHERE expires_us IS NOT NULL",
    "ledger_pending": "SELECT COUNT(*) FROM ledger WHERE expires_us IS NULL",
    "ledger_tombstoned": "SELECT COUNT(*) FROM ledger WHERE tombstoned_us IS NOT NULL",
    "ledger_deleted": "SELECT COUNT(*) FROM ledger WHERE deleted_us IS NOT NULL",
    "inflight": "SELECT COUNT(*) FROM inflight",
    "budgets": "SELECT COUNT(*) FROM budgets",
    "replay": "SELECT COUNT(*) FROM replay",
    "confirmations": "SELECT COUNT(*) FROM confirmations",
    "audit": "SELECT COUNT(*) FROM audit",
    "erasures": "SELECT COUNT(*) FROM erasures",
    "erasures_unfinished": f"SELECT COUNT(*) FROM erasures WHERE state NOT IN ({ERASURE_TERMINAL_SQL})",
}

# Rows that mean nothing once their time has passed (a lapsed slot no longer counts toward a cap).
_EXPIRED = {
    "inflight": "DELETE FROM inflight WHERE lease_us <= $1",
    "ledger_pending": "DELETE FROM ledger WHERE expires_us IS NULL AND lease_us <= $1",
    "budgets": "DELETE FROM budgets WHERE expires_us <= $1",
    "replay": "DELETE FROM replay WHERE exp_us <= $1",
    "confirmations": "DELETE FROM confirmations WHERE expires_us <= $1",
}


class StateStore:
    """Durable control state on SQLite or PostgreSQL; never holds memory content.

    Composed of facets over one guarded database handle, one per concern; the composition root
    (``root.py``) hands each consumer the facets it uses, the store itself keeps only lifecycle and
    housekeeping.
    """

    def __init__(self, db: Database, *, spool_rows: int = 10_000, spool_dir: Path | None = None) -> None:
        self.health = StoreHealth()
        self._raw = db
        self._db: Database = GuardedDatabase(db, self.health)
        self.backend: str = db.dialect
        self.spool = AuditSpool(spool_rows, open_journal(spool_dir, spool_rows))
        guarded = self._db
        #: Scope records, consent receipts and in-flight write leases.
        self.scopes = ScopeOps(guarded)
        #: A governed call's one transaction before kagent is called, and one after.
        self.admission = AdmissionOps(guarded)
        #: Entry slots, live filtering, tombstones and sweep marks.
        self.ledger = LedgerOps(guarded)
        #: Reads bounded by what is live, erasure evidence, compaction.
        self.history = HistoryOps(guarded)
        #: Storage namespaces of a scope and what read-back cleared.
        self.namespaces = NamespaceOps(guarded)
        #: All-or-nothing budget reservations.
        self.budgets = BudgetOps(guarded)
        #: Spent delegation contexts and confirmation tokens.
        self.single_use = SingleUseOps(guarded)
        #: Audit rows and refusal counts (spooled while the store is down).
        self.audit_log = AuditOps(guarded, self.spool)
        #: Erasure records and their runners.
        self.erasures = ErasureOps(guarded)
        #: A scope's prefetch windows.
        self.prefetch = PrefetchOps(guarded)
        #: Namespace rotation's atomic steps.
        self.rotations = RotationOps(guarded)
        #: Copies rotations made of entries, the scopes due for a rotation, and their evidence's retention.
        self.lineage = LineageOps(guarded)

    @property
    def db(self) -> Database:
        """The underlying connection(s); for bulk loading and schema inspection, not the request path."""
        return self._db

    async def ping(self) -> None:
        """Raise StateError(state_unavailable) unless the backend answers (asked even while known down)."""
        async with self._raw.tx("read") as tx:
            await tx.fetchrow("SELECT 1")

    async def _recovered(self) -> None:
        await self.spool.replay_orphans(self._raw)  # on start, too: the watcher's first check passes
        await self.spool.flush(self._raw)

    @asynccontextmanager
    async def watched(self, interval_s: float) -> AsyncIterator[None]:
        """Check the store's health in the background while the context is open (see ``health.py``)."""
        async with evloop.background(self.health.watch(self.ping, interval_s, self._recovered)):
            yield

    async def close(self) -> None:
        """Replay what is spooled when the store answers, count what cannot be, close every connection."""
        if len(self.spool):
            with contextlib.suppress(StateError, TimeoutError):
                await asyncio.wait_for(self.spool.flush(self._raw), 5.0)
        self.spool.lose()
        await self._raw.close()

    async def schema_version(self) -> int:
        """The highest applied migration."""
        return await schema_version(self._db)

    async def stats(self) -> dict[str, int]:
        """Row counts per kind of record; counts only, no ids."""
        out: dict[str, int] = {}
        async with self._db.tx("snapshot") as tx:
            for name, sql in _STATS.items():
                row = await tx.fetchrow(sql)
                out[name] = int(row[0]) if row else 0
        return out

    async def purge_expired(self, now: datetime) -> dict[str, int]:
        """Delete lapsed leases and slots, drained budgets, expired replay ids and confirmations."""
        out: dict[str, int] = {}
        async with self._db.tx("write") as tx:
            for name, sql in _EXPIRED.items():
                out[name] = await tx.execute(sql, to_us(now))
        return out


async def open_store(
    url: str,
    pool_size: int = 10,
    *,
    auto_migrate: bool = True,
    spool_rows: int = 10_000,
    spool_dir: Path | None = None,
    statement_timeout_s: float = STATEMENT_TIMEOUT_S,
    acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
) -> StateStore:
    """Connect to ``sqlite:///path`` (or ``sqlite:///:memory:``) or ``postgresql://…`` and migrate.

    With ``auto_migrate`` False the schema is only checked (another process migrates it). Raises
    StateError(state_unavailable) when the backend does not answer, SchemaMismatch when its schema
    is not one this release runs on.
    """
    db = await connect(url, pool_size, statement_timeout_s=statement_timeout_s, acquire_timeout_s=acquire_timeout_s)
    try:
        await migrate(db, apply=auto_migrate)
    except BaseException:
        await db.close()
        raise
    return StateStore(db, spool_rows=spool_rows, spool_dir=spool_dir)
