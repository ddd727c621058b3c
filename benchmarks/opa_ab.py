"""Two OPA engine modules compared call by call against one local OPA: wall and CPU time per decision.

On a shared machine two whole `memgov bench decisions` runs differ by more than a small change
costs. Here the engine of this tree and a baseline module (for example the opa.py of an earlier
commit) take turns, one decision (or one fan-out of 8) each, so both run under the same load.

    git show REV:sidecar/policy/opa.py > /tmp/opa_baseline.py
    .venv/bin/python benchmarks/opa_ab.py --baseline /tmp/opa_baseline.py [--calls 5000]

The baseline module is loaded beside this tree's sidecar package and must offer the same
``OpaEngine(url, timeout_s)`` with ``commit``, ``decide``, ``decide_many`` and ``close``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

from sidecar.policy import opa
from sidecar.policy.cases import load_bases
from sidecar.policy.model import DecisionInput
from sidecar.policy.opa_server import start_opa
from sidecar.policy.pack import read_pack
from sidecar.settings import PACKAGED_POLICY_DIR

FAN_OUT = 8


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("opa_baseline", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _line(scenario: str, name: str, wall: list[int], cpu: list[int]) -> str:
    wall, cpu = sorted(wall), sorted(cpu)
    p50, p99, cpu50 = wall[len(wall) // 2], wall[int(len(wall) * 0.99)], cpu[len(cpu) // 2]
    return f"{scenario:<12}{name:<10}{p50 / 1000:>10.0f}{p99 / 1000:>10.0f}{cpu50 / 1000:>10.0f}{len(wall):>7}"


async def _compare(url: str, baseline: Any, calls: int) -> None:
    pack = read_pack(PACKAGED_POLICY_DIR)
    bases = load_bases(PACKAGED_POLICY_DIR.parent / "policy-tests", pack)
    engines = {"baseline": baseline.OpaEngine(url, 5.0), "this": opa.OpaEngine(url, 5.0)}
    print(f"{'scenario':<12}{'engine':<10}{'p50 µs':>10}{'p99 µs':>10}{'cpu p50':>10}{'n':>7}")
    try:
        for engine in engines.values():
            await engine.commit(pack.revision)
        for scenario in ("save", "invoke", f"prefetch_x{FAN_OUT}"):
            base = bases[scenario.split("_")[0]]
            fan = scenario.startswith("prefetch")
            inp = DecisionInput.model_validate(base)
            n = max(calls // FAN_OUT, 50) if fan else calls
            times: dict[str, tuple[list[int], list[int]]] = {name: ([], []) for name in engines}
            for i in range(n + n // 10):
                order = list(engines.items()) if i % 2 else list(reversed(engines.items()))
                for name, engine in order:
                    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
                    await (engine.decide_many([inp] * FAN_OUT) if fan else engine.decide(inp))
                    if i >= n // 10:  # the first tenth warms both up
                        times[name][0].append(time.perf_counter_ns() - wall)
                        times[name][1].append(time.thread_time_ns() - cpu)
            for name, (wall_ns, cpu_ns) in times.items():
                print(_line(scenario, name, wall_ns, cpu_ns))
    finally:
        for engine in engines.values():
            await engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="The other engine module (an opa.py).")
    parser.add_argument("--calls", type=int, default=5000, help="Measured decisions per engine and scenario.")
    args = parser.parse_args()
    server = start_opa(PACKAGED_POLICY_DIR)
    try:
        asyncio.run(_compare(server.url, _load(args.baseline), args.calls))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
