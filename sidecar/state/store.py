"""The StateStore: every operation the gateway, control API and sweepers need, one object.

Each concern lives in its own module (scopes, ledger, budgets, tokens, evidence); this class
joins them over one :class:`~sidecar.state.db.Database` and adds lifecycle and housekeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Final, TypedDict, Unpack

from sidecar import evloop
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.state.admission import AdmissionOps
from sidecar.state.audit import AuditOps, ErasureOps
from sidecar.state.budgets import BudgetOps
from sidecar.state.codec import to_us
from sidecar.state.db import ACQUIRE_TIMEOUT_S, STATEMENT_TIMEOUT_S, Database, connect
from sidecar.state.health import GuardedDatabase, LateDatabase, StoreHealth
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

_log = get_logger("state")
#: Longest wait between two attempts to reach a state store that did not answer at start-up.
CONNECT_BACKOFF_MAX_S: Final = 30.0

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

    def __init__(
        self,
        dialect: str,
        connect: Callable[[], Awaitable[Database]],
        *,
        spool_rows: int = 10_000,
        spool_dir: Path | None = None,
    ) -> None:
        # Not connected yet: every call fails as if the store were down until ``connect_once`` or the
        # watcher (``watched``) attaches the database.
        self.health = StoreHealth(available=False)
        self._raw = LateDatabase(dialect)
        self._connect = connect
        self._connected: asyncio.Event | None = None
        self._fatal: BaseException | None = None
        self._db: Database = GuardedDatabase(self._raw, self.health)
        self.backend: str = dialect
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

    async def connect_once(self) -> None:
        """Connect (and migrate, when told to) now; StateError(state_unavailable) when the backend does not
        answer, SchemaMismatch when its schema is not one this release runs on."""
        if self._raw.inner is None:
            self._raw.inner = await self._connect()
        self.health.set(True)
        self._event().set()

    def _event(self) -> asyncio.Event:
        if self._connected is None:
            self._connected = asyncio.Event()
        return self._connected

    async def wait_connected(self) -> None:
        """Return once the store is connected; raise what stopped it from ever connecting (SchemaMismatch)."""
        await self._event().wait()
        if self._fatal is not None:
            raise self._fatal

    async def _connect_in_background(self) -> None:
        """Connect, waiting with backoff while the backend does not answer; meanwhile memory is degraded.

        Spooled and orphaned audit records are written first, then the store counts as available. A
        schema this release cannot run on (or any other start-up failure) is not waited out: it is kept
        for ``wait_connected`` to raise, so ``memgov serve`` stops with its exit code.
        """
        delay, attempt = 0.5, 0
        while True:
            attempt += 1
            try:
                if self._raw.inner is None:
                    self._raw.inner = await self._connect()
                await self._recovered()
                break
            except StateError as exc:
                if exc.reason is not Reason.STATE_UNAVAILABLE:
                    self._fail(exc)
                    return
            except Exception as exc:  # noqa: BLE001 - SchemaMismatch and the unforeseen: stop, never retry blindly
                self._fail(exc)
                return
            # Jitter, so replicas restarted together do not knock in step.
            wait = delay * random.uniform(0.75, 1.25)
            _log.warning("state.connect_failed", backend=self.backend, attempt=attempt, retry_in_ms=round(wait * 1000))
            await asyncio.sleep(wait)
            delay = min(delay * 2, CONNECT_BACKOFF_MAX_S)
        if self.health.set(True) and attempt > 1:
            _log.warning("state.available")
        self._event().set()

    def _fail(self, exc: BaseException) -> None:
        self._fatal = exc
        self._event().set()

    async def _watch(self, interval_s: float) -> None:
        if self._raw.inner is None or not self._event().is_set():
            await self._connect_in_background()
            if self._fatal is not None:
                return
        await self.health.watch(self.ping, interval_s, self._recovered)

    @asynccontextmanager
    async def watched(self, interval_s: float) -> AsyncIterator[None]:
        """Connect, if not yet connected, then check the store's health in the background while the context
        is open (see ``health.py``)."""
        async with evloop.background(self._watch(interval_s)):
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


class StoreOptions(TypedDict, total=False):
    """The options :func:`pending_store` takes, which :func:`open_store` passes on."""

    auto_migrate: bool
    spool_rows: int
    spool_dir: Path | None
    statement_timeout_s: float
    acquire_timeout_s: float


def pending_store(
    url: str,
    pool_size: int = 10,
    *,
    auto_migrate: bool = True,
    spool_rows: int = 10_000,
    spool_dir: Path | None = None,
    statement_timeout_s: float = STATEMENT_TIMEOUT_S,
    acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
) -> StateStore:
    """A store for ``sqlite:///path`` (or ``sqlite:///:memory:``) or ``postgresql://…`` that is not connected
    yet: ``watched`` connects it (and migrates, unless ``auto_migrate`` is False: then the schema is only
    checked) in the background, ``connect_once`` at once. Until then it answers as a store that is down."""
    if not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ValueError("state URL must start with sqlite:/// or postgresql://")

    async def connected() -> Database:
        db = await connect(url, pool_size, statement_timeout_s=statement_timeout_s, acquire_timeout_s=acquire_timeout_s)
        try:
            await migrate(db, apply=auto_migrate)
        except BaseException:
            await db.close()
            raise
        return db

    dialect = "sqlite" if url.startswith("sqlite:///") else "postgresql"
    return StateStore(dialect, connected, spool_rows=spool_rows, spool_dir=spool_dir)


async def open_store(url: str, pool_size: int = 10, **options: Unpack[StoreOptions]) -> StateStore:
    """Connect to ``url`` and migrate now (see :func:`pending_store`, which takes the same options).

    Raises StateError(state_unavailable) when the backend does not answer, SchemaMismatch when its
    schema is not one this release runs on.
    """
    store = pending_store(url, pool_size, **options)
    await store.connect_once()
    return store
