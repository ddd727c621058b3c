"""Cost admission: token buckets, fixed windows, expiring counters, all-or-nothing reservations."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from sidecar.state import BudgetClaim, StateError, StateStore, open_store
from sidecar.state.db import Declined, Mode, Script, execute, fetchmany, fetchrow
from tests.support.state import NOW, new_scope

RATE = BudgetClaim("bucket", "sender+agent", limit=3, refill_per_s=0.1, reason="rate_limited")
HOURLY = BudgetClaim("window", "scope", limit=2, window_s=3600, reason="hourly_budget_exhausted")
PREFETCH = BudgetClaim("counter", "conversation", limit=2, ttl_s=600, reason="prefetch_limit")


async def admitted(store: StateStore, claims: list[BudgetClaim], at: timedelta, times: int) -> list[str | None]:
    """Reserve the same claims ``times`` times at NOW + at; return each outcome."""
    return [await store.budgets.reserve_budget(claims, NOW + at) for _ in range(times)]


class TestBudgetKinds:
    async def test_bucket_allows_a_burst_then_refills_to_capacity(self, store: StateStore) -> None:
        """6/min burst 3: three at once, then one per ten seconds, never more than three banked."""
        assert await admitted(store, [RATE], timedelta(0), 4) == [None, None, None, "rate_limited"]
        assert await admitted(store, [RATE], timedelta(seconds=9), 1) == ["rate_limited"]
        assert await admitted(store, [RATE], timedelta(seconds=10), 2) == [None, "rate_limited"]
        assert await admitted(store, [RATE], timedelta(hours=1), 4) == [None, None, None, "rate_limited"]

    async def test_window_resets_at_the_window_boundary(self, store: StateStore) -> None:
        """A fixed hourly window admits its limit, then nothing until the next hour starts."""
        start = timedelta(minutes=59, seconds=59)  # NOW is on the hour
        assert await admitted(store, [HOURLY], timedelta(0), 3) == [None, None, "hourly_budget_exhausted"]
        assert await admitted(store, [HOURLY], start, 1) == ["hourly_budget_exhausted"]
        assert await admitted(store, [HOURLY], timedelta(hours=1), 3) == [None, None, "hourly_budget_exhausted"]

    async def test_counter_expires_ttl_after_first_use(self, store: StateStore) -> None:
        """A per-conversation counter starts over only after its ttl from the first use."""
        assert await admitted(store, [PREFETCH], timedelta(0), 2) == [None, None]
        assert await admitted(store, [PREFETCH], timedelta(seconds=599), 1) == ["prefetch_limit"]
        assert await admitted(store, [PREFETCH], timedelta(seconds=600), 3) == [None, None, "prefetch_limit"]

    async def test_cost_counts_every_item(self, store: StateStore) -> None:
        """A claim with cost n uses n units; a cost above the limit never fits."""
        big = BudgetClaim("window", "scope", limit=5, cost=3, reason="hourly_budget_exhausted")
        assert await admitted(store, [big], timedelta(0), 2) == [None, "hourly_budget_exhausted"]
        huge = BudgetClaim("bucket", "agent", limit=2, cost=3, reason="rate_limited")
        assert await store.budgets.reserve_budget([huge], NOW) == "rate_limited"

    async def test_keys_are_independent(self, store: StateStore) -> None:
        """Two senders do not share a bucket."""
        other = BudgetClaim("bucket", "other", limit=3, refill_per_s=0.1, reason="rate_limited")
        await admitted(store, [RATE], timedelta(0), 3)
        assert await store.budgets.reserve_budget([other], NOW) is None


class TestCounted:
    async def test_levels_come_back_in_claim_order_and_none_when_refused(self, store: StateStore) -> None:
        """Each claim's level after it: a window's count used (cost included), a bucket's tokens left."""
        items = BudgetClaim("window", "agent-items", limit=50, cost=10, reason="hourly_budget_exhausted")
        assert await store.budgets.reserve_counted([items, RATE], NOW) == (None, [10, 2])
        assert await store.budgets.reserve_counted([items, RATE], NOW) == (None, [20, 1])
        full = BudgetClaim("window", "agent-items", limit=20, cost=1, reason="hourly_budget_exhausted")
        assert await store.budgets.reserve_counted([RATE, full], NOW) == ("hourly_budget_exhausted", [])
        # The refused reservation charged nothing: the bucket still has its one token.
        assert await store.budgets.reserve_counted([RATE], NOW) == (None, [0])

    async def test_one_key_claimed_twice_in_a_request_is_charged_twice_in_order(self, store: StateStore) -> None:
        """The claims of one request run one after the other: the second sees what the first took."""
        once = BudgetClaim("bucket", "pair", limit=3, cost=1, refill_per_s=0.0001, reason="rate_limited")
        assert await store.budgets.reserve_counted([once, once], NOW) == (None, [2, 1])
        twice = BudgetClaim("bucket", "pair", limit=3, cost=1, refill_per_s=0.0001, reason="rate_limited")
        assert await store.budgets.reserve_counted([twice, twice], NOW) == ("rate_limited", [])
        assert await store.budgets.reserve_counted([once], NOW) == (None, [0])


class TestAllOrNothing:
    async def test_a_refused_claim_charges_nothing(self, store: StateStore) -> None:
        """When one claim does not fit, the others of the same request are not consumed."""
        await admitted(store, [HOURLY], timedelta(0), 2)
        assert await admitted(store, [RATE, HOURLY], timedelta(0), 3) == ["hourly_budget_exhausted"] * 3
        assert await admitted(store, [RATE], timedelta(0), 4) == [None, None, None, "rate_limited"]

    async def test_budget_keys_are_stored_opaquely(self, store: StateStore) -> None:
        """Budget rows never carry the caller's key (which may contain an MXID)."""
        claim = BudgetClaim("bucket", "@alice:example.org|team/helper", limit=3, refill_per_s=0.1)
        await store.budgets.reserve_budget([claim], NOW)
        async with store.db.tx("read") as tx:
            keys = [r[0] for r in await tx.fetch("SELECT bkey FROM budgets")]
        assert len(keys) == 1 and "alice" not in keys[0] and len(keys[0]) == 64

    @pytest.mark.parametrize(
        "claim",
        [
            BudgetClaim("bucket", "k", limit=3, reason="free text"),
            BudgetClaim("hourly", "k", limit=3),  # type: ignore[arg-type]  # an unknown kind on purpose
            BudgetClaim("window", "k", limit=3, window_s=0),
            BudgetClaim("counter", "k", limit=3, ttl_s=0),
            BudgetClaim("bucket", "k", limit=3, cost=-1),
        ],
    )
    async def test_malformed_claims_are_refused(self, store: StateStore, claim: BudgetClaim) -> None:
        """A claim with an unknown kind, a non-code reason or a non-positive period is a programming error."""
        with pytest.raises(ValueError):
            await store.budgets.reserve_budget([claim], NOW)

    async def test_drained_rows_are_purged(self, store: StateStore) -> None:
        """Rows equal to a fresh budget are removed by housekeeping without changing admission."""
        await admitted(store, [RATE, HOURLY, PREFETCH], timedelta(0), 1)
        assert (await store.purge_expired(NOW + timedelta(seconds=29)))["budgets"] == 0
        assert (await store.purge_expired(NOW + timedelta(hours=1)))["budgets"] == 3
        assert await admitted(store, [RATE], timedelta(hours=1), 4) == [None, None, None, "rate_limited"]


class TestSearchAdmission:
    """A search's admission: on PostgreSQL no explicit transaction, so its claims roll themselves back."""

    async def test_a_refused_later_claim_charges_the_earlier_ones_nothing(self, store: StateStore) -> None:
        scope = await new_scope(store)
        await admitted(store, [HOURLY], timedelta(0), 2)  # the hourly window is full
        # (kind, key) order runs the bucket first: it fits, then the window declines.
        claims = lambda _scope, _window: [RATE, HOURLY]  # noqa: E731 - the admission's claim maker
        for _ in range(3):
            adm = await store.admission.admit(scope.scope_id, scope.generation, claims, NOW, window=True)
            assert adm.refused == "hourly_budget_exhausted" and adm.live and adm.levels == {}
            assert adm.scope is not None and adm.scope.scope_id == scope.scope_id
        assert await admitted(store, [RATE], timedelta(0), 4) == [None, None, None, "rate_limited"]

    async def test_an_admitted_search_reports_each_claims_level(self, store: StateStore) -> None:
        scope = await new_scope(store)
        claims = lambda _scope, _window: [HOURLY, RATE]  # noqa: E731 - the admission's claim maker
        adm = await store.admission.admit(scope.scope_id, scope.generation, claims, NOW, window=True)
        assert adm.refused is None and adm.live and adm.levels == {"scope": 1, "sender+agent": 2}


class _Stop(Exception):
    pass


class TestDecline:
    """PostgreSQL's ``memgov_decline`` (SQLite's claims always run in a transaction)."""

    @staticmethod
    def _declines_second(caught: list[int]) -> Callable[[], Script[None]]:
        def script() -> Script[None]:
            yield execute("INSERT INTO scratch (k, n) VALUES ('before', 0) ON CONFLICT (k) DO NOTHING")
            try:
                yield fetchmany(
                    "INSERT INTO scratch (k, n) SELECT $1, $2 WHERE $2 > 0"
                    " UNION ALL SELECT 'x', CAST(memgov_decline($2 * -1) AS INTEGER) WHERE $2 <= 0",
                    [("a", 1), ("b", -7), ("c", 3)],
                )
            except Declined as declined:
                caught.append(declined.detail)
                raise _Stop from None

        return script

    @pytest.mark.parametrize(("mode", "kept"), [("single", ["before"]), ("write", [])])
    async def test_a_declining_run_takes_back_the_runs_before_it(
        self, pg_url: str, mode: Mode, kept: list[str]
    ) -> None:
        """The decline reaches the script with its detail; outside a transaction it takes back the
        runs of its own round trip only, inside one the whole transaction."""
        store = await open_store(pg_url)
        try:
            async with store.db.tx("write") as tx:
                await tx.execute("CREATE TABLE scratch (k VARCHAR(8) PRIMARY KEY, n INTEGER NOT NULL)")
            caught: list[int] = []
            with pytest.raises(_Stop):
                await store.db.run(self._declines_second(caught), mode)
            assert caught == [7]
            async with store.db.tx("read") as tx:
                assert [r[0] for r in await tx.fetch("SELECT k FROM scratch")] == kept
        finally:
            await store.close()

    async def test_any_statement_kind_declines_and_other_errors_stay_backend_errors(self, pg_url: str) -> None:
        """The decline is read wherever a statement raises it; a script that lets it pass on
        leaves the call, and any other database error is still ``state_unavailable``."""
        store = await open_store(pg_url)
        caught: list[int] = []

        def one_row() -> Script[None]:
            try:
                yield fetchrow("SELECT memgov_decline(4)")
            except Declined as declined:
                caught.append(declined.detail)

        def broken() -> Script[None]:
            yield fetchrow("SELECT CAST('x' AS INTEGER)")

        try:
            await store.db.run(one_row, "read")
            assert caught == [4]
            with pytest.raises(StateError):
                await store.db.run(broken, "read")
        finally:
            await store.close()


class TestPrefetchWindow:
    async def test_a_window_is_open_until_its_end_and_replaced_by_the_next(self, store: StateStore) -> None:
        """Searches inside a new conversation's window share one prefetch counter id; a new window gets a new id."""
        scope = await new_scope(store)
        assert await store.prefetch.prefetch_window(scope.scope_id, NOW) is None
        await store.prefetch.open_prefetch_window(scope.scope_id, NOW, NOW + timedelta(seconds=30))
        first = await store.prefetch.prefetch_window(scope.scope_id, NOW + timedelta(seconds=29))
        assert first is not None and first.startswith(scope.scope_id)
        assert await store.prefetch.prefetch_window(scope.scope_id, NOW + timedelta(seconds=30)) is None
        await store.prefetch.open_prefetch_window(
            scope.scope_id, NOW + timedelta(minutes=1), NOW + timedelta(minutes=2)
        )
        second = await store.prefetch.prefetch_window(scope.scope_id, NOW + timedelta(minutes=1))
        assert second is not None and second != first
