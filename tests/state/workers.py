"""Worker processes for the concurrency tests: each opens its own store on the shared database.

A :class:`Pool` spawns its processes once per test session (``spawn``, so nothing but the
database is shared with the test process). For each round every worker gets exactly one job on
its own queue, opens a fresh store, waits at a shared barrier so all of them start together, runs
the job and reports the result (or its traceback) on a common queue.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue as queue_mod
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sidecar.reasons import Reason
from sidecar.state import BudgetClaim, StateError, StateStore, open_store
from sidecar.state.types import WriteAsk

#: The codes a write that lost the race to a consent change is refused with.
FENCES = frozenset({Reason.CONSENT_MISSING, Reason.CONSENT_DISABLED, Reason.STALE_GENERATION})

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
#: Upper bound on attempts of a worker that loops until it is fenced (keeps a broken store finite).
MAX_ATTEMPTS = 5000
CTX = multiprocessing.get_context("spawn")

Job = Callable[..., Awaitable[Any]]


async def open_only(store: StateStore) -> int:
    """Report the schema version after opening (and so migrating) at the same moment as the others."""
    return await store.schema_version()


async def flip_consent(store: StateStore, scope_id: str, rounds: int) -> list[int]:
    """Alternate grant and withdraw; return the generations this worker produced."""
    out = []
    for i in range(rounds):
        if i % 2:
            scope, _ = await store.scopes.withdraw(scope_id, NOW)
        else:
            scope, _ = await store.scopes.grant(scope_id, "remember preferences", "v1", NOW)
        out.append(scope.generation)
    return out


async def write_until_fenced(
    store: StateStore, scope_ids: list[str], generation: int, signal: Any
) -> list[tuple[int, str | None]]:
    """Per scope, in turn: record in-flight writes at ``generation`` until fenced.

    Signals after the first success on each scope; returns (successes, fence reason) per scope.
    """
    out: list[tuple[int, str | None]] = []
    for scope_id in scope_ids:
        successes, reason = 0, None
        scope = await store.scopes.get_scope(scope_id)
        ns_id = scope.namespace.ns_id if scope is not None and scope.namespace is not None else ""
        for _ in range(MAX_ATTEMPTS):
            try:
                await store.scopes.begin_write(scope_id, generation, ns_id, 600, NOW)
            except StateError as exc:
                if exc.reason not in FENCES:
                    raise
                reason = exc.reason.value
                break
            successes += 1
            if successes == 1:
                signal.put("started")
            # A breath between writes: SQLite's busy handler sleeps, so without it the withdrawing
            # process can starve until every attempt is spent and no race takes place at all.
            await asyncio.sleep(0.001)
        out.append((successes, reason))
    return out


async def admit_until_fenced(
    store: StateStore, scope_ids: list[str], generation: int, signal: Any
) -> list[tuple[int, str | None]]:
    """As ``write_until_fenced``, through the one-transaction admission of a save (slots and in-flight record)."""
    out: list[tuple[int, str | None]] = []
    for scope_id in scope_ids:
        successes, reason = 0, None
        for _ in range(MAX_ATTEMPTS):
            adm = await store.admission.admit(
                scope_id, generation, lambda _scope, _window: [], NOW, write=WriteAsk(1, 10**6, 600)
            )
            if adm.op_id is None:
                stale = adm.scope is not None and adm.scope.generation != generation
                reason = "stale_generation" if stale else "consent_disabled"
                break
            successes += 1
            if successes == 1:
                signal.put("started")
            await asyncio.sleep(0.001)  # as in write_until_fenced: let the withdrawing process in
        out.append((successes, reason))
    return out


async def admit_slots(store: StateStore, scope_ids: list[str], attempts: int, cap: int) -> list[int]:
    """As ``reserve_slots``, through the one-transaction admission of a save."""
    granted = [0] * len(scope_ids)
    for i, scope_id in enumerate(scope_ids):
        for _ in range(attempts):
            adm = await store.admission.admit(scope_id, 1, lambda _scope, _window: [], NOW, write=WriteAsk(1, cap, 600))
            granted[i] += len(adm.slots)
    return granted


async def reserve_slots(store: StateStore, scope_ids: list[str], attempts: int, cap: int) -> list[int]:
    """Per scope: try to reserve one slot ``attempts`` times against ``cap``; return how many were granted."""
    granted = [0] * len(scope_ids)
    for i, scope_id in enumerate(scope_ids):
        scope = await store.scopes.get_scope(scope_id)
        ns_id = scope.namespace.ns_id if scope is not None and scope.namespace is not None else ""
        for _ in range(attempts):
            try:
                granted[i] += len(await store.ledger.reserve_entries(scope_id, 1, ns_id, 1, cap, NOW))
            except StateError as exc:
                if exc.reason is not Reason.ENTRY_CAP_REACHED:
                    raise
    return granted


async def reserve_budget(store: StateStore, claim: BudgetClaim, attempts: int) -> int:
    """Reserve ``claim`` ``attempts`` times; return how many were admitted."""
    results = [await store.budgets.reserve_budget([claim], NOW) for _ in range(attempts)]
    return sum(r is None for r in results)


async def _job(barrier: Any, url: str, job: Job, args: tuple[Any, ...], signal: Any) -> Any:
    # open_only races the migrations themselves, so it waits before opening; the rest after.
    if job is open_only:
        barrier.wait(60)
    store = await open_store(url)
    try:
        if job is not open_only:
            barrier.wait(60)
        if job in (write_until_fenced, admit_until_fenced):
            args = (*args, signal)
        return await job(store, *args)
    finally:
        await store.close()


def _serve(jobs: Any, results: Any, signal: Any, barrier: Any) -> None:
    while (item := jobs.get()) is not None:
        url, job, args = item
        try:
            results.put(("ok", asyncio.run(_job(barrier, url, job, args, signal))))
        except BaseException:  # noqa: BLE001 - reported, so the test fails with the worker's traceback
            barrier.abort()
            results.put(("error", traceback.format_exc()))


class Pool:
    """A fixed set of spawned worker processes that run one job each per round."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.signal = CTX.Queue()
        self._results = CTX.Queue()
        self._barrier = CTX.Barrier(size)
        self._jobs = [CTX.Queue() for _ in range(size)]
        self._procs = [
            CTX.Process(target=_serve, args=(q, self._results, self.signal, self._barrier), daemon=True)
            for q in self._jobs
        ]
        for p in self._procs:
            p.start()

    def start(self, url: str, job: Job, argsets: list[tuple[Any, ...]]) -> None:
        """Hand one job to every worker (one argument tuple each)."""
        assert len(argsets) == self.size
        self._barrier.reset()
        for q, args in zip(self._jobs, argsets, strict=True):
            q.put((url, job, args))

    def results(self, timeout: float = 90) -> list[Any]:
        """Each worker's return value (completion order); a worker's exception fails the caller."""
        results = [self._results.get(timeout=timeout) for _ in range(self.size)]
        errors = [detail for status, detail in results if status == "error"]
        assert not errors, errors[0]
        return [detail for _, detail in results]

    def run(self, url: str, job: Job, argsets: list[tuple[Any, ...]]) -> list[Any]:
        """Run one round to completion."""
        self.start(url, job, argsets)
        return self.results()

    def wait_signals(self, count: int, timeout: float = 60) -> None:
        """Block until ``count`` workers have signalled (e.g. their first successful write)."""
        for _ in range(count):
            self.signal.get(timeout=timeout)

    def close(self) -> None:
        """Stop the workers."""
        for q in self._jobs:
            q.put(None)
        for p in self._procs:
            p.join(30)
        while True:  # drain leftovers so the queues' feeder threads can exit
            try:
                self.signal.get_nowait()
            except queue_mod.Empty:
                break
