"""The erasure state machine (SPEC D4): one path for forget-one, forget-all, off, withdrawal, offboarding.

``requested → fenced → quiesced → deleted → verified``, or ``failed`` from any unfinished state.
Each step first does its work, which is idempotent, and then advances the durable erasure row
with a compare-and-set. A process killed between any two steps therefore redoes at most the
interrupted step when the erasure is resumed (on start, and by the sweeper for stalled rows).

Whole-scope kinds fence by advancing the generation, which retires the scope's live storage
namespace: withdrawal, off and offboarding also disable the scope; forget-all keeps consent and
writes to a fresh namespace from then on, so every in-flight write of the old one is stale.
Deletion then covers every namespace the scope ever had (every storage key, generation and, via
the adapter's query, every agent-name spelling), so rows that landed without a ledger record
are cleared too. Verification is a read-back of each of those namespaces, recorded as evidence;
only what was read back is ever claimed (SPEC D4). A namespace that a write of unknown outcome
may still reach defers verification until its lease ends, then clears and reads back again. A
failure leaves the scope disabled with a reason code; it never resumes on a best-effort assumption.

A ``rotate`` erasure (``rotation.py``) moves what a scope keeps into a fresh namespace so the old
one can be deleted whole over REST; forget-one runs one after its tombstone when configured. It
fails without disabling the scope (nothing unsafe happened) and never blocks re-consent.
"""

from __future__ import annotations

import asyncio
import enum
import secrets
from collections.abc import Iterable
from contextlib import suppress
from datetime import datetime, timedelta

from sidecar import metrics, tracing
from sidecar.contentstore.adapters import AdapterError
from sidecar.erasure.ports import erasure_records
from sidecar.erasure.readback import Deferred, quiesce, read_back
from sidecar.erasure.rotation import RotationSteps
from sidecar.governance import Governance
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.state.types import (
    ERASURE_FORWARD,
    ERASURE_TERMINAL,
    Erasure,
    LedgerEntry,
    Namespace,
    RunTaken,
    Scope,
    StateError,
)

log = get_logger("erasure")
#: How often a caller that must wait for another process's run looks again.
_CLAIM_POLL_S = 0.25


class Kind(enum.StrEnum):
    """What is erased and how the scope is fenced first."""

    FORGET_ONE = "forget_one"
    FORGET_ALL = "forget_all"
    OFF = "off"
    WITHDRAW = "withdraw"
    OFFBOARD = "offboard"
    ROTATE = "rotate"


WHOLE_SCOPE = frozenset({Kind.FORGET_ALL, Kind.OFF, Kind.WITHDRAW, Kind.OFFBOARD})


def _by_namespace(entries: Iterable[LedgerEntry]) -> dict[str | None, list[str]]:
    groups: dict[str | None, list[str]] = {}
    for e in entries:
        groups.setdefault(e.ns_id, []).append(e.entry_id)
    return groups


class ErasureEngine:
    """Creates, runs and resumes erasures for one gateway process."""

    def __init__(self, gov: Governance) -> None:
        self._gov = gov
        self._running: dict[str, asyncio.Task[Erasure]] = {}
        self._waking: dict[str, asyncio.Task[None]] = {}
        # One drive of an erasure at a time in this process (a lock), and one runner across processes
        # (the run lease in the store, held under this engine's runner id).
        self._runner = "r" + secrets.token_hex(12)
        self._lease_s = gov.settings.erasure.run_lease_s
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}
        # Rotation makes the REST adapter exact; it needs an embedding provider (build.py decides).
        self._rotation = RotationSteps(gov, gov.rotator) if gov.rotator is not None else None

    @property
    def adapter(self) -> str:
        """Name of the configured adapter (``rest`` or ``kagent-db``)."""
        return self._gov.eraser.name

    @property
    def rotates(self) -> bool:
        """True when forgotten and expired entries are removed by namespace rotation."""
        return self._rotation is not None

    async def blocked(self, scope_id: str) -> Reason | None:
        """Why re-consent must wait, or None.

        ``erasure_pending`` while an erasure of the scope is unfinished; ``erasure_failed`` when a
        failed erasure is newer than the last verified whole-scope erasure.
        """
        # A rotation never blocks consent: it only moves what the scope keeps, and fails safe.
        history = await erasure_records(self._gov).erasures.erasures_of_scope(scope_id, not_kind=Kind.ROTATE.value)
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
        store = erasure_records(self._gov)
        ids = list(entry_ids)
        if kind in WHOLE_SCOPE:
            ids = [
                e.entry_id
                for e in await store.history.unswept_entries(scope.scope_id)
                if e.physically_deleted_at is None
            ]
        erasure = await store.erasures.create_erasure(
            scope.scope_id, kind.value, ids, self.adapter, requested_by, self._now()
        )
        await self._audit(erasure, Reason.ALLOWED)
        log.info(
            "erasure.requested",
            erasure_id=erasure.erasure_id,
            scope_id=scope.scope_id,
            kind=kind.value,
            adapter=self.adapter,
            count=len(ids),
        )
        return erasure

    async def erase(self, scope: Scope, kind: Kind, requested_by: str, entry_ids: Iterable[str] = ()) -> Erasure:
        """Request and run an erasure to its end; a forgotten entry is then rotated out where configured."""
        erasure = await self.request(scope, kind, requested_by, entry_ids)
        done = await self.run(erasure.erasure_id)
        if kind is Kind.FORGET_ONE and done.state == "verified" and self.rotates:
            # Its evidence turns complete once a rotation's read-back stamps the entry deleted. A rotation
            # already under way may have switched before the tombstone (its copy is then erased by lineage
            # but still stored): one more rotation removes that copy.
            for _ in range(2):
                if (await self.rotate(scope, requested_by)).state != "verified" or await self._gone(done):
                    break
            return await erasure_records(self._gov).erasures.get_erasure(done.erasure_id) or done
        return done

    async def _gone(self, erasure: Erasure) -> bool:
        """Whether every entry of the erasure (copies included) is stamped physically deleted."""
        current = await erasure_records(self._gov).erasures.get_erasure(erasure.erasure_id) or erasure
        entries = await erasure_records(self._gov).history.entries_by_id(erasure.scope_id, current.entry_ids)
        return all(e.physically_deleted_at is not None for e in entries)

    async def rotate(self, scope: Scope, requested_by: str) -> Erasure:
        """Rotate the scope's live namespace, joining a rotation of it that is already under way."""
        newest = await erasure_records(self._gov).erasures.erasures_of_scope(
            scope.scope_id, limit=1, kind=Kind.ROTATE.value
        )
        if newest and newest[0].state not in ERASURE_TERMINAL:
            return await self.run(newest[0].erasure_id)
        return await self.run((await self.request(scope, Kind.ROTATE, requested_by)).erasure_id)

    async def run(self, erasure_id: str, until: str | None = None, *, wait: bool = True) -> Erasure:
        """Drive an erasure to a terminal state (or just to ``until``); survives the caller's cancellation.

        While another process runs it, ``wait`` waits for that run (taking over if its lease lapses);
        without ``wait`` the erasure is left to it and returned as it stands.
        """
        if until is not None:
            return await self._drive(erasure_id, until, wait)
        task = self._running.get(erasure_id)
        if task is None:
            task = asyncio.create_task(self._drive(erasure_id, None, wait))
            self._running[erasure_id] = task
            task.add_done_callback(lambda _t: self._running.pop(erasure_id, None))
        # A client that hangs up must not stop an erasure halfway; the task finishes on its own.
        return await asyncio.shield(task)

    async def resume_all(self) -> list[Erasure]:
        """Resume every unfinished erasure (called on start, before the listeners open)."""
        unfinished = await erasure_records(self._gov).erasures.unfinished_erasures()
        if unfinished:
            log.info("erasure.resuming", count=len(unfinished))
        # A run a process died in holds its lease until it lapses (erasure.run_lease_s): waited for, then taken over.
        return list(await asyncio.gather(*(self.run(e.erasure_id) for e in unfinished)))

    async def resume_stale(self, older_than: timedelta) -> int:
        """Resume unfinished erasures nobody advanced for ``older_than`` (their runner died), and
        deferred ones whose wait is over."""
        now = self._now()
        cutoff = now - older_than
        due = [
            e
            for e in await erasure_records(self._gov).erasures.unfinished_erasures()
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
            while (left := (until - self._now()).total_seconds()) > 0:
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
                for e in await erasure_records(self._gov).erasures.erasures_of_scope(
                    scope.scope_id, not_kind=Kind.ROTATE.value
                )
                if e.state not in ERASURE_TERMINAL and e.kind in WHOLE_SCOPE
            ]
            erasures.append(pending[0] if pending else await self.request(scope, Kind.OFFBOARD, requested_by))
        # SECURITY: every scope is disabled before any deletion starts, so none keeps collecting.
        for erasure in erasures:
            await self.run(erasure.erasure_id, until="fenced")
        return list(await asyncio.gather(*(self.run(e.erasure_id) for e in erasures)))

    # -- the state machine ----------------------------------------------------------------------

    def _now(self) -> datetime:
        return self._gov.now()

    async def _drive(self, erasure_id: str, until: str | None, wait: bool) -> Erasure:
        """One drive at a time per erasure in this process; see ``_claimed`` across processes."""
        lock, users = self._turns.get(erasure_id, (asyncio.Lock(), 0))
        self._turns[erasure_id] = (lock, users + 1)
        try:
            async with lock:
                return await self._claimed(erasure_id, until, wait)
        finally:
            lock, users = self._turns[erasure_id]
            if users == 1:
                del self._turns[erasure_id]
            else:
                self._turns[erasure_id] = (lock, users - 1)

    async def _claimed(self, erasure_id: str, until: str | None, wait: bool) -> Erasure:
        """Run the erasure's steps under its run lease, so one process works an erasure at a time.

        Two runners of one erasure would each do a step's work (a rotation's copy, above all) from
        what they read before the other wrote; the state's compare-and-set only orders the steps.
        """
        store = erasure_records(self._gov)
        while not await store.erasures.claim_erasure(erasure_id, self._runner, self._lease_end(), self._now()):
            current = await store.erasures.get_erasure(erasure_id)
            if current is None:
                raise StateError(Reason.NOT_FOUND)
            if not wait or current.state in ERASURE_TERMINAL or current.state == until:
                return current
            await asyncio.sleep(_CLAIM_POLL_S)
        lost = asyncio.Event()
        keeper = asyncio.create_task(self._keep_lease(erasure_id, lost))
        try:
            return await self._steps(erasure_id, until, lost)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            with suppress(StateError):  # unreleased, it lapses after erasure.run_lease_s
                await store.erasures.release_erasure(erasure_id, self._runner)

    def _lease_end(self) -> datetime:
        return self._now() + timedelta(seconds=self._lease_s)

    async def _keep_lease(self, erasure_id: str, lost: asyncio.Event) -> None:
        """Renew the run lease while the steps run; set ``lost`` once another runner holds it."""
        while True:
            await asyncio.sleep(self._lease_s / 3)
            try:
                if not await erasure_records(self._gov).erasures.renew_erasure(
                    erasure_id, self._runner, self._lease_end()
                ):
                    lost.set()
                    return
            except StateError:
                continue  # the store is away: the steps fail on it too, and the lease lapses on its own

    async def _steps(self, erasure_id: str, until: str | None, lost: asyncio.Event) -> Erasure:
        store = erasure_records(self._gov)
        erasure = await store.erasures.get_erasure(erasure_id)
        if erasure is None:
            raise StateError(Reason.NOT_FOUND)
        while erasure.state not in ERASURE_TERMINAL and erasure.state != until:
            if lost.is_set():
                return self._taken(erasure)
            target = ERASURE_FORWARD[erasure.state]
            try:
                await self._work(erasure, target)
            except Deferred as wait:
                await store.erasures.defer_erasure(erasure_id, wait.until)
                self._wake_at(erasure_id, wait.until)
                log.info("erasure.deferred", erasure_id=erasure_id, scope_id=erasure.scope_id, step=target)
                return await store.erasures.get_erasure(erasure_id) or erasure
            except AdapterError as exc:
                return await self._fail(erasure, exc.reason)
            except RunTaken:
                return self._taken(await store.erasures.get_erasure(erasure_id) or erasure)
            except StateError as exc:
                if exc.reason is Reason.STATE_UNAVAILABLE:
                    raise  # left unfinished; resumed once the store answers again
                return await self._fail(erasure, Reason.ERASURE_FAILED)
            erasure = await self._advance(erasure, target)
        if erasure.state in ERASURE_TERMINAL and until is None:
            log.info(
                "erasure.finished",
                erasure_id=erasure_id,
                scope_id=erasure.scope_id,
                kind=erasure.kind,
                state=erasure.state,
                adapter=erasure.adapter,
            )
        return erasure

    @staticmethod
    def _taken(erasure: Erasure) -> Erasure:
        """Another runner holds the erasure now: stop here, changing nothing; it finishes the erasure."""
        log.warning("erasure.run_taken", erasure_id=erasure.erasure_id, scope_id=erasure.scope_id, step=erasure.state)
        return erasure

    async def _step(self, erasure: Erasure, target: str, failure_reason: str | None = None) -> tuple[Erasure, bool]:
        """Move the row to ``target``; (row, True) when this runner did, (current row, False) if another did."""
        store = erasure_records(self._gov)
        try:
            moved: Erasure = await store.erasures.advance_erasure(
                erasure.erasure_id, target, self._now(), failure_reason=failure_reason
            )
            return moved, True
        except StateError as exc:
            if exc.reason is not Reason.INTERNAL_ERROR:
                raise
            # Another runner advanced it first (compare-and-set lost); continue from its state.
            reloaded = await store.erasures.get_erasure(erasure.erasure_id)
            if reloaded is None:
                raise
            return reloaded, False

    async def _advance(self, erasure: Erasure, target: str) -> Erasure:
        advanced, ours = await self._step(erasure, target)
        if not ours:
            return advanced
        if advanced.state == "verified":
            await self._audit(advanced, Reason.ALLOWED)
            if advanced.kind == Kind.ROTATE:
                metrics.ROTATIONS.labels("verified").inc()
        return advanced

    async def _fail(self, erasure: Erasure, reason: Reason) -> Erasure:
        store, now = erasure_records(self._gov), self._now()
        scope = await store.scopes.get_scope(erasure.scope_id)
        if erasure.kind == Kind.ROTATE:
            # Nothing unsafe happened: the old namespace stays live and writable again.
            await store.rotations.release_rotation(erasure.erasure_id, now)
        elif scope is not None and scope.enabled:
            # SECURITY: the scope is disabled before the failure is recorded, so a crash in between
            # can never leave a failed erasure on an enabled scope.
            await store.scopes.disable(scope.scope_id, now)
        failed, ours = await self._step(erasure, "failed", reason.value)
        if not ours:
            return failed
        if erasure.kind == Kind.ROTATE:
            metrics.ROTATIONS.labels("failed").inc()
        log.warning(
            "erasure.failed",
            erasure_id=erasure.erasure_id,
            scope_id=erasure.scope_id,
            kind=erasure.kind,
            reason=reason.value,
            step=erasure.state,
            adapter=erasure.adapter,
        )
        await self._audit(failed, reason)
        return failed

    def _revision(self) -> str | None:
        revision: str | None = self._gov.policy.revision
        return revision

    async def _audit(self, erasure: Erasure, reason: Reason) -> None:
        await erasure_records(self._gov).audit_log.audit(
            "erasure",
            reason.value,
            scope_id=erasure.scope_id,
            erasure_id=erasure.erasure_id,
            operation=f"erasure.{erasure.kind}.{erasure.state}",
            policy_revision=self._revision(),
            now=self._now(),
        )

    async def _scope(self, erasure: Erasure) -> Scope:
        scope: Scope | None = await erasure_records(self._gov).scopes.get_scope(erasure.scope_id)
        if scope is None:
            raise StateError(Reason.NOT_FOUND)
        return scope

    @tracing.traced(
        "memgov.erasure.step",
        lambda self, erasure, target: {
            "erasure_id": erasure.erasure_id,
            "kind": erasure.kind,
            "step": target,
            "adapter": erasure.adapter,
        },
    )
    async def _work(self, erasure: Erasure, target: str) -> None:
        scope = await self._scope(erasure)
        kind = Kind(erasure.kind)
        if kind is Kind.ROTATE:
            await self._rotate_step(scope, erasure, target)
        elif target == "fenced":
            await self._fence(scope, kind, erasure)
        elif target == "quiesced":
            if kind in WHOLE_SCOPE:
                # Writes into retired namespaces that were already under way.
                await quiesce(self._gov, scope, erasure, lambda: self._stale_inflight(scope))
        elif target == "deleted":
            await (self._delete_scope(scope) if kind in WHOLE_SCOPE else self._delete_entries(scope, erasure))
        else:
            await (self._verify_scope(scope, erasure) if kind in WHOLE_SCOPE else self._verify_entries(scope, erasure))

    async def _rotate_step(self, scope: Scope, erasure: Erasure, target: str) -> None:
        if self._rotation is None:
            raise AdapterError(Reason.ERASURE_FAILED)  # resumed where rotation is no longer configured
        step = {
            "fenced": self._rotation.fence,
            "quiesced": self._rotation.quiesce,
            "deleted": self._rotation.delete,
            "verified": self._rotation.verify,
        }[target]
        await step(scope, erasure)

    async def _fence(self, scope: Scope, kind: Kind, erasure: Erasure) -> None:
        store, now = erasure_records(self._gov), self._now()
        if kind is Kind.FORGET_ONE:
            # The entry, and every copy a rotation made of it, is unreadable through memgov from
            # this moment, whatever the adapter.
            await store.rotations.tombstone_forgotten(scope.scope_id, erasure.erasure_id, erasure.entry_ids, now)
            return
        # A disabled scope admits no write at any generation, so it is fenced already. Re-consent
        # is refused while an erasure is unfinished, so an enabled scope here was never fenced.
        if not scope.enabled:
            return
        if kind is Kind.WITHDRAW:
            _, receipt = await store.scopes.withdraw(scope.scope_id, now)
            await store.audit_log.audit(
                "consent",
                Reason.ALLOWED.value,
                scope_id=scope.scope_id,
                erasure_id=erasure.erasure_id,
                operation="consent.withdraw",
                policy_revision=self._revision(),
                now=now,
            )
            log.info(
                "consent.withdrawn",
                scope_id=scope.scope_id,
                receipt_id=receipt.receipt_id,
                generation=receipt.generation_after,
            )
        elif kind is Kind.FORGET_ALL:
            await store.scopes.advance_generation(scope.scope_id, now)
        else:
            await store.scopes.disable(scope.scope_id, now)

    async def _stale_inflight(self, scope: Scope) -> int:
        live = scope.namespace.ns_id if scope.namespace is not None else None
        count: int = await erasure_records(self._gov).scopes.inflight_count(scope.scope_id, self._now(), except_ns=live)
        return count

    async def _retired(self, scope: Scope) -> list[Namespace]:
        """Every namespace of the scope except the live one: each storage key it can no longer write."""
        return [
            n
            for n in await erasure_records(self._gov).namespaces.namespaces_of_scope(scope.scope_id)
            if n.state != "live"
        ]

    async def _delete_scope(self, scope: Scope) -> None:
        eraser, agent = self._gov.eraser, self._gov.query_name(scope.agent)
        for ns in await self._retired(scope):
            # Over REST an empty namespace costs one read; the delete only runs where rows remain.
            if ns.state == "retired" and (eraser.exact or await eraser.remaining(agent, ns.storage_key)):
                await eraser.delete_namespace(agent, ns.storage_key)

    async def _verify_scope(self, scope: Scope, erasure: Erasure) -> None:
        """Every namespace the scope ever had but its live one reads back empty (SPEC D4)."""
        await read_back(self._gov, scope, erasure, await self._retired(scope))

    async def _entries(self, scope: Scope, erasure: Erasure) -> dict[Namespace, list[str]]:
        store = erasure_records(self._gov)
        groups = _by_namespace(await store.history.entries_by_id(scope.scope_id, erasure.entry_ids))
        by_id = {n.ns_id: n for n in await store.namespaces.namespaces_by_id(scope.scope_id, [g for g in groups if g])}
        return {by_id[ns_id]: ids for ns_id, ids in groups.items() if ns_id in by_id}

    async def _delete_entries(self, scope: Scope, erasure: Erasure) -> None:
        eraser = self._gov.eraser
        if not eraser.exact:
            return  # tombstoned; physically deleted when its namespace is cleared
        for ns, ids in (await self._entries(scope, erasure)).items():
            await eraser.delete_entries(self._gov.query_name(scope.agent), ns.storage_key, ids)

    async def _verify_entries(self, scope: Scope, erasure: Erasure) -> None:
        eraser, store = self._gov.eraser, erasure_records(self._gov)
        for ns, ids in (await self._entries(scope, erasure)).items():
            # Read-after-delete: never readable through memgov again, and gone from kagent when exact.
            if await store.ledger.filter_live(scope.scope_id, ns.ns_id, ids, self._now()):
                raise AdapterError(Reason.VERIFICATION_FAILED)
            if eraser.exact:
                remaining = len(await eraser.remaining(self._gov.query_name(scope.agent), ns.storage_key, ids))
                await store.erasures.record_readback(erasure.erasure_id, ns.ns_id, remaining, "entries", self._now())
                if remaining:
                    raise AdapterError(Reason.VERIFICATION_FAILED)
                now = self._now()
                await store.ledger.mark_physically_deleted(ids, now)
                await store.ledger.mark_verified(ids, now)
