"""A py-spy flame graph of memgov under one `memgov bench proxy` scenario's closed-loop load.

Starts the scenario's upstream (the stand-in or kagent v0.9.11 itself) and memgov as the bench
does, prepares the scenario, drives memgov with the Python load generator and samples memgov's
process with py-spy (``pip install -e '.[profile]'``) meanwhile. Writes ``<out>/<scenario>.svg`` and prints
memgov's CPU per request.

    .venv/bin/python benchmarks/flame_scenario.py --scenario governed-kagent-search --out benchmarks/flamegraphs
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sidecar.dev.bench.catalog import SCENARIOS
from sidecar.dev.bench.loadgen import LoadJob, run_python
from sidecar.dev.bench.procs import ServerProcess


def record(name: str, out: Path, seconds: float, concurrency: int) -> float:
    """Profile memgov under ``name``'s mix; return memgov's CPU microseconds per request."""
    scenario = SCENARIOS[name]
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memgov-flame-") as tmp:
        workdir = Path(tmp)
        upstream = ServerProcess(scenario.upstream, scenario.upstream_params(workdir))
        memgov = bare = None
        try:
            memgov = ServerProcess(
                "memgov",
                {"upstream": upstream.urls["url"], "workdir": tmp, "overrides": scenario.gateway_overrides(workdir)},
            )
            bare = ServerProcess("bare", {"upstream": upstream.urls["url"]})
            urls = {upstream.kind: upstream.urls, "memgov": memgov.urls, "bare": bare.urls}
            with scenario.prepared(urls) as mix:
                sampler = subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(memgov.pid),
                        "--rate",
                        "250",
                        "--duration",
                        f"{seconds:g}",
                        "--format",
                        "flamegraph",
                        "--nonblocking",
                        "--output",
                        str(out / f"{name}.svg"),
                    ],
                    stdout=subprocess.DEVNULL,
                )
                before = memgov.cpu_seconds()
                result = run_python(LoadJob(memgov.urls["url"], tuple(mix), "closed", seconds, 0.5, concurrency, 100.0))
                used = memgov.cpu_seconds() - before
                sampler.wait()
        finally:
            for proc in (bare, memgov, upstream):
                if proc is not None:
                    proc.stop()
    return used * 1e6 / max(result.requests, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), required=True)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/flamegraphs"))
    args = parser.parse_args()
    for name in args.scenario:
        us = record(name, args.out, args.seconds, args.concurrency)
        print(f"{name}: memgov {us:.0f} µs CPU per request -> {args.out / (name + '.svg')}")


if __name__ == "__main__":
    main()
