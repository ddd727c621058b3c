"""The erasure state machine (SPEC D4): one path for forget-one, forget-all, off, withdrawal, offboarding.

``requested → fenced → quiesced → deleted → verified``, or ``failed`` from any unfinished state.
``runner.py`` drives one erasure through those states under its run lease; ``steps.py`` holds the
work of each state per kind (``rotation.py`` the rotation's). This engine creates erasures, runs
them to their end, resumes what a killed process left, and wakes deferred ones.

Whole-scope kinds fence by advancing the generation, which retires the scope's live storage
namespace: withdrawal, off and offboarding also disable the scope; forget-all keeps consent and
writes to a fresh namespace from then on, so every in-flight write of the old one is stale.
Deletion then covers every namespace the scope ever had (every storage key, generation and, via
the adapter's query, every agent-name spelling), so rows that landed without a ledger record
are cleared too. Verification is a read-back of each of those namespaces, recorded as evidence;
only what was read back is ever claimed (SPEC D4). A namespace that a write of unknown outcome
may still reach defers verification until its lease ends, then clears and reads back again. A
failure leaves the scope disabled with a reason code; it never resumes on a best-effort assumption.

A ``rotate`` erasure moves what a scope keeps into a fresh namespace so the old one can be
deleted whole over REST; forget-one runs one after its tombstone when configured. It fails
without disabling the scope (nothing unsafe happened) and never blocks re-consent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime, timedelta

from sidecar.erasure.parts import ErasureParts, audit_erasure
from sidecar.erasure.rotation import RotationSteps
from sidecar.erasure.runner import Runner
from sidecar.erasure.steps import EntrySteps, NoRotation, Steps, WholeScopeSteps
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.settings import AdapterName
from sidecar.state.types import ERASURE_TERMINAL, WHOLE_SCOPE, Erasure, ErasureKind, ErasureState, Scope

log = get_logger("erasure")


class NotRetryable(Exception):
    """A retry was asked of an erasure that did not fail, or whose failure is already covered;
    ``reason`` is ``erasure_pending`` while it (or its scope's rotation) is unfinished, else None."""

    def __init__(self, reason: Reason | None) -> None:
        super().__init__(reason.value if reason else "not_retryable")
        self.reason = reason


class ErasureEngine:
    """Creates, runs and resumes erasures for one gateway process."""

    def __init__(self, parts: ErasureParts) -> None:
        self._p = parts
        self._running: dict[str, asyncio.Task[Erasure]] = {}
        self._waking: dict[str, asyncio.Task[None]] = {}
        whole: Steps = WholeScopeSteps(parts)
        # Rotation makes the REST adapter exact; it needs an embedding provider (root.py decides).
        rotation: Steps = RotationSteps(parts, parts.rotator) if parts.rotator is not None else NoRotation()
        steps: dict[ErasureKind, Steps] = {kind: whole for kind in WHOLE_SCOPE}
        steps |= {ErasureKind.FORGET_ONE: EntrySteps(parts), ErasureKind.ROTATE: rotation}
        self._runner = Runner(parts, steps, self._wake_at)

    @property
    def adapter(self) -> AdapterName:
        """Name of the configured adapter (``rest`` or ``kagent-db``)."""
        return self._p.eraser.name

    @property
    def rotates(self) -> bool:
        """True when forgotten and expired entries are removed by namespace rotation."""
        return self._p.rotator is not None

    async def blocked(self, scope_id: str) -> Reason | None:
        """Why re-consent must wait, or None.

        ``erasure_pending`` while an erasure of the scope is unfinished; ``erasure_failed`` while a
        failed erasure of it is not superseded by a later verified one (a retry of it, or a whole-scope
        erasure: ``state.audit.superseding``).
        """
        # A rotation never blocks consent: it only moves what the scope keeps, and fails safe.
        erasures = self._p.erasures
        history = await erasures.erasures_of_scope(scope_id, not_kind=ErasureKind.ROTATE)
        if any(e.state not in ERASURE_TERMINAL for e in history):
            return Reason.ERASURE_PENDING
        if await erasures.open_failures(scope_id, not_kind=ErasureKind.ROTATE):
            return Reason.ERASURE_FAILED
        return None

    async def _unerased(self, scope_id: str) -> list[str]:
        """The entries of a scope not yet physically deleted: what a whole-scope erasure lists."""
        return [e.entry_id for e in await self._p.history.unswept_entries(scope_id) if e.physically_deleted_at is None]

    async def request(
        self, scope: Scope, kind: ErasureKind, requested_by: str, entry_ids: Iterable[str] = ()
    ) -> Erasure:
        """Record an erasure; whole-scope erasures list every entry not yet physically deleted."""
        p = self._p
        ids = await self._unerased(scope.scope_id) if kind in WHOLE_SCOPE else list(entry_ids)
        erasure = await p.erasures.create_erasure(scope.scope_id, kind, ids, self.adapter, requested_by, p.clock())
        await self._recorded("erasure.requested", erasure, len(ids))
        return erasure

    async def _recorded(self, event: str, erasure: Erasure, count: int, **more: str) -> None:
        """Audit a newly recorded erasure and log ``event`` with its ids, kind, adapter and entry count."""
        await audit_erasure(self._p, erasure, Reason.ALLOWED)
        log.info(
            event,
            erasure_id=erasure.erasure_id,
            **more,
            scope_id=erasure.scope_id,
            kind=erasure.kind.value,
            adapter=self.adapter,
            count=count,
        )

    async def erase(self, scope: Scope, kind: ErasureKind, requested_by: str, entry_ids: Iterable[str] = ()) -> Erasure:
        """Request and run an erasure to its end; a forgotten entry is then rotated out where configured."""
        erasure = await self.request(scope, kind, requested_by, entry_ids)
        return await self._finish(scope, await self.run(erasure.erasure_id), requested_by)

    async def _finish(self, scope: Scope, done: Erasure, requested_by: str) -> Erasure:
        if done.kind is ErasureKind.FORGET_ONE and done.state is ErasureState.VERIFIED and self.rotates:
            # Its evidence turns complete once a rotation's read-back stamps the entry deleted. A rotation
            # already under way may have switched before the tombstone (its copy is then erased by lineage
            # but still stored): one more rotation removes that copy.
            for _ in range(2):
                rotated = await self.rotate(scope, requested_by)
                if rotated.state is not ErasureState.VERIFIED or await self._gone(done):
                    break
            return await self._p.erasures.get_erasure(done.erasure_id) or done
        return done

    async def retry(self, failed: Erasure, requested_by: str) -> Erasure:
        """Retry a failed erasure to its end: a new erasure of the same scope, kind and entries, which names
        the failure its chain began with; the failed one stays as it is (its evidence never changes).

        Idempotent: while the chain's newest retry is unfinished it is joined, and once it is verified
        it is answered as it stands. Raises :class:`NotRetryable` for an erasure that did not fail, or
        whose failure a later verified erasure already covers (the scope may have been re-consented
        since: a whole-scope retry would then disable it and erase what was saved after). The scope of
        a failed erasure stays disabled: only its subject's new consent enables it again, which the
        retry's verification allows (``blocked``).
        """
        p = self._p
        head = await p.erasures.retry_head(failed)
        if head.state is not ErasureState.FAILED:
            if head.erasure_id == failed.erasure_id:
                raise NotRetryable(Reason.ERASURE_PENDING if head.state not in ERASURE_TERMINAL else None)
            return await self.run(head.erasure_id)
        if await p.erasures.superseded_by(head.erasure_id) is not None:
            raise NotRetryable(None)
        scope = await p.scopes.get_scope(head.scope_id)
        if scope is None:
            raise NotRetryable(None)
        if head.kind is ErasureKind.ROTATE:
            newest = await p.erasures.erasures_of_scope(scope.scope_id, limit=1, kind=ErasureKind.ROTATE)
            if newest and newest[0].state not in ERASURE_TERMINAL:
                raise NotRetryable(Reason.ERASURE_PENDING)  # one rotation of a scope at a time
        ids = await self._unerased(scope.scope_id) if head.kind in WHOLE_SCOPE else head.entry_ids
        retry = await p.erasures.create_retry(head, ids, self.adapter, requested_by, p.clock())
        if retry is None:  # another caller started this chain's retry first: join it
            return await self.run((await p.erasures.retry_head(head)).erasure_id)
        await audit_erasure(p, head, Reason.ALLOWED, "erasure.retry")
        await self._recorded("erasure.retrying", retry, len(ids), retry_of=head.erasure_id)
        return await self._finish(scope, await self.run(retry.erasure_id), requested_by)

    async def _gone(self, erasure: Erasure) -> bool:
        """Whether every entry of the erasure (copies included) is stamped physically deleted."""
        current = await self._p.erasures.get_erasure(erasure.erasure_id) or erasure
        entries = await self._p.history.entries_by_id(erasure.scope_id, current.entry_ids)
        return all(e.physically_deleted_at is not None for e in entries)

    async def rotate(self, scope: Scope, requested_by: str) -> Erasure:
        """Rotate the scope's live namespace, joining a rotation of it that is already under way."""
        newest = await self._p.erasures.erasures_of_scope(scope.scope_id, limit=1, kind=ErasureKind.ROTATE)
        if newest and newest[0].state not in ERASURE_TERMINAL:
            return await self.run(newest[0].erasure_id)
        return await self.run((await self.request(scope, ErasureKind.ROTATE, requested_by)).erasure_id)

    async def run(self, erasure_id: str, until: ErasureState | None = None, *, wait: bool = True) -> Erasure:
        """Drive an erasure to a terminal state (or just to ``until``); survives the caller's cancellation.

        While another process runs it, ``wait`` waits for that run (taking over if its lease lapses);
        without ``wait`` the erasure is left to it and returned as it stands.
        """
        if until is not None:
            return await self._runner.drive(erasure_id, until, wait)
        task = self._running.get(erasure_id)
        if task is None:
            task = asyncio.create_task(self._runner.drive(erasure_id, None, wait))
            self._running[erasure_id] = task
            task.add_done_callback(lambda _t: self._running.pop(erasure_id, None))
        # A client that hangs up must not stop an erasure halfway; the task finishes on its own.
        return await asyncio.shield(task)

    async def resume_all(self) -> list[Erasure]:
        """Resume every unfinished erasure (called on start, before the listeners open)."""
        unfinished = await self._p.erasures.unfinished_erasures()
        if unfinished:
            log.info("erasure.resuming", count=len(unfinished))
        # A run a process died in holds its lease until it lapses (erasure.run_lease_s): waited for, then taken over.
        return list(await asyncio.gather(*(self.run(e.erasure_id) for e in unfinished)))

    async def resume_stale(self, older_than: timedelta) -> int:
        """Resume unfinished erasures nobody advanced for ``older_than`` (their runner died), and
        deferred ones whose wait is over."""
        now = self._p.clock()
        cutoff = now - older_than
        due = [
            e
            for e in await self._p.erasures.unfinished_erasures()
            if e.erasure_id not in self._running
            and ((e.not_before is None and e.updated_at < cutoff) or (e.not_before is not None and e.not_before <= now))
        ]
        # Another live process may be running one of them: it is left to that process.
        await asyncio.gather(*(self.run(e.erasure_id, wait=False) for e in due))
        return len(due)

    def _wake_at(self, erasure_id: str, until: datetime) -> None:
        """Resume a deferred erasure in this process once its wait is over (the sweeper also would)."""
        if erasure_id in self._waking:
            return

        async def wake() -> None:
            while (left := (until - self._p.clock()).total_seconds()) > 0:
                await asyncio.sleep(min(1.0, left))
            self._waking.pop(erasure_id, None)
            await self.run(erasure_id, wait=False)  # another process's sweeper may have woken it first

        self._waking[erasure_id] = asyncio.create_task(wake())

    async def close(self) -> None:
        """Stop waiting for deferred erasures (they stay recorded and are resumed on start)."""
        for task in self._waking.values():
            task.cancel()
        await asyncio.gather(*self._waking.values(), return_exceptions=True)
        self._waking.clear()

    async def offboard(self, scopes: list[Scope], requested_by: str) -> list[Erasure]:
        """Fence every scope of a principal first, then erase each (SPEC R-7)."""
        erasures: list[Erasure] = []
        for scope in scopes:
            pending = [
                e
                for e in await self._p.erasures.erasures_of_scope(scope.scope_id, not_kind=ErasureKind.ROTATE)
                if e.state not in ERASURE_TERMINAL and e.kind in WHOLE_SCOPE
            ]
            erasures.append(pending[0] if pending else await self.request(scope, ErasureKind.OFFBOARD, requested_by))
        # SECURITY: every scope is disabled before any deletion starts, so none keeps collecting.
        for erasure in erasures:
            await self.run(erasure.erasure_id, until=ErasureState.FENCED)
        return list(await asyncio.gather(*(self.run(e.erasure_id) for e in erasures)))
