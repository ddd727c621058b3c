"""``memgov bench …``: the ``proxy`` benchmark here, ``state``, ``decisions`` and ``sweep`` when installed."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from sidecar.dev.bench.catalog import SCENARIOS
from sidecar.dev.bench.loadgen import Mode
from sidecar.dev.bench.proxy import BenchOptions, run_proxy_bench
from sidecar.dev.bench.report import load_average, machine_info, render, versions, write_json
from sidecar.dev.bench.wrk import wrk_version

#: Sibling benchmarks that register themselves under ``memgov bench`` when present.
OPTIONAL_BENCHES: tuple[str, ...] = (
    "sidecar.dev.bench.state",
    "sidecar.dev.bench.decisions",
    "sidecar.dev.bench.sweep",
    "sidecar.dev.bench.history",
)


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError("must be greater than 0")
        return value

    return parse


def _command_line(opts: BenchOptions, out: str) -> str:
    """The full command that reproduces a run, every option spelled out."""
    argv = [
        "memgov",
        "bench",
        "proxy",
        "--duration",
        f"{opts.duration_s:g}",
        "--rounds",
        str(opts.rounds),
        "--concurrency",
        str(opts.concurrency),
        "--rate",
        f"{opts.rate:g}",
        "--warmup",
        f"{opts.warmup_s:g}",
        "--mode",
        opts.modes[0] if len(opts.modes) == 1 else "both",
        "--generator",
        opts.generator,
    ]
    for name in opts.scenarios:
        argv += ["--scenario", name]
    return shlex.join([*argv, *([] if opts.pin else ["--no-pin"]), "--out", out])


def _cmd_proxy(args: argparse.Namespace) -> int:
    """Run the proxy benchmark, print the tables and write the JSON result; 1 if any request failed."""
    chosen = args.scenario or list(BenchOptions().scenarios)
    names = tuple(SCENARIOS) if "all" in chosen else tuple(dict.fromkeys(chosen))
    modes: tuple[Mode, ...] = ("closed", "open") if args.mode == "both" else (args.mode,)
    opts = BenchOptions(
        duration_s=args.duration,
        rounds=args.rounds,
        concurrency=args.concurrency,
        rate=args.rate,
        scenarios=names,
        modes=modes,
        warmup_s=args.warmup,
        generator=args.generator,
        pin=not args.no_pin,
        workers=args.workers,
    )
    machine = machine_info()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    print(
        f"memgov bench proxy: {len(names)} scenario(s) x {len(modes)} mode(s) x {args.rounds} round(s) x "
        f"3 targets, {args.duration:g} s each; {machine['cores']} cores",
        flush=True,
    )
    body = run_proxy_bench(opts, machine["usable_cores"], progress=lambda line: print(f"  {line}", flush=True))
    report = {
        "command": _command_line(opts, args.out),
        "started": stamp,
        "machine": machine,
        "machine_after": {"loadavg": load_average()},
        "versions": versions(wrk_version()),
        **body,
    }
    for section in body["sections"]:
        print()
        print(render(section))
    path = write_json(report, Path(args.out), stamp)
    print(f"\nresults: {path}")
    errors = sum(t["errors"] for s in body["sections"] for t in s["summary"]["targets"].values())
    if errors:
        print(f"memgov bench proxy: {errors} requests failed; the numbers above are not comparable")
        return 1
    return 0


def _register_proxy(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = bench.add_parser("proxy", help="Stand-in direct vs bare aiohttp proxy vs memgov, same load, one run.")
    d = BenchOptions()
    p.add_argument(
        "--duration", type=_positive(float), default=d.duration_s, help="Seconds measured per target per round."
    )
    p.add_argument(
        "--rounds", type=_positive(int), default=d.rounds, help="Interleaved a→b→c rounds; medians are reported."
    )
    p.add_argument(
        "--concurrency", type=_positive(int), default=d.concurrency, help="Connections (closed loop: senders)."
    )
    p.add_argument("--rate", type=_positive(float), default=d.rate, help="Requests per second of the open-loop mode.")
    p.add_argument(
        "--scenario",
        action="append",
        choices=[*SCENARIOS, "all"],
        help=f"Request mix (repeatable; default {d.scenarios[0]}).",
    )
    p.add_argument(
        "--mode",
        choices=("closed", "open", "both"),
        default="both",
        help="closed: maximum throughput; open: fixed rate, latency from the scheduled send time.",
    )
    p.add_argument("--warmup", type=float, default=d.warmup_s, help="Unmeasured seconds before each run.")
    p.add_argument(
        "--generator",
        choices=("auto", "python"),
        default=d.generator,
        help="auto uses wrk for closed-loop GET when installed; python always uses the Python generator.",
    )
    p.add_argument("--no-pin", action="store_true", help="Do not pin the generator and servers to separate cores.")
    p.add_argument(
        "--workers",
        type=_positive(int),
        default=d.workers,
        help="Above 1, also measure memgov with this many workers as target (d) (use with --no-pin on "
        "two cores: pinned, every worker shares the proxies' one core).",
    )
    p.add_argument("--out", default="benchmarks/results", help="Folder for the JSON result.")
    p.set_defaults(func=_cmd_proxy)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memgov bench`` with ``proxy`` and whichever sibling benchmarks are installed."""
    p = sub.add_parser("bench", help="Benchmarks: proxy overhead, state store, policy decisions, sweeper.")
    bench = p.add_subparsers(dest="bench_command", required=True, metavar="BENCH")
    _register_proxy(bench)
    for name in OPTIONAL_BENCHES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register_bench(bench)
