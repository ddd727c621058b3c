"""Atomic operations under real concurrency: separate processes against one database."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.state import BudgetClaim, StateStore
from tests.state import workers
from tests.state.workers import Pool
from tests.support.state import NOW, new_scope, ns_of


class TestConsentRaces:
    async def test_concurrent_grants_and_withdrawals_never_lose_a_generation(
        self, store: StateStore, state_url: str, pool: Pool
    ) -> None:
        """Every consent change from every process gets its own generation and its own receipt."""
        scope = await new_scope(store, granted=False)
        rounds = 10
        results = pool.run(state_url, workers.flip_consent, [(scope.scope_id, rounds)] * pool.size)
        produced = sorted(g for per_worker in results for g in per_worker)
        assert produced == list(range(1, pool.size * rounds + 1))
        assert (await store.scopes.get_scope(scope.scope_id)).generation == pool.size * rounds  # type: ignore[union-attr]  # the scope exists
        assert [r.generation_after for r in await store.scopes.receipts(scope.scope_id)] == produced

    @pytest.mark.parametrize(
        "job", [workers.write_until_fenced, workers.admit_until_fenced], ids=["begin_write", "admit"]
    )
    async def test_no_stale_write_is_recorded_after_withdrawal(
        self, store: StateStore, state_url: str, pool: Pool, job: workers.Job
    ) -> None:
        """Writes racing a withdrawal either are in flight when it commits or are refused as stale."""
        scopes = [(await new_scope(store, f"!r{i}:example.org")).scope_id for i in range(8)]
        first = {scope_id: await ns_of(store, scope_id) for scope_id in scopes}
        pool.start(state_url, job, [(scopes, 1)] * pool.size)
        recorded = []
        for scope_id in scopes:  # several rounds: each one is a fresh race
            await asyncio.to_thread(pool.wait_signals, pool.size)
            withdrawn, _ = await store.scopes.withdraw(scope_id, NOW)
            assert withdrawn.generation == 2
            recorded.append(await store.scopes.inflight_count(scope_id, NOW, ns_id=first[scope_id]))
        results = pool.results()
        for i, scope_id in enumerate(scopes):
            assert [per_worker[i][1] for per_worker in results] == ["stale_generation"] * pool.size
            assert sum(per_worker[i][0] for per_worker in results) == recorded[i]
            assert await store.scopes.inflight_count(scope_id, NOW, ns_id=first[scope_id]) == recorded[i]


class TestCapRaces:
    @pytest.mark.parametrize("job", [workers.reserve_slots, workers.admit_slots], ids=["reserve_entries", "admit"])
    async def test_concurrent_reservations_stop_exactly_at_the_cap(
        self, store: StateStore, state_url: str, pool: Pool, job: workers.Job
    ) -> None:
        """Savers in many processes together get exactly cap slots, never more."""
        scopes = [(await new_scope(store, f"!r{i}:example.org")).scope_id for i in range(4)]
        cap = 10
        results = pool.run(state_url, job, [(scopes, 6, cap)] * pool.size)
        assert [sum(per_worker[i] for per_worker in results) for i in range(len(scopes))] == [cap] * len(scopes)
        assert (await store.stats())["ledger_pending"] == cap * len(scopes)


class TestBudgetRaces:
    @pytest.mark.parametrize(
        "claim",
        [
            BudgetClaim("bucket", "sender", limit=7, refill_per_s=0.0),
            BudgetClaim("window", "scope", limit=7, window_s=3600, reason="hourly_budget_exhausted"),
            BudgetClaim("counter", "conversation", limit=7, ttl_s=600, reason="prefetch_limit"),
        ],
        ids=["bucket", "window", "counter"],
    )
    async def test_concurrent_reservers_admit_exactly_the_limit(
        self, store: StateStore, state_url: str, pool: Pool, claim: BudgetClaim
    ) -> None:
        """N processes reserving against a limit of K admit exactly K in total."""
        results = pool.run(state_url, workers.reserve_budget, [(claim, 5)] * pool.size)
        assert sum(results) == claim.limit
        assert await store.budgets.reserve_budget([claim], NOW) == claim.reason
