"""``memgov bench proxy``: the same load against the stand-in, a bare proxy and memgov, in one run.

Every server and the load generator run in their own processes. Rounds interleave the targets
(a → b → c, repeated), so slow drift of a shared machine hits all three alike; ratios are taken
inside each round. On a machine with two cores the generator gets one core and the servers
share the other, which means a proxy also shares its core with the stand-in behind it.
"""

from __future__ import annotations

import itertools
import os
import resource
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from sidecar.dev.bench.catalog import SCENARIOS
from sidecar.dev.bench.loadgen import LoadJob, LoadResult, Mode, RequestSpec, run_python
from sidecar.dev.bench.procs import ServerProcess
from sidecar.dev.bench.report import TARGETS, WORKERS_TARGET, aggregate, target_labels
from sidecar.dev.bench.scenarios import Scenario
from sidecar.dev.bench.wrk import run_wrk, wrk_fits, wrk_path

Generator = Literal["auto", "python"]


@dataclass(frozen=True)
class BenchOptions:
    """How much load, of which kind, for how long."""

    duration_s: float = 4.0
    rounds: int = 3
    concurrency: int = 32
    rate: float = 500.0
    scenarios: tuple[str, ...] = ("health",)
    modes: tuple[Mode, ...] = ("closed", "open")
    warmup_s: float = 1.0
    generator: Generator = "auto"
    pin: bool = True
    #: Above 1, a fourth target (d) runs memgov with this many workers, on the same state store as (c).
    workers: int = 1


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the generator, the stand-in and the two proxies may run on (empty: anywhere)."""

    generator: tuple[int, ...] = ()
    upstream: tuple[int, ...] = ()
    proxy: tuple[int, ...] = ()


def plan_cpus(available: Sequence[int], pin: bool) -> CpuPlan:
    """Give the generator its own core and the servers the rest; with three or more, the stand-in too."""
    cpus = sorted(available)
    if not pin or len(cpus) < 2:
        return CpuPlan()
    if len(cpus) == 2:
        return CpuPlan((cpus[0],), (cpus[1],), (cpus[1],))
    return CpuPlan((cpus[0],), (cpus[1],), tuple(cpus[2:]))


def _generate(job: LoadJob, cpus: Sequence[int], generator: Generator) -> LoadResult:
    if generator == "auto" and wrk_fits(job) and wrk_path() is not None:
        return run_wrk(job, cpus)
    return run_python(job, cpus)


def preflight(urls: Mapping[str, str], mix: Sequence[RequestSpec]) -> None:
    """Send each request of the mix once to every target; refuse to measure a target that fails it."""
    for key, base in urls.items():
        for spec in mix:
            req = urllib.request.Request(
                base + spec.path, data=spec.body or None, method=spec.method, headers=dict(spec.headers)
            )
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    resp.read()
            except urllib.error.HTTPError as exc:
                raise RuntimeError(f"({key}) {TARGETS.get(key, key)} answered {exc.code} to {spec.name}") from None


def busy_cpu_seconds() -> float:
    """CPU time the whole machine has spent busy since boot (all cores, from /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_seconds() -> float:
    # Servers are reaped only at the end, so this grows by the finished generator runs alone.
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _measure(
    servers: Mapping[str, ServerProcess], key: str, job: LoadJob, cpus: Sequence[int], generator: Generator
) -> dict[str, Any]:
    """One load run against one target, with the CPU each process and the rest of the machine used."""
    target, upstream = servers[key], servers["a"]
    cpu0, up0, busy0, gen0, wall0 = (
        target.cpu_seconds(),
        upstream.cpu_seconds(),
        busy_cpu_seconds(),
        _children_cpu_seconds(),
        time.perf_counter(),
    )
    result = _generate(job, cpus, generator)
    wall = time.perf_counter() - wall0
    server_cpu = target.cpu_seconds() - cpu0
    up_cpu = upstream.cpu_seconds() - up0 if key != "a" else 0.0
    # What neither the generator nor our servers used went to other work on a shared machine.
    other = busy_cpu_seconds() - busy0 - server_cpu - up_cpu - (_children_cpu_seconds() - gen0)
    loaded_s = job.warmup_s + result.elapsed_s  # the servers idle while the generator starts
    return {
        "target": key,
        "result": asdict(result),
        "server_cpu_s": server_cpu,
        "upstream_cpu_s": up_cpu,
        "servers_cores": (server_cpu + up_cpu) / loaded_s if loaded_s else 0.0,
        "other_load_cores": max(other, 0.0) / wall,
    }


@contextmanager
def _servers(scenario: Scenario, workdir: Path, plan: CpuPlan, workers: int = 1) -> Iterator[dict[str, ServerProcess]]:
    """Start the upstream (stand-in or kagent), then the proxies in front of it; stop all of them on exit."""
    servers: dict[str, ServerProcess] = {}
    try:
        servers["a"] = ServerProcess(scenario.upstream, scenario.upstream_params(workdir), plan.upstream)
        upstream = servers["a"].urls["url"]
        servers["b"] = ServerProcess("bare", {"upstream": upstream}, plan.proxy)
        memgov = {"upstream": upstream, "workdir": str(workdir), "overrides": scenario.gateway_overrides(workdir)}
        servers["c"] = ServerProcess("memgov", memgov, plan.proxy)
        if workers > 1:
            # The same settings and state store: (c) and (d) act as replicas, only one takes load at a time.
            servers[WORKERS_TARGET] = ServerProcess("memgov", {**memgov, "workers": workers}, plan.proxy)
        yield servers
    finally:
        for proc in reversed(list(servers.values())):
            proc.stop()


def run_scenario(
    scenario: Scenario, opts: BenchOptions, plan: CpuPlan, progress: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """Run every round of every mode of one scenario on fresh servers; one report section per mode."""
    runs: dict[Mode, list[dict[str, Any]]] = {mode: [] for mode in opts.modes}
    with (
        tempfile.TemporaryDirectory(prefix="memgov-bench-") as tmp,
        _servers(scenario, Path(tmp), plan, opts.workers) as servers,
    ):
        urls = {key: proc.urls["url"] for key, proc in servers.items()}
        labels = target_labels(scenario.upstream, opts.workers)
        with scenario.prepared({proc.kind: proc.urls for proc in servers.values()}) as mix:
            preflight(urls, mix)
            for rnd, mode, key in itertools.product(range(1, opts.rounds + 1), opts.modes, labels):
                progress(f"{scenario.name}: round {rnd}/{opts.rounds}, {mode} loop, ({key}) {labels[key]}")
                job = LoadJob(urls[key], tuple(mix), mode, opts.duration_s, opts.warmup_s, opts.concurrency, opts.rate)
                runs[mode].append({"round": rnd, **_measure(servers, key, job, plan.generator, opts.generator)})
    return [_section(scenario, mode, opts, runs[mode]) for mode in opts.modes]


def _section(scenario: Scenario, mode: Mode, opts: BenchOptions, runs: list[dict[str, Any]]) -> dict[str, Any]:
    load = f"{opts.concurrency} connections"
    if mode == "open":
        load = f"{opts.rate:g} rps, {load}"
    return {
        "scenario": scenario.name,
        "summary_text": scenario.summary,
        "mode": mode,
        "load": load,
        "duration_s": opts.duration_s,
        "rounds": opts.rounds,
        "summary": aggregate(runs, target_labels(scenario.upstream, opts.workers)),
        "runs": runs,
    }


def run_proxy_bench(
    opts: BenchOptions, available: Sequence[int], progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Run every chosen scenario and return the report body (without machine facts)."""
    plan = plan_cpus(available, opts.pin)
    started = time.time()
    sections = []
    for name in opts.scenarios:
        sections += run_scenario(SCENARIOS[name], opts, plan, progress)
    return {
        "options": asdict(opts),
        "cpu_plan": asdict(plan),
        "wall_s": round(time.time() - started, 1),
        "sections": sections,
    }
