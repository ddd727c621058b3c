"""``memgov bench history`` on a tiny size: every checkpoint is measured and compaction leaves what is live."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sidecar.dev.bench.history import register_bench, run_history_bench


class TestHistoryBench:
    @pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
    async def test_measures_each_checkpoint_and_compacts_to_the_live_rows(
        self, tmp_path: Path, backend: str, request: pytest.FixtureRequest
    ) -> None:
        """Scopes of 1 and 10 forget-ones (five more timed in each): the history grows a namespace and a copy of
        every live entry per forget-one; one compaction brings each scope back to what is live. Saves and
        searches are measured in scopes of 0, 20 and 200 rows."""
        url = f"sqlite:///{tmp_path}/history.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
        run = await run_history_bench(url, 10, 3, 5, tmp_path, entries=200)
        points = run["checkpoints"]
        assert run["backend"] == backend and [p["forgets"] for p in points] == [1, 10]
        assert points[1]["namespaces"] > points[0]["namespaces"] and points[1]["ledger_rows"] > 10 * 3
        assert all(p[op]["n"] == n for p in points for op, n in (("status", 5), ("inspect", 5), ("forget_one", 5)))
        assert run["compaction"]["kept_per_scope"] == [{"ledger_rows": 3, "namespaces": 1}] * 2
        assert [g["entries"] for g in run["entries_growth"]] == [0, 20, 200]
        assert all(g[op]["n"] == 5 for g in run["entries_growth"] for op in ("save", "search"))

    def test_registers_under_memgov_bench(self) -> None:
        """`memgov bench history --forgets N --backend B` parses with the documented options."""
        parser = argparse.ArgumentParser()
        register_bench(parser.add_subparsers())
        args = parser.parse_args(["history", "--forgets", "100", "--backend", "sqlite"])
        assert (args.forgets, args.live, args.samples, args.backend, args.entries) == (100, 10, 200, "sqlite", 10_000)
