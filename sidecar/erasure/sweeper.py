"""Sweepers: physical deletion after hard expiry (R-9) and of everything in retired namespaces (D2).

One pass (:func:`sweep_once`) runs, in order:

1. retired namespaces: every storage namespace a scope can no longer write (withdrawn,
   re-consented, forgotten or legacy generations) is cleared, read back empty and marked
   ``cleared`` (late background saves, failed rollbacks, rows stored under another agent-name
   spelling). One a write of unknown outcome may still reach waits until its lease ends;
2. hard expiry: entries past ``expires_at`` are deleted by id (``kagent-db``), or, over REST,
   their namespace is cleared once none of its entries is live and no write is in flight;
3. orphans (``kagent-db`` only): rows of memgov namespaces created before any possible hard
   expiry, whether or not the ledger knows them;
4. rotations (``rest`` with an embedding provider): every scope whose live namespace still holds
   a forgotten or rolled-back entry, an entry expired for about half of R-9's 24 h, or that is
   legacy (unsalted), is rotated (``rotation.py``); no other scope is;
5. stalled erasures whose runner died, and deferred ones whose wait is over, are resumed;
   lapsed leases and tokens are purged; final ledger rows and cleared namespaces once they have
   been final for ``erasure.history_grace_s`` (a day; ``compact_history``, each erasure keeps its
   own evidence of them); finished rotations and complete forget-ones after the audit retention.

Every step is idempotent, so several replicas may sweep at once. ``Sweepers`` runs a pass at
start and then every ``erasure.sweep_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sidecar import tracing
from sidecar.contentstore.adapters import AdapterError
from sidecar.contentstore.rotator import Rotator
from sidecar.erasure.machine import ErasureEngine
from sidecar.erasure.parts import ErasureParts
from sidecar.erasure.readback import stamp_erased
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.state.types import ErasureState, LedgerEntry, Namespace, Scope, StateError

log = get_logger("sweeper")
_BATCH = 500
_MAX_BATCHES = 20
#: Kagent's clock and ours may disagree; orphans are only taken this long after any hard expiry.
ORPHAN_GRACE = timedelta(days=1)
#: R-9: expired memory is physically deleted within this long of its hard expiry.
EXPIRY_DEADLINE = timedelta(hours=24)
#: Scopes compacted per batch, and batches per pass.
_COMPACT_SCOPES = 500
#: Rotations started by one pass, and how many run at once (each re-embeds at most max_entries).
_ROTATIONS_PER_PASS = 10_000
_ROTATING_AT_ONCE = 4
#: Rotations failing in a row before a pass leaves the rest for the next one (the provider is likely down).
_PAUSE_AFTER_FAILURES = 3


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """How often the sweepers pass and what they keep: the erasure and audit settings they read."""

    interval_s: float
    #: Final ledger rows and cleared namespaces are compacted this long after they became final.
    history_grace_s: float
    #: Audit rows have their own retention window (R-15), independent of memory expiry.
    audit_retention_days: int
    #: Lapsed leases, slots, budgets, replay ids and confirmations: the store's own housekeeping.
    purge_expired: Callable[[datetime], Awaitable[object]]


@dataclass
class SweepReport:
    """Counts of one pass (no ids)."""

    dead_cleared: int = 0
    expired_deleted: int = 0
    expired_pending: int = 0
    orphans_deleted: int | None = None
    rotated: int = 0
    rotations_waiting: int = 0
    erasures_resumed: int = 0
    audit_purged: int = 0
    history_compacted: int = 0
    failures: int = 0


class _Pass:
    """One sweep pass over the state store and the content store."""

    def __init__(self, parts: ErasureParts, plan: SweepPlan, report: SweepReport) -> None:
        self.p, self.plan, self.report = parts, plan, report
        self.now: datetime = parts.clock()

    async def clear(self, scope: Scope, ns: Namespace, ids: list[str]) -> None:
        """Delete a whole namespace, verify it is empty (read after delete), stamp the ledger."""
        agent, eraser = self.p.agents.query_name(scope.agent), self.p.eraser
        await eraser.delete_namespace(agent, ns.storage_key)
        if await eraser.remaining(agent, ns.storage_key):
            raise AdapterError(Reason.VERIFICATION_FAILED)
        await stamp_erased(self.p.ledger, scope.scope_id, ids, self.now)

    async def unswept(self, scope: Scope, ns_id: str) -> list[LedgerEntry]:
        entries = await self.p.history.unswept_entries(scope.scope_id, [ns_id])
        return [e for e in entries if e.physically_deleted_at is None]

    async def retired(self) -> None:
        for ns in await self.p.namespaces.sweepable_namespaces(self.now, _BATCH):
            scope = await self.p.scopes.get_scope(ns.scope_id)
            if scope is None:
                continue
            ids = [e.entry_id for e in await self.unswept(scope, ns.ns_id)]
            if await self.guard(self.clear(scope, ns, ids), ns.scope_id):
                await self.p.namespaces.mark_cleared([ns.ns_id], self.now)
                self.report.dead_cleared += 1

    async def expired(self) -> None:
        exact = self.p.eraser.exact
        for _ in range(_MAX_BATCHES if exact else 1):
            # Over REST entries of live namespaces keep coming back; one large batch per pass.
            batch = await self.p.ledger.expired_unswept(self.now, _BATCH if exact else _BATCH * 20)
            groups: dict[tuple[str, str | None], list[str]] = {}
            for e in batch:
                groups.setdefault((e.scope_id, e.ns_id), []).append(e.entry_id)
            for (scope_id, ns_id), ids in groups.items():
                scope = await self.p.scopes.get_scope(scope_id)
                ns = next(
                    iter(await self.p.namespaces.namespaces_by_id(scope_id, [ns_id] if ns_id else [])),
                    None,
                )
                if scope is not None and ns is not None:
                    expire = self.expire_exact if exact else self.expire_rest
                    await self.guard(expire(scope, ns, ids), scope_id)
            if len(batch) < _BATCH:
                return

    async def expire_exact(self, scope: Scope, ns: Namespace, ids: list[str]) -> None:
        agent = self.p.agents.query_name(scope.agent)
        await self.p.eraser.delete_entries(agent, ns.storage_key, ids)
        if await self.p.eraser.remaining(agent, ns.storage_key, ids):
            raise AdapterError(Reason.VERIFICATION_FAILED)
        await stamp_erased(self.p.ledger, scope.scope_id, ids, self.now)
        self.report.expired_deleted += len(ids)

    async def expire_rest(self, scope: Scope, ns: Namespace, ids: list[str]) -> None:
        rows = await self.unswept(scope, ns.ns_id)
        live = any(e.tombstoned_at is None and e.expires_at > self.now for e in rows)
        current = ns.state == "live"
        busy = current and await self.p.scopes.inflight_count(scope.scope_id, self.now, ns_id=ns.ns_id) > 0
        if live or busy or (ns.possibly_until is not None and ns.possibly_until > self.now):
            # SECURITY: these rows are unreadable through memgov already (expiry filter); kagent's
            # REST API can only clear a namespace whole, and this one still holds live memory.
            self.report.expired_pending += len(ids)
            return
        await self.clear(scope, ns, [e.entry_id for e in rows])
        self.report.expired_deleted += len(ids)

    async def orphans(self) -> None:
        cutoff = self.now - timedelta(days=self.p.limits().max_days) - ORPHAN_GRACE
        try:
            self.report.orphans_deleted = await self.p.eraser.delete_created_before(cutoff)
        except AdapterError as exc:
            self.report.failures += 1
            log.warning("sweep.failed", step="orphans", reason=exc.reason.value, adapter=self.p.eraser.name)

    def expired_before(self) -> datetime:
        """Rotate for expiry only entries expired this long, so one rotation takes many expiries at once, yet
        within half the deadline: a rotation that fails (provider down) is retried for hours before it."""
        interval = timedelta(seconds=self.plan.interval_s)
        return self.now - max(timedelta(0), EXPIRY_DEADLINE / 2 - 2 * interval)

    async def rotations(self, engine: ErasureEngine, rotator: Rotator) -> None:
        """Rotate the candidates a few at a time. Scopes whose agent has no known model wait without a failed
        record each pass; after a few failures in a row (provider or kagent down) the rest wait for the next pass."""
        store, busy = self.p, asyncio.Semaphore(_ROTATING_AT_ONCE)
        failed_in_a_row = 0

        async def rotate(scope_id: str) -> None:
            nonlocal failed_in_a_row
            async with busy:
                scope = await store.scopes.get_scope(scope_id)
                if scope is None or scope.namespace is None:
                    return
                if failed_in_a_row >= _PAUSE_AFTER_FAILURES or not rotator.knows_model(scope.agent):
                    self.report.rotations_waiting += 1
                    return
                done = await engine.rotate(scope, "sweeper")
                self.report.rotated += done.state is ErasureState.VERIFIED
                self.report.failures += done.state is ErasureState.FAILED
                failed_in_a_row = failed_in_a_row + 1 if done.state is ErasureState.FAILED else 0

        candidates = await store.lineage.rotation_candidates(self.now, self.expired_before(), _ROTATIONS_PER_PASS)
        await asyncio.gather(*(rotate(s) for s in candidates))

    async def guard(self, work: Awaitable[None], scope_id: str) -> bool:
        """Run one unit of work; an adapter failure is counted and logged, the pass goes on."""
        try:
            await work
        except AdapterError as exc:
            self.report.failures += 1
            log.warning("sweep.failed", scope_id=scope_id, reason=exc.reason.value, adapter=self.p.eraser.name)
            return False
        return True


@tracing.traced("memgov.sweep")
async def sweep_once(parts: ErasureParts, plan: SweepPlan, engine: ErasureEngine | None = None) -> SweepReport:
    """Run one full sweep pass and report what it did."""
    p, report = parts, SweepReport()
    run = _Pass(p, plan, report)
    await run.retired()
    await run.expired()
    if p.eraser.exact:
        await run.orphans()
    if engine is not None and engine.rotates and p.rotator is not None:
        await run.rotations(engine, p.rotator)
    if engine is not None:
        stalled_after = timedelta(seconds=2 * p.quiesce_timeout_s + 60)
        report.erasures_resumed = await engine.resume_stale(stalled_after)
    await plan.purge_expired(p.clock())
    grace = timedelta(seconds=plan.history_grace_s)
    for _ in range(_MAX_BATCHES):
        now = p.clock()
        compacted = await p.history.compact_history(now, now - grace, _COMPACT_SCOPES)
        report.history_compacted += compacted.ledger_rows + compacted.namespaces
        if compacted.scopes + compacted.skipped_unfinished < _COMPACT_SCOPES:
            break
    # Audit rows have their own retention window, independent of memory expiry.
    retention = p.clock() - timedelta(days=plan.audit_retention_days)
    report.audit_purged = await p.audit.purge_audit(retention)
    await p.lineage.purge_erasures(retention)
    log.info(
        "sweep.done",
        deleted=report.dead_cleared + report.expired_deleted,
        pending=report.expired_pending + report.rotations_waiting,
        count=report.rotated,
        failures=report.failures,
        adapter=p.eraser.name,
    )
    return report


class Sweepers:
    """The periodic sweep task of one gateway process."""

    def __init__(self, parts: ErasureParts, plan: SweepPlan, engine: ErasureEngine) -> None:
        self._p, self._plan, self._engine = parts, plan, engine
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Set after every pass, with its report; whoever waits for a pass clears it first.
        self.swept = asyncio.Event()
        self.last: SweepReport | None = None

    def start(self) -> None:
        """Start sweeping now and then every ``erasure.sweep_interval_s``."""
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        interval = self._plan.interval_s
        while not self._stop.is_set():
            try:
                self.last = await sweep_once(self._p, self._plan, self._engine)
                self.swept.set()
            except StateError as exc:
                log.warning("sweep.failed", reason=exc.reason.value)
            except Exception as exc:  # noqa: BLE001 - one bad pass must not end the sweeper
                log.error("sweep.failed", error_type=type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)

    async def stop(self) -> None:
        """Stop sweeping; a pass cut short is simply redone by the next one (every step is idempotent)."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
