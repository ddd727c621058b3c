"""Driving one erasure through its states: one runner at a time, every step before its compare-and-set.

Each step first does its work, which is idempotent, and then advances the durable erasure row
with a compare-and-set. A process killed between any two steps therefore redoes at most the
interrupted step when the erasure is resumed. One process works an erasure at a time: a lock in
this process, and across processes a run lease in the store, renewed while the steps run and
taken over once it lapses.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import datetime, timedelta

from sidecar import metrics, tracing
from sidecar.contentstore.adapters import AdapterError
from sidecar.erasure.parts import ErasureParts, audit_erasure
from sidecar.erasure.readback import Deferred
from sidecar.erasure.steps import Steps, step_to
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.state.types import (
    ERASURE_FORWARD,
    ERASURE_TERMINAL,
    Erasure,
    ErasureKind,
    ErasureState,
    RunTaken,
    Scope,
    StateError,
)

log = get_logger("erasure")
#: How often a caller that must wait for another process's run looks again.
_CLAIM_POLL_S = 0.25


class Runner:
    """Runs erasures' steps under their run leases, for one gateway process."""

    def __init__(
        self, parts: ErasureParts, steps: Mapping[ErasureKind, Steps], defer: Callable[[str, datetime], None]
    ) -> None:
        self._p, self._steps, self._defer = parts, steps, defer
        # One drive of an erasure at a time in this process (a lock), and one runner across processes
        # (the run lease in the store, held under this runner's id).
        self._runner = "r" + secrets.token_hex(12)
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}

    async def drive(self, erasure_id: str, until: ErasureState | None, wait: bool) -> Erasure:
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

    async def _claimed(self, erasure_id: str, until: ErasureState | None, wait: bool) -> Erasure:
        """Run the erasure's steps under its run lease, so one process works an erasure at a time.

        Two runners of one erasure would each do a step's work (a rotation's copy, above all) from
        what they read before the other wrote; the state's compare-and-set only orders the steps.
        """
        erasures = self._p.erasures
        while not await erasures.claim_erasure(erasure_id, self._runner, self._lease_end(), self._p.clock()):
            current = await erasures.get_erasure(erasure_id)
            if current is None:
                raise StateError(Reason.NOT_FOUND)
            if not wait or current.state in ERASURE_TERMINAL or current.state == until:
                return current
            await asyncio.sleep(_CLAIM_POLL_S)
        lost = asyncio.Event()
        keeper = asyncio.create_task(self._keep_lease(erasure_id, lost))
        try:
            return await self._run_steps(erasure_id, until, lost)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            with suppress(StateError):  # unreleased, it lapses after erasure.run_lease_s
                await erasures.release_erasure(erasure_id, self._runner)

    def _lease_end(self) -> datetime:
        return self._p.clock() + timedelta(seconds=self._p.run_lease_s)

    async def _keep_lease(self, erasure_id: str, lost: asyncio.Event) -> None:
        """Renew the run lease while the steps run; set ``lost`` once another runner holds it."""
        while True:
            await asyncio.sleep(self._p.run_lease_s / 3)
            try:
                if not await self._p.erasures.renew_erasure(erasure_id, self._runner, self._lease_end()):
                    lost.set()
                    return
            except StateError:
                continue  # the store is away: the steps fail on it too, and the lease lapses on its own

    async def _run_steps(self, erasure_id: str, until: ErasureState | None, lost: asyncio.Event) -> Erasure:
        erasures = self._p.erasures
        erasure = await erasures.get_erasure(erasure_id)
        if erasure is None:
            raise StateError(Reason.NOT_FOUND)
        while erasure.state not in ERASURE_TERMINAL and erasure.state != until:
            if lost.is_set():
                return self._taken(erasure)
            target = ERASURE_FORWARD[erasure.state]
            try:
                await self._work(erasure, target)
            except Deferred as later:
                await erasures.defer_erasure(erasure_id, later.until)
                self._defer(erasure_id, later.until)
                log.info("erasure.deferred", erasure_id=erasure_id, scope_id=erasure.scope_id, step=target)
                return await erasures.get_erasure(erasure_id) or erasure
            except AdapterError as exc:
                return await self._fail(erasure, exc.reason)
            except RunTaken:
                return self._taken(await erasures.get_erasure(erasure_id) or erasure)
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

    async def _scope(self, erasure: Erasure) -> Scope:
        scope = await self._p.scopes.get_scope(erasure.scope_id)
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
    async def _work(self, erasure: Erasure, target: ErasureState) -> None:
        await step_to(self._steps[erasure.kind], target)(await self._scope(erasure), erasure)

    async def _step(
        self, erasure: Erasure, target: ErasureState, failure_reason: str | None = None
    ) -> tuple[Erasure, bool]:
        """Move the row to ``target``; (row, True) when this runner did, (current row, False) if another did."""
        erasures = self._p.erasures
        try:
            moved = await erasures.advance_erasure(erasure.erasure_id, target, self._p.clock(), failure_reason)
            return moved, True
        except StateError as exc:
            if exc.reason is not Reason.INTERNAL_ERROR:
                raise
            # Another runner advanced it first (compare-and-set lost); continue from its state.
            reloaded = await erasures.get_erasure(erasure.erasure_id)
            if reloaded is None:
                raise
            return reloaded, False

    async def _advance(self, erasure: Erasure, target: ErasureState) -> Erasure:
        advanced, ours = await self._step(erasure, target)
        if ours and advanced.state is ErasureState.VERIFIED:
            await audit_erasure(self._p, advanced, Reason.ALLOWED)
            if advanced.kind is ErasureKind.ROTATE:
                metrics.ROTATIONS.labels(ErasureState.VERIFIED).inc()
        return advanced

    async def _fail(self, erasure: Erasure, reason: Reason) -> Erasure:
        await self._steps[erasure.kind].failed(await self._p.scopes.get_scope(erasure.scope_id), erasure)
        failed, ours = await self._step(erasure, ErasureState.FAILED, reason.value)
        if not ours:
            return failed
        if erasure.kind is ErasureKind.ROTATE:
            metrics.ROTATIONS.labels(ErasureState.FAILED).inc()
        log.warning(
            "erasure.failed",
            erasure_id=erasure.erasure_id,
            scope_id=erasure.scope_id,
            kind=erasure.kind,
            reason=reason.value,
            step=erasure.state,
            adapter=erasure.adapter,
        )
        await audit_erasure(self._p, failed, reason)
        return failed
