"""``memgov bench decisions`` measures every scenario it reports (figures themselves are not judged here)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from sidecar.dev.bench.decisions import FAN_OUT, SCENARIOS, _bench_engine, register_bench
from tests.support.policy import PACK_DIR, OpaServers


def _run(*argv: str) -> int:
    """Run ``memgov bench decisions …`` through the command's own parser."""
    parser = argparse.ArgumentParser(prog="memgov bench")
    register_bench(parser.add_subparsers(dest="bench_command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.func(args))


class TestDecisionBench:
    @pytest.mark.parametrize("engine", ["cedar", "opa"])
    async def test_every_scenario_is_measured(self, engine: str, opa: OpaServers) -> None:
        """Single decisions per scenario and the prefetch fan-out each get p50/p99 over the asked count."""
        url = opa.serve(PACK_DIR) if engine == "opa" else None
        results = await _bench_engine(engine, url, PACK_DIR, iterations=40, warmup=4)
        assert set(results) == {*SCENARIOS, f"prefetch_x{FAN_OUT}"}
        assert all(results[s]["n"] == 40 for s in SCENARIOS)
        assert all(r["p50_us"] <= r["p99_us"] for r in results.values())

    def test_command_writes_a_reproducible_report(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The command prints the table and target verdicts and saves JSON with the command line."""
        code = _run("decisions", "--engine", "cedar", "--iterations", "40", "--warmup", "4", "--out", str(tmp_path))
        out = capsys.readouterr().out
        assert code == 0
        assert "target cedar p50 <= 50 µs:" in out
        (report,) = tmp_path.glob("decisions-*.json")
        data = json.loads(report.read_text())
        assert data["command"].startswith("memgov bench decisions --engine cedar --iterations 40")
        assert set(data["results"]["cedar"]) == {*SCENARIOS, f"prefetch_x{FAN_OUT}"}

    def test_context_cost_times_each_part_of_the_context(self, tmp_path: Path) -> None:
        """--context-cost times the cedarpy call with the full context, each top-level record left out, and none."""
        code = _run(
            "decisions",
            "--engine",
            "cedar",
            "--iterations",
            "20",
            "--warmup",
            "2",
            "--out",
            str(tmp_path),
            "--context-cost",
        )
        assert code == 0
        (report,) = tmp_path.glob("decisions-*.json")
        data = json.loads(report.read_text())
        assert data["command"].endswith("--context-cost")
        context = data["cedar_context_us"]
        assert set(context) == set(SCENARIOS)
        for row in context.values():
            assert {"full", "empty", "without budget", "without request"} <= set(row)
            assert all(us > 0 for us in row.values())
