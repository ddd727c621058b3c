"""``memgov bench proxy`` end to end: three targets in their own processes, one short round."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.dev.bench.catalog import SCENARIOS
from sidecar.dev.bench.proxy import CpuPlan, plan_cpus
from tests.support.once import once


def _smoke_run(out: Path) -> None:
    """One tiny run of every scenario in both modes: its JSON result and what it printed, in ``out``."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        # One connection and a slow open loop: kagent v0.9.11 itself deadlocks on concurrent searches of the
        # same rows (its access-count update), which is an upstream fact the smoke run is not about.
        code = main(
            [
                "bench",
                "proxy",
                "--scenario",
                "all",
                "--duration",
                "0.5",
                "--warmup",
                "0.1",
                "--rounds",
                "1",
                "--rate",
                "10",
                "--concurrency",
                "1",
                "--out",
                str(out),
            ]
        )
    (out / "printed.txt").write_text(printed.getvalue())
    (out / "exit-code").write_text(str(code))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict[str, Any]]:
    """Exit code, printed output and JSON result of the smoke run (once per test run)."""
    out = once(tmp_path_factory, "bench-proxy", _smoke_run)
    (path,) = out.glob("*.json")
    return int((out / "exit-code").read_text()), (out / "printed.txt").read_text(), json.loads(path.read_text())


class TestBenchProxy:
    def test_run_succeeds_and_prints_the_table(self, smoke: tuple[int, str, dict[str, Any]]) -> None:
        """The command exits 0 and prints each target and both ratios for every scenario and mode."""
        code, printed, _ = smoke
        assert code == 0
        lines = printed.splitlines()
        starts = ("  (b) bare proxy", "  (c) memgov", "  ratio (c)/(a)", "  ratio (c)/(b)")
        for start in starts:
            assert sum(line.startswith(start) for line in lines) == 2 * len(SCENARIOS)
        on_kagent = sum(1 for s in SCENARIOS.values() if s.upstream == "kagent")
        assert on_kagent and sum(line.startswith("  (a) kagent v0.9.11 (direct)") for line in lines) == 2 * on_kagent
        assert sum(line.startswith("  (a) stand-in (direct)") for line in lines) == 2 * (len(SCENARIOS) - on_kagent)

    def test_every_section_measures_three_targets(self, smoke: tuple[int, str, dict[str, Any]]) -> None:
        """Each scenario and mode has a positive rate and latency for the upstream, bare proxy and memgov."""
        sections = smoke[2]["sections"]
        assert sorted((s["scenario"], s["mode"]) for s in sections) == sorted(
            (name, mode) for name in SCENARIOS for mode in ("closed", "open")
        )
        for section in sections:
            targets = section["summary"]["targets"]
            assert sorted(targets) == ["a", "b", "c"]
            assert all(t["rps"] > 0 and t["p50_ms"] > 0 and t["errors"] == 0 for t in targets.values())
            assert all(section["summary"]["ratios"][r]["rps"] > 0 for r in ("c/a", "c/b"))
            # CPU is read in clock ticks (10 ms): a half-second run of the bare proxy may show none, and then
            # the ratio is undefined (null in the JSON), never a made-up number.
            cpu_ratio = section["summary"]["ratios"]["c/b"]["cpu_per_request"]
            if targets["b"]["server_cpu_us_per_request"] and targets["c"]["server_cpu_us_per_request"]:
                assert cpu_ratio > 0
            elif not targets["b"]["server_cpu_us_per_request"]:
                assert cpu_ratio is None

    def test_result_records_how_to_reproduce_it(self, smoke: tuple[int, str, dict[str, Any]]) -> None:
        """The JSON names the exact command, the machine's cores and the versions measured."""
        report = smoke[2]
        assert report["command"].startswith("memgov bench proxy --duration 0.5 --rounds 1 --concurrency 1 --rate 10")
        assert report["machine"]["cores"] >= 1
        assert report["versions"]["aiohttp"] and report["versions"]["python"]


class TestCpuPlan:
    @pytest.mark.parametrize(
        ("cpus", "pin", "plan"),
        [
            ([0], True, CpuPlan()),
            ([0, 1], False, CpuPlan()),
            ([0, 1], True, CpuPlan((0,), (1,), (1,))),
            ([3, 2], True, CpuPlan((2,), (3,), (3,))),
            ([0, 1, 2, 3], True, CpuPlan((0,), (1,), (2, 3))),
        ],
    )
    def test_generator_gets_its_own_core(self, cpus: Sequence[int], pin: bool, plan: CpuPlan) -> None:
        """With two or more cores the generator never shares a core with a server."""
        assert plan_cpus(cpus, pin) == plan
