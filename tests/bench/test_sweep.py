"""``memgov bench sweep`` on a tiny size: exactly the prepared scopes are rotated, the idle pass rotates none."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sidecar.dev.bench.sweep import register_bench, run_sweep_bench


class TestSweepBench:
    @pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
    async def test_rotates_only_the_prepared_scopes(
        self, tmp_path: Path, backend: str, request: pytest.FixtureRequest
    ) -> None:
        """Among 50 bulk-loaded scopes with live entries only, the candidate query and the sweep pick the three
        prepared ones; each rotation re-embeds the entries it keeps; the second pass has nothing to do."""
        url = f"sqlite:///{tmp_path}/sweep.db" if backend == "sqlite" else request.getfixturevalue("pg_url")
        run = await run_sweep_bench(url, 50, 200, 3, 4, 5, tmp_path)
        assert (run["backend"], run["scopes"], run["rotations"]) == (backend, 53, 3)
        assert run["embedding_items"] == 3 * 3  # every entry but the forgotten one, per scope
        assert run["candidates_query"]["n"] == 5 and run["sweep_with_rotations_s"] > 0

    def test_registers_under_memgov_bench(self) -> None:
        """`memgov bench sweep --large --rotations N` parses with the documented options."""
        parser = argparse.ArgumentParser()
        register_bench(parser.add_subparsers())
        args = parser.parse_args(["sweep", "--large", "--rotations", "7", "--backend", "sqlite"])
        assert (args.large, args.rotations, args.entries, args.backend) == (True, 7, 10, "sqlite")
