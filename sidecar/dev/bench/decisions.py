"""``memgov bench decisions``: decision latency per engine, single calls and a prefetch fan-out of 8.

Each sample is what the gateway pays per governed request: validating the decision input from
plain facts, the engine, the floor, metrics and the (discarded) decision log line. Cedar runs
in-process; OPA is a real server on loopback reached over one reused HTTP session.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import cedarpy
import orjson

from sidecar.dev.bench.report import bench_argv, publish
from sidecar.logs import configure_logging
from sidecar.policy.cases import load_bases
from sidecar.policy.cedar import CedarEngine
from sidecar.policy.cedar_input import Request, request
from sidecar.policy.model import DecisionInput
from sidecar.policy.opa_server import OpaServer, start_opa
from sidecar.policy.pack import read_pack
from sidecar.policy.runtime import PolicyRuntime
from sidecar.settings import PACKAGED_POLICY_DIR, PolicySettings

#: Targets for p50 of a single decision, input included, in microseconds.
TARGETS_US: Final = {"cedar": 50.0, "opa": 1000.0}
SCENARIOS: Final = ("save", "invoke")
FAN_OUT: Final = 8


def _stats(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    return {"n": len(ordered), "p50_us": pick(0.50), "p99_us": pick(0.99), "mean_us": statistics.fmean(ordered) / 1000}


async def _measure(call: Callable[[], Awaitable[Any]], iterations: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        await call()
    samples: list[int] = []
    for _ in range(iterations):
        start = time.perf_counter_ns()
        await call()
        samples.append(time.perf_counter_ns() - start)
    return _stats(samples)


async def _bench_engine(engine: str, url: str | None, pack_dir: Path, iterations: int, warmup: int) -> dict[str, Any]:
    pack = read_pack(pack_dir)
    bases = load_bases(pack_dir.parent / "policy-tests", pack)
    settings = PolicySettings(dir=pack_dir, reload_interval_s=0, opa_timeout_s=5.0)
    runtime = await PolicyRuntime.start(settings, engine=engine, opa_url=url, watch=False)
    if not runtime.ready:
        raise RuntimeError(f"{engine}: the pack did not load")
    out: dict[str, Any] = {}
    try:
        for name in SCENARIOS:
            raw = bases[name]

            async def single(raw: dict[str, Any] = raw) -> None:
                await runtime.decide(DecisionInput.model_validate(raw))

            out[name] = await _measure(single, iterations, warmup)
        fan = [bases["prefetch"]] * FAN_OUT

        async def fan_out() -> None:
            await runtime.decide_many([DecisionInput.model_validate(r) for r in fan])

        batch = await _measure(fan_out, max(iterations // FAN_OUT, 50), max(warmup // FAN_OUT, 5))
        out[f"prefetch_x{FAN_OUT}"] = {**batch, "per_decision_p50_us": batch["p50_us"] / FAN_OUT}
    finally:
        await runtime.close()
    return out


def _cpu_us(call: Callable[[], object], calls: int) -> float:
    """Process CPU microseconds per call, after a short warm-up."""
    for _ in range(min(200, calls)):
        call()
    start = time.process_time_ns()
    for _ in range(calls):
        call()
    return (time.process_time_ns() - start) / calls / 1000


async def _context_cost(pack_dir: Path, calls: int) -> dict[str, dict[str, float]]:
    """What one cedarpy call costs per scenario, with the full context, each top-level context
    record left out in turn, and an empty context (the call's floor on this machine)."""
    pack = read_pack(pack_dir)
    bases = load_bases(pack_dir.parent / "policy-tests", pack)
    engine = CedarEngine()
    compiled = engine.prepare(pack)
    out: dict[str, dict[str, float]] = {}
    for name in SCENARIOS:
        inp = DecisionInput.model_validate(bases[name])
        handle = engine._entities(compiled, inp)
        asked = request(inp)
        context: dict[str, object] = dict(asked["context"])

        def cost(ctx: dict[str, object], asked: Request = asked, handle: cedarpy.Entities = handle) -> float:
            wire = [{**asked, "context": orjson.dumps(ctx).decode()}]
            policies = compiled.policies
            return _cpu_us(
                lambda: cedarpy._internal.is_authorized_batch(wire, policies, handle._inner, None, False), calls
            )

        row = {"full": cost(context), "empty": cost({})}
        row.update({f"without {key}": cost({k: v for k, v in context.items() if k != key}) for key in context})
        out[name] = row
    return out


def _render(results: dict[str, dict[str, Any]], context: dict[str, dict[str, float]]) -> str:
    lines = [f"{'engine':<7}{'scenario':<14}{'p50 µs':>10}{'p99 µs':>10}{'mean µs':>10}{'n':>7}"]
    for engine, scenarios in results.items():
        for name, s in scenarios.items():
            lines.append(
                f"{engine:<7}{name:<14}{s['p50_us']:>10.1f}{s['p99_us']:>10.1f}{s['mean_us']:>10.1f}{s['n']:>7}"
            )
    for name, row in context.items():
        parts = "  ".join(f"{k} {v:.1f}" for k, v in row.items())
        lines.append(f"cedar call µs CPU, {name}: {parts}")
    for engine, target in TARGETS_US.items():
        if engine in results:
            p50 = results[engine][SCENARIOS[0]]["p50_us"]
            verdict = "meets" if p50 <= target else "misses"
            lines.append(f"target {engine} p50 <= {target:g} µs: {verdict} ({p50:.1f} µs, {SCENARIOS[0]})")
    return "\n".join(lines)


def _cmd(args: argparse.Namespace) -> int:
    engines = ["cedar", "opa"] if args.engine == "all" else [args.engine]
    pack_dir = Path(args.dir) if args.dir else PACKAGED_POLICY_DIR
    # Decision log lines are produced as in production and thrown away.
    configure_logging("info", stream=open(os.devnull, "w"))  # noqa: SIM115 - lives for the process
    server: OpaServer | None = None
    results: dict[str, dict[str, Any]] = {}
    context: dict[str, dict[str, float]] = {}
    try:
        if "opa" in engines and not args.opa_url:
            server = start_opa(pack_dir)
        url = args.opa_url or (server.url if server else None)
        for engine in engines:
            results[engine] = asyncio.run(_bench_engine(engine, url, pack_dir, args.iterations, args.warmup))
        if args.context_cost and "cedar" in engines:
            context = asyncio.run(_context_cost(pack_dir, args.iterations))
    finally:
        if server is not None:
            server.stop()
    argv = bench_argv("decisions", args, "engine", "iterations", "warmup", "out", flags=("context_cost",))
    publish(
        "decisions",
        argv,
        _render(results, context),
        Path(args.out),
        targets_p50_us=TARGETS_US,
        results=results,
        cedar_context_us=context,
    )
    return 0


def register_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memgov bench decisions``."""
    p = bench.add_parser("decisions", help="Decision latency per engine (Cedar in-process, OPA over loopback).")
    p.add_argument("--engine", choices=("cedar", "opa", "all"), default="all", help="Engine(s) to measure.")
    p.add_argument("--iterations", type=int, default=5000, help="Measured decisions per scenario.")
    p.add_argument("--warmup", type=int, default=500, help="Unmeasured decisions before each scenario.")
    p.add_argument("--opa-url", help="OPA server to use; without it a local opa is started on loopback.")
    p.add_argument("--dir", help="Policy pack folder (default: the packaged policies/).")
    p.add_argument("--out", default="benchmarks/results", help="Folder for the JSON result.")
    p.add_argument(
        "--context-cost",
        action="store_true",
        help="Also time one cedarpy call per scenario with the full, each reduced and an empty context.",
    )
    p.set_defaults(func=_cmd)
