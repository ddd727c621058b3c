"""The erasure state machine (SPEC D4): one path for forget-one, forget-all, off, withdrawal, offboarding.

``requested → fenced → quiesced → deleted → verified``, or ``failed`` from any unfinished state.
Each step first does its work, which is idempotent, and then advances the durable erasure row
with a compare-and-set. A process killed between any two steps therefore redoes at most the
interrupted step when the erasure is resumed (on start, and by the sweeper for stalled rows).

Whole-scope kinds fence by advancing the generation: withdrawal, off and offboarding also
disable the scope; forget-all keeps consent and only moves the generation, so every in-flight
write of the old generation is stale. Deletion then covers every generation the scope can no
longer read, so rows that landed without a ledger record are cleared too. A failure leaves
the scope disabled with a reason code; it never resumes on a best-effort assumption.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable
from datetime import datetime, timedelta

from sidecar import tracing
from sidecar.enforce.runtime import Governance
from sidecar.erasure.adapters import AdapterError
from sidecar.identity.keys import storage_key
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.state.types import ERASURE_TERMINAL, Erasure, LedgerEntry, Scope, StateError

log = get_logger("erasure")
_POLL_FIRST_S = 0.02
_POLL_MAX_S = 0.5


class Kind(enum.StrEnum):
    """What is erased and how the scope is fenced first."""

    FORGET_ONE = "forget_one"
    FORGET_ALL = "forget_all"
    OFF = "off"
    WITHDRAW = "withdraw"
    OFFBOARD = "offboard"


WHOLE_SCOPE = frozenset({Kind.FORGET_ALL, Kind.OFF, Kind.WITHDRAW, Kind.OFFBOARD})
NEXT_STATE = {"requested": "fenced", "fenced": "quiesced", "quiesced": "deleted", "deleted": "verified"}


def dead_generations(scope: Scope) -> range:
    """Generations the scope can never read again: older than the current one, and it too when disabled."""
    return range(0, scope.generation + (0 if scope.enabled else 1))


def _by_generation(entries: Iterable[LedgerEntry]) -> dict[int, list[str]]:
    groups: dict[int, list[str]] = {}
    for e in entries:
        groups.setdefault(e.generation, []).append(e.entry_id)
    return groups


class ErasureEngine:
    """Creates, runs and resumes erasures for one gateway process."""

    def __init__(self, gov: Governance) -> None:
        self._gov = gov
        self._running: dict[str, asyncio.Task[Erasure]] = {}

    @property
    def adapter(self) -> str:
        """Name of the configured adapter (``rest`` or ``kagent-db``)."""
        return self._gov.eraser.name

    async def blocked(self, scope_id: str) -> Reason | None:
        """Why re-consent must wait, or None.

        ``erasure_pending`` while an erasure of the scope is unfinished; ``erasure_failed`` when a
        failed erasure is newer than the last verified whole-scope erasure.
        """
        history = await self._gov.store.erasures_of_scope(scope_id)
        if any(e.state not in ERASURE_TERMINAL for e in history):
            return Reason.ERASURE_PENDING
        for e in history:  # newest first
            if e.state == "verified" and e.kind in WHOLE_SCOPE:
                return None
            if e.state == "failed":
                return Reason.ERASURE_FAILED
        return None

    async def request(self, scope: Scope, kind: Kind, requested_by: str, entry_ids: Iterable[str] = ()) -> Erasure:
        """Record an erasure; whole-scope erasures list every entry not yet physically deleted."""
        store = self._gov.store
        ids = list(entry_ids)
        if kind in WHOLE_SCOPE:
            ids = [e.entry_id for e in await store.entries_of_scope(scope.scope_id) if e.physically_deleted_at is None]
        erasure = await store.create_erasure(scope.scope_id, kind.value, ids, self.adapter, requested_by, self._now())
        await self._audit(erasure, Reason.ALLOWED)
        log.info("erasure.requested", erasure_id=erasure.erasure_id, scope_id=scope.scope_id, kind=kind.value,
                 adapter=self.adapter, count=len(ids))
        return erasure

    async def erase(self, scope: Scope, kind: Kind, requested_by: str, entry_ids: Iterable[str] = ()) -> Erasure:
        """Request and run an erasure to its end."""
        erasure = await self.request(scope, kind, requested_by, entry_ids)
        return await self.run(erasure.erasure_id)

    async def run(self, erasure_id: str, until: str | None = None) -> Erasure:
        """Drive an erasure to a terminal state (or just to ``until``); survives the caller's cancellation."""
        if until is not None:
            return await self._drive(erasure_id, until)
        task = self._running.get(erasure_id)
        if task is None:
            task = asyncio.create_task(self._drive(erasure_id, None))
            self._running[erasure_id] = task
            task.add_done_callback(lambda _t: self._running.pop(erasure_id, None))
        # A client that hangs up must not stop an erasure halfway; the task finishes on its own.
        return await asyncio.shield(task)

    async def resume_all(self) -> list[Erasure]:
        """Resume every unfinished erasure (called on start, before the listeners open)."""
        unfinished = await self._gov.store.unfinished_erasures()
        if unfinished:
            log.info("erasure.resuming", count=len(unfinished))
        return list(await asyncio.gather(*(self.run(e.erasure_id) for e in unfinished)))

    async def resume_stale(self, older_than: timedelta) -> int:
        """Resume unfinished erasures nobody advanced for ``older_than`` (their runner died)."""
        cutoff = self._now() - older_than
        stale = [e for e in await self._gov.store.unfinished_erasures()
                 if e.updated_at < cutoff and e.erasure_id not in self._running]
        await asyncio.gather(*(self.run(e.erasure_id) for e in stale))
        return len(stale)

    async def offboard(self, scopes: list[Scope], requested_by: str) -> list[Erasure]:
        """Fence every scope of a principal first, then erase each (SPEC R-7)."""
        erasures: list[Erasure] = []
        for scope in scopes:
            pending = [e for e in await self._gov.store.erasures_of_scope(scope.scope_id)
                       if e.state not in ERASURE_TERMINAL and e.kind in WHOLE_SCOPE]
            erasures.append(pending[0] if pending else await self.request(scope, Kind.OFFBOARD, requested_by))
        # SECURITY: every scope is disabled before any deletion starts, so none keeps collecting.
        for erasure in erasures:
            await self.run(erasure.erasure_id, until="fenced")
        return list(await asyncio.gather(*(self.run(e.erasure_id) for e in erasures)))

    # -- the state machine ----------------------------------------------------------------------

    def _now(self) -> datetime:
        return self._gov.now()

    async def _drive(self, erasure_id: str, until: str | None) -> Erasure:
        store = self._gov.store
        erasure = await store.get_erasure(erasure_id)
        if erasure is None:
            raise StateError(Reason.NOT_FOUND)
        while erasure.state not in ERASURE_TERMINAL and erasure.state != until:
            target = NEXT_STATE[erasure.state]
            try:
                await self._work(erasure, target)
            except AdapterError as exc:
                return await self._fail(erasure, exc.reason)
            except StateError as exc:
                if exc.reason is Reason.STATE_UNAVAILABLE:
                    raise  # left unfinished; resumed once the store answers again
                return await self._fail(erasure, Reason.ERASURE_FAILED)
            erasure = await self._advance(erasure, target)
        if erasure.state in ERASURE_TERMINAL and until is None:
            log.info("erasure.finished", erasure_id=erasure_id, scope_id=erasure.scope_id, kind=erasure.kind,
                     state=erasure.state, adapter=erasure.adapter)
        return erasure

    async def _step(self, erasure: Erasure, target: str, failure_reason: str | None = None) -> tuple[Erasure, bool]:
        """Move the row to ``target``; (row, True) when this runner did, (current row, False) if another did."""
        store = self._gov.store
        try:
            moved: Erasure = await store.advance_erasure(erasure.erasure_id, target, self._now(),
                                                         failure_reason=failure_reason)
            return moved, True
        except StateError as exc:
            if exc.reason is not Reason.INTERNAL_ERROR:
                raise
            # Another runner advanced it first (compare-and-set lost); continue from its state.
            reloaded = await store.get_erasure(erasure.erasure_id)
            if reloaded is None:
                raise
            return reloaded, False

    async def _advance(self, erasure: Erasure, target: str) -> Erasure:
        advanced, ours = await self._step(erasure, target)
        if not ours:
            return advanced
        if advanced.state == "verified":
            await self._audit(advanced, Reason.ALLOWED)
        return advanced

    async def _fail(self, erasure: Erasure, reason: Reason) -> Erasure:
        store, now = self._gov.store, self._now()
        scope = await store.get_scope(erasure.scope_id)
        if scope is not None and scope.enabled:
            # SECURITY: the scope is disabled before the failure is recorded, so a crash in between
            # can never leave a failed erasure on an enabled scope.
            await store.disable(scope.scope_id, now)
        failed, ours = await self._step(erasure, "failed", reason.value)
        if not ours:
            return failed
        log.warning("erasure.failed", erasure_id=erasure.erasure_id, scope_id=erasure.scope_id, kind=erasure.kind,
                    reason=reason.value, step=erasure.state, adapter=erasure.adapter)
        await self._audit(failed, reason)
        return failed

    def _revision(self) -> str | None:
        revision: str | None = self._gov.policy.revision
        return revision

    async def _audit(self, erasure: Erasure, reason: Reason) -> None:
        await self._gov.store.audit("erasure", reason.value, scope_id=erasure.scope_id, erasure_id=erasure.erasure_id,
                                    operation=f"erasure.{erasure.kind}.{erasure.state}",
                                    policy_revision=self._revision(), now=self._now())

    async def _scope(self, erasure: Erasure) -> Scope:
        scope: Scope | None = await self._gov.store.get_scope(erasure.scope_id)
        if scope is None:
            raise StateError(Reason.NOT_FOUND)
        return scope

    @tracing.traced("memgov.erasure.step", lambda self, erasure, target: {
        "erasure_id": erasure.erasure_id, "kind": erasure.kind, "step": target, "adapter": erasure.adapter})
    async def _work(self, erasure: Erasure, target: str) -> None:
        scope = await self._scope(erasure)
        kind = Kind(erasure.kind)
        if target == "fenced":
            await self._fence(scope, kind, erasure)
        elif target == "quiesced":
            if kind in WHOLE_SCOPE:
                await self._quiesce(scope, erasure)
        elif target == "deleted":
            await (self._delete_scope(scope) if kind in WHOLE_SCOPE else self._delete_entries(scope, erasure))
        else:
            await (self._verify_scope(scope) if kind in WHOLE_SCOPE else self._verify_entries(scope, erasure))

    async def _fence(self, scope: Scope, kind: Kind, erasure: Erasure) -> None:
        store, now = self._gov.store, self._now()
        if kind is Kind.FORGET_ONE:
            # The entry is unreadable through memgov from this moment, whatever the adapter.
            await store.tombstone(scope.scope_id, erasure.entry_ids, now)
            return
        # A disabled scope admits no write at any generation, so it is fenced already. Re-consent
        # is refused while an erasure is unfinished, so an enabled scope here was never fenced.
        if not scope.enabled:
            return
        if kind is Kind.WITHDRAW:
            _, receipt = await store.withdraw(scope.scope_id, now)
            await store.audit("consent", Reason.ALLOWED.value, scope_id=scope.scope_id, erasure_id=erasure.erasure_id,
                              operation="consent.withdraw", policy_revision=self._revision(), now=now)
            log.info("consent.withdrawn", scope_id=scope.scope_id, receipt_id=receipt.receipt_id,
                     generation=receipt.generation_after)
        elif kind is Kind.FORGET_ALL:
            await store.advance_generation(scope.scope_id, now)
        else:
            await store.disable(scope.scope_id, now)

    async def _stale_inflight(self, scope: Scope) -> int:
        store, now = self._gov.store, self._now()
        total: int = await store.inflight_count(scope.scope_id, now)
        if not scope.enabled:
            return total
        return total - int(await store.inflight_count(scope.scope_id, now, generation=scope.generation))

    async def _quiesce(self, scope: Scope, erasure: Erasure) -> None:
        """Wait, within a bound, for writes of fenced generations that were already under way."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._gov.settings.erasure.quiesce_timeout_s
        delay = _POLL_FIRST_S
        while (left := await self._stale_inflight(scope)) > 0:
            if loop.time() >= deadline:
                # Each such write re-checks the generation after it lands and deletes its own row;
                # whatever still slips through lands in a dead namespace the sweeper clears.
                log.warning("erasure.quiesce_timeout", erasure_id=erasure.erasure_id, scope_id=scope.scope_id,
                            count=left)
                await self._gov.store.audit("erasure", Reason.STALE_GENERATION.value, scope_id=scope.scope_id,
                                            erasure_id=erasure.erasure_id, operation="erasure.quiesce_timeout",
                                            now=self._now())
                return
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, _POLL_MAX_S)

    def _ns(self, scope: Scope, generation: int) -> tuple[str, str]:
        return self._gov.app_name(scope.agent), storage_key(scope.scope_id, generation)

    async def _dead_entries(self, scope: Scope) -> list[LedgerEntry]:
        dead = dead_generations(scope)
        return [e for e in await self._gov.store.entries_of_scope(scope.scope_id) if e.generation in dead]

    async def _delete_scope(self, scope: Scope) -> None:
        eraser = self._gov.eraser
        for generation in dead_generations(scope):
            app, key = self._ns(scope, generation)
            # Over REST an empty namespace costs one read; the delete only runs where rows remain.
            if eraser.exact or await eraser.remaining(app, key):
                await eraser.delete_namespace(app, key)
        ids = [e.entry_id for e in await self._dead_entries(scope)]
        await self._gov.store.mark_physically_deleted(ids, self._now())

    async def _verify_scope(self, scope: Scope) -> None:
        eraser, store, now = self._gov.eraser, self._gov.store, self._now()
        for generation in dead_generations(scope):
            app, key = self._ns(scope, generation)
            if await eraser.remaining(app, key):
                # A late write, or a generation fenced by a concurrent erasure since the delete
                # step: delete once more; only rows that survive a second delete fail the erasure.
                await eraser.delete_namespace(app, key)
                if await eraser.remaining(app, key):
                    raise AdapterError(Reason.VERIFICATION_FAILED)
        ids = [e.entry_id for e in await self._dead_entries(scope)]
        await store.tombstone(scope.scope_id, ids, now)
        await store.mark_physically_deleted(ids, now)
        await store.mark_verified(ids, now)

    async def _entries(self, scope: Scope, erasure: Erasure) -> dict[int, list[str]]:
        wanted = set(erasure.entry_ids)
        return _by_generation(e for e in await self._gov.store.entries_of_scope(scope.scope_id)
                              if e.entry_id in wanted)

    async def _delete_entries(self, scope: Scope, erasure: Erasure) -> None:
        eraser = self._gov.eraser
        if not eraser.exact:
            return  # tombstoned; physically deleted when its namespace is cleared
        for generation, ids in (await self._entries(scope, erasure)).items():
            await eraser.delete_entries(*self._ns(scope, generation), ids)
            await self._gov.store.mark_physically_deleted(ids, self._now())

    async def _verify_entries(self, scope: Scope, erasure: Erasure) -> None:
        eraser, store = self._gov.eraser, self._gov.store
        for generation, ids in (await self._entries(scope, erasure)).items():
            # Read-after-delete: never readable through memgov again, and gone from kagent when exact.
            if await store.filter_live(scope.scope_id, generation, ids, self._now()):
                raise AdapterError(Reason.VERIFICATION_FAILED)
            if eraser.exact:
                if await eraser.remaining(*self._ns(scope, generation), ids):
                    raise AdapterError(Reason.VERIFICATION_FAILED)
                await store.mark_verified(ids, self._now())
