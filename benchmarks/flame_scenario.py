"""A py-spy flame graph of memgov under one `memgov bench proxy` scenario's closed-loop load.

Starts the scenario's upstream (the stand-in or kagent v0.9.11 itself) and memgov as the bench
does, prepares the scenario, drives memgov with the Python load generator and samples memgov's
process with py-spy (``pip install -e '.[profile]'``) meanwhile. Writes ``<out>/<scenario>.svg`` and prints
memgov's CPU per request.

    .venv/bin/python benchmarks/flame_scenario.py --scenario governed-kagent-search --out benchmarks/flamegraphs

``--owners`` samples native frames as well and prints whose code the CPU is in (memgov's modules,
aiohttp, uvloop, cedarpy, SQLite, ...; ``benchmarks/owners.py``); ``--target bare`` loads and
samples the bare proxy instead, so the two splits can be set side by side.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from owners import report, stage, tally  # benchmarks/owners.py, beside this script

from sidecar.dev.bench.catalog import SCENARIOS
from sidecar.dev.bench.loadgen import LoadJob, run_python
from sidecar.dev.bench.procs import ServerProcess


def record(
    name: str, out: Path, seconds: float, concurrency: int, owners: bool = False, target: str = "memgov"
) -> tuple[float, Path]:
    """Profile ``target`` (memgov, or the bare proxy) under ``name``'s mix.

    Returns its CPU microseconds per request and the profile file it wrote.

    With ``owners`` the samples include native frames (py-spy pauses memgov for each one, so the
    CPU figure is higher than unprofiled) and are written raw to ``<out>/<name>.raw`` for
    ``benchmarks/owners.py``.
    """
    scenario = SCENARIOS[name]
    stem = name if target == "memgov" else f"{name}.{target}"
    written = out / (f"{stem}.raw" if owners else f"{stem}.svg")
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
            procs = {"memgov": memgov, "bare": bare}
            with scenario.prepared(urls) as mix:
                sampler = subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(procs[target].pid),
                        "--rate",
                        "100" if owners else "250",
                        "--duration",
                        f"{seconds:g}",
                        *(
                            ("--native", "--format", "raw", "--output", str(written))
                            if owners
                            else ("--format", "flamegraph", "--nonblocking", "--output", str(written))
                        ),
                    ],
                    stdout=subprocess.DEVNULL,
                )
                before = procs[target].cpu_seconds()
                result = run_python(
                    LoadJob(procs[target].urls["url"], tuple(mix), "closed", seconds, 0.5, concurrency, 100.0)
                )
                used = procs[target].cpu_seconds() - before
                sampler.wait()
        finally:
            for proc in (bare, memgov, upstream):
                if proc is not None:
                    proc.stop()
    return used * 1e6 / max(result.requests, 1), written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), required=True)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/flamegraphs"))
    parser.add_argument(
        "--owners",
        action="store_true",
        help="Sample native frames too and print whose code the CPU is in (memgov, aiohttp, cedarpy, SQLite, ...).",
    )
    parser.add_argument(
        "--target",
        choices=("memgov", "bare"),
        default="memgov",
        help="The process to load and sample: memgov, or the bare proxy in front of the same upstream.",
    )
    args = parser.parse_args()
    lines: list[str] = []
    for name in args.scenario:
        us, written = record(name, args.out, args.seconds, args.concurrency, args.owners, args.target)
        if not args.owners:
            lines.append(f"{name}: {args.target} {us:.0f} µs CPU per request -> {written}")
            continue
        lines.append(f"{name}: {args.target} {us:.0f} µs CPU per request (native sampling pauses it) -> {written}")
        with written.open() as fh:
            samples = fh.readlines()
        lines += [
            report(tally(samples), per_request_us=us),
            report(tally(samples, stage), title="stage", per_request_us=us),
        ]
    # The script's report on the terminal (figures and function names, nothing from a request).
    print("\n".join(lines))


if __name__ == "__main__":
    main()
