"""Aggregation of rounds: medians per target, ratios taken inside each round, strict JSON."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from sidecar.dev.bench.report import aggregate, bench_argv, render, write_json


def _run(rnd: int, target: str, rps: float, p50: float, p99: float = 10.0) -> dict[str, Any]:
    result = {
        "generator": "python",
        "requests": int(rps),
        "errors": 0,
        "elapsed_s": 1.0,
        "rps": rps,
        "p50_ms": p50,
        "p99_ms": p99,
        "p999_ms": p99 * 2,
        "max_ms": p99 * 3,
        "cpu_s": 0.2,
        "saturated": False,
        "lag_p99_ms": None,
        "notes": [],
    }
    return {
        "round": rnd,
        "target": target,
        "result": result,
        "server_cpu_s": rps / 1e4,
        "upstream_cpu_s": 0.0,
        "servers_cores": 0.5,
        "other_load_cores": 0.1,
    }


ROUNDS = [
    # Round 2 is slow for everyone (a noisy neighbour): per-round ratios stay steady.
    _run(1, "a", 1000, 1.0),
    _run(1, "b", 500, 2.0),
    _run(1, "c", 250, 4.0),
    _run(2, "a", 100, 10.0),
    _run(2, "b", 50, 20.0),
    _run(2, "c", 25, 40.0),
    _run(3, "a", 1000, 1.0),
    _run(3, "b", 500, 2.0),
    _run(3, "c", 250, 4.0),
]


class TestAggregate:
    def test_ratios_are_taken_within_rounds(self) -> None:
        """A round slowed down for all three targets leaves the c/a and c/b ratios unchanged."""
        agg = aggregate(ROUNDS)
        assert agg["ratios"]["c/a"]["rps"] == pytest.approx(0.25)
        assert agg["ratios"]["c/b"]["rps"] == pytest.approx(0.5)
        assert agg["ratios"]["c/a"]["p50_ms"] == pytest.approx(4.0)

    def test_targets_report_medians_across_rounds(self) -> None:
        """Each target's numbers are the median over rounds, so one bad round does not drag them."""
        agg = aggregate(ROUNDS)
        assert [agg["targets"][k]["rps"] for k in "abc"] == [1000, 500, 250]
        assert agg["targets"]["c"]["p50_ms"] == 4.0

    def test_added_latency_is_the_difference_in_milliseconds(self) -> None:
        """Added latency is memgov's percentile minus the other target's, in the same round."""
        agg = aggregate(ROUNDS)
        assert agg["added_ms"]["c-a"]["p50_ms"] == pytest.approx(3.0)
        assert agg["added_ms"]["c-b"]["p50_ms"] == pytest.approx(2.0)

    def test_cpu_per_request_ratio_is_taken_within_rounds(self) -> None:
        """memgov's own CPU per request over the bare proxy's, each from its process, compared inside a round."""
        runs = [dict(r) for r in ROUNDS]
        for run in runs:
            # memgov spends three times the bare proxy's CPU per request, whatever the round's load.
            per_request = {"a": 1.0, "b": 2.0, "c": 6.0}[run["target"]] * (10 if run["round"] == 2 else 1)
            run["server_cpu_s"] = per_request * run["result"]["requests"] / 1e6
        agg = aggregate(runs)
        assert agg["ratios"]["c/b"]["cpu_per_request"] == pytest.approx(3.0)
        assert agg["ratios"]["c/a"]["cpu_per_request"] == pytest.approx(6.0)
        section = {"scenario": "s", "mode": "closed", "load": "1", "duration_s": 1, "rounds": 3, "summary_text": ""}
        assert "cpu/req 3.00" in render({**section, "summary": agg})

    def test_cpu_per_request(self) -> None:
        """Server CPU time divided by requests gives the cost of one request in microseconds."""
        assert aggregate(ROUNDS)["targets"]["a"]["server_cpu_us_per_request"] == pytest.approx(100.0)


class TestOutput:
    def test_table_names_every_target_and_ratio(self) -> None:
        """The printed table has one line per target and both ratio lines."""
        section = {
            "scenario": "health",
            "mode": "closed",
            "load": "32 connections",
            "duration_s": 1.0,
            "rounds": 3,
            "summary_text": "GET /health",
            "summary": aggregate(ROUNDS),
        }
        text = render(section)
        for needle in ("(a) stand-in (direct)", "(b) bare proxy", "(c) memgov", "ratio (c)/(a)", "ratio (c)/(b)"):
            assert needle in text

    def test_json_has_no_nan(self, tmp_path: Path) -> None:
        """Missing numbers are written as null, so any JSON reader can load the result."""
        path = write_json({"x": math.nan, "y": [1.0, math.inf], "z": {"w": 2}}, tmp_path / "out", "stamp")
        assert path.name == "stamp.json"
        assert json.loads(path.read_text()) == {"x": None, "y": [1.0, None], "z": {"w": 2}}


def test_a_bench_records_the_command_that_reproduces_it_without_a_database_url() -> None:
    """Each option given with its value, set flags only, and a database URL (it may hold a password) as URL."""
    args = argparse.Namespace(
        backend="both", ops=20, out="out", large=True, context_cost=False, pg_url="postgresql://u:secret@h/db"
    )
    argv = bench_argv("state", args, "backend", "ops", "out", flags=("large", "context_cost"), masked=("pg_url",))
    assert " ".join(argv) == "memgov bench state --backend both --ops 20 --out out --large --pg-url URL"
    assert "secret" not in " ".join(argv)
    args.pg_url, args.large = None, False
    assert bench_argv("state", args, "ops", masked=("pg_url",)) == ["memgov", "bench", "state", "--ops", "20"]
