"""``memgov bench state`` on a tiny size: every operation is measured and the store grows in place."""

from __future__ import annotations

import argparse

from sidecar.dev.bench.state import register_bench, run_state_bench
from sidecar.state import open_store

OPERATIONS = {
    "save: admit + finish_write",
    "search: admit + filter_live",
    "get_scope + generation check",
    "begin_write + end_write",
    "reserve_entries + fill_entry",
    "filter_live (10 ids)",
    "reserve_budget (bucket + window)",
}


class TestStateBench:
    async def test_reports_percentiles_per_operation_and_grows_the_store(self, state_url: str) -> None:
        """A run reports p50/p99 for each operation; a second, larger run adds only the missing rows."""
        small = await run_state_bench(state_url, 10, 50, 20)
        large = await run_state_bench(state_url, 30, 150, 20)
        for run in (small, large):
            assert set(run["ops"]) == OPERATIONS
            assert all(s["n"] == 20 and 0 < s["p50_us"] <= s["p99_us"] for s in run["ops"].values())
        assert (large["scopes"], large["ledger_rows"]) == (30, 150)
        store = await open_store(state_url)
        try:
            stats = await store.stats()
        finally:
            await store.close()
        # bulk rows plus two measured ledger inserts (a governed save, a reserve_entries + fill_entry)
        # per warm-up and sample in each run
        assert stats["scopes"] == 30 and stats["ledger_entries"] == 150 + 2 * 2 * (20 + 10)

    def test_registers_under_memgov_bench(self) -> None:
        """`memgov bench state --large --pg-url URL` parses with the documented options."""
        parser = argparse.ArgumentParser()
        register_bench(parser.add_subparsers())
        args = parser.parse_args(["state", "--large", "--pg-url", "postgresql://x/y", "--ops", "5"])
        assert (args.large, args.pg_url, args.ops, args.backend) == (True, "postgresql://x/y", 5, "both")
