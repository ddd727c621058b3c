"""A Python load generator that runs in its own process: closed-loop or fixed-rate open-loop.

Closed loop: ``concurrency`` workers send back to back for ``duration_s`` (maximum throughput).
Open loop: requests are scheduled at a fixed ``rate`` and each latency is measured from the
*scheduled* send time, so a stalled server cannot hide its queue (coordinated omission).
The parent calls :func:`run_python`; the child is ``python -m sidecar.dev.bench.loadgen`` reading a
job as JSON on stdin and writing a result as JSON on stdout. The generator reports its own CPU
time and flags itself as saturated when its numbers describe its own limit, not the target's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import aiohttp

Mode = Literal["closed", "open"]

#: Above this share of one core the generator, not the target, may be what limits the numbers.
SATURATED_CPU = 0.9
#: An open-loop generator whose 99th-percentile send is later than this is behind its schedule.
LATE_MS = 5.0
#: How long in-flight requests may finish after the measured window before they count as errors.
DRAIN_S = 10.0


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One kind of request in a mix; ``weight`` is its share of the requests sent."""

    name: str
    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    weight: int = 1

    def to_json(self) -> dict[str, Any]:
        """Encode for the child process (the body as base64)."""
        body = base64.b64encode(self.body).decode()
        return {**asdict(self), "headers": [list(h) for h in self.headers], "body": body}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RequestSpec:
        """Decode what :meth:`to_json` produced."""
        headers = tuple((str(k), str(v)) for k, v in raw["headers"])
        return cls(raw["name"], raw["method"], raw["path"], headers, base64.b64decode(raw["body"]), int(raw["weight"]))


@dataclass(frozen=True, slots=True)
class LoadJob:
    """What to send, where, how and for how long."""

    url: str
    mix: tuple[RequestSpec, ...]
    mode: Mode
    duration_s: float
    warmup_s: float
    concurrency: int
    rate: float

    def to_json(self) -> dict[str, Any]:
        """Encode for the child process."""
        return {**asdict(self), "mix": [spec.to_json() for spec in self.mix]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> LoadJob:
        """Decode what :meth:`to_json` produced."""
        mix = tuple(RequestSpec.from_json(spec) for spec in raw["mix"])
        return cls(
            raw["url"],
            mix,
            raw["mode"],
            float(raw["duration_s"]),
            float(raw["warmup_s"]),
            int(raw["concurrency"]),
            float(raw["rate"]),
        )


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one load run measured; latencies in milliseconds, ``cpu_s`` is the generator's own."""

    generator: str
    requests: int
    errors: int
    elapsed_s: float
    rps: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    cpu_s: float
    saturated: bool
    lag_p99_ms: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def cpu_share(self) -> float:
        """The generator's CPU time as a share of one core over the measured window."""
        return self.cpu_s / self.elapsed_s if self.elapsed_s > 0 else 0.0


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of ascending ``ordered``: the smallest value with at least q% at or below it."""
    if not ordered:
        raise ValueError("no samples")
    if not 0 < q <= 100:
        raise ValueError("q must be in (0, 100]")
    rank = math.ceil(q / 100 * len(ordered) - 1e-9)
    return ordered[max(rank, 1) - 1]


def weighted_cycle(mix: Sequence[RequestSpec]) -> list[RequestSpec]:
    """Spread each spec over one cycle by weight so the mix holds over any stretch of requests."""
    if not mix or any(spec.weight < 1 for spec in mix):
        raise ValueError("a mix needs at least one request and positive weights")
    # Place copy k of a spec at the middle of its k-th share of the cycle, so 3:1 gives a a b a.
    slots = sorted(((k + 0.5) / spec.weight, i) for i, spec in enumerate(mix) for k in range(spec.weight))
    return [mix[i] for _, i in slots]


def summarize(
    generator: str,
    latencies_s: list[float],
    errors: int,
    elapsed_s: float,
    cpu_s: float,
    *,
    lag_p99_ms: float | None = None,
) -> LoadResult:
    """Turn raw latencies (seconds) into a result; saturated means the generator used most of its core."""
    ordered = sorted(latencies_s)
    ms = [v * 1000 for v in ordered] or [math.nan]
    share = cpu_s / elapsed_s if elapsed_s > 0 else 0.0
    late = lag_p99_ms is not None and lag_p99_ms > LATE_MS
    notes = (f"behind schedule: p99 send lag {lag_p99_ms:.1f} ms",) if late else ()
    return LoadResult(
        generator=generator,
        requests=len(ordered),
        errors=errors,
        elapsed_s=elapsed_s,
        rps=len(ordered) / elapsed_s if elapsed_s > 0 else 0.0,
        p50_ms=percentile(ms, 50),
        p99_ms=percentile(ms, 99),
        p999_ms=percentile(ms, 99.9),
        max_ms=ms[-1],
        cpu_s=cpu_s,
        saturated=share >= SATURATED_CPU,
        lag_p99_ms=lag_p99_ms,
        notes=notes,
    )


async def _send(session: aiohttp.ClientSession, base: str, spec: RequestSpec) -> bool:
    """Send one request and read the whole answer (an SSE stream to its end); True on 2xx."""
    try:
        async with session.request(
            spec.method, base + spec.path, headers=list(spec.headers), data=spec.body or None
        ) as resp:
            await resp.read()
            return 200 <= resp.status < 300
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False


def _session(concurrency: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=DRAIN_S),
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


async def closed_loop(job: LoadJob) -> LoadResult:
    """Run ``concurrency`` back-to-back senders; only requests started after the warmup count."""
    cycle = weighted_cycle(job.mix)
    latencies: list[float] = []
    errors = 0
    started = time.perf_counter()
    measure_from = started + job.warmup_s
    stop_at = measure_from + job.duration_s
    cpu_at = 0.0
    last_done = measure_from

    async def worker(k: int) -> None:
        nonlocal errors, last_done
        i = k
        while (sent := time.perf_counter()) < stop_at:
            ok = await _send(session, job.url, cycle[i % len(cycle)])
            done = time.perf_counter()
            i += job.concurrency
            if sent >= measure_from:
                last_done = max(last_done, done)
                if ok:
                    latencies.append(done - sent)
                else:
                    errors += 1

    async def cpu_mark() -> None:
        nonlocal cpu_at
        await asyncio.sleep(job.warmup_s)
        cpu_at = time.process_time()

    async with _session(job.concurrency) as session:
        marker = asyncio.create_task(cpu_mark())
        await asyncio.gather(*(worker(k) for k in range(job.concurrency)))
        await marker
        cpu_s = time.process_time() - cpu_at
    return summarize("python", latencies, errors, last_done - measure_from, cpu_s)


async def open_loop(job: LoadJob) -> LoadResult:
    """Send at a fixed rate; each latency runs from the scheduled send time, not the actual one."""
    cycle = weighted_cycle(job.mix)
    interval = 1.0 / job.rate
    warm = int(job.warmup_s * job.rate)
    total = warm + int(job.duration_s * job.rate)
    latencies: list[float] = []
    lags: list[float] = []
    errors = 0

    async def one(i: int, scheduled: float) -> None:
        nonlocal errors
        lag = time.perf_counter() - scheduled
        ok = await _send(session, job.url, cycle[i % len(cycle)])
        if i >= warm:
            lags.append(lag)
            if ok:
                latencies.append(time.perf_counter() - scheduled)
            else:
                errors += 1

    async with _session(job.concurrency) as session:
        tasks: set[asyncio.Task[None]] = set()
        t0 = time.perf_counter()
        cpu_at = time.process_time()
        i = 0
        while i < total:
            now = time.perf_counter()
            if i == warm:
                cpu_at = time.process_time()
            due = t0 + i * interval
            if due > now:
                await asyncio.sleep(due - now)
                continue
            task = asyncio.create_task(one(i, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            i += 1
        pending = list(tasks)
        _, late = await asyncio.wait(pending, timeout=DRAIN_S) if pending else (set(), set())
        for task in late:
            task.cancel()
        errors += len(late)
        cpu_s = time.process_time() - cpu_at
    lag_ms = sorted(v * 1000 for v in lags)
    return summarize(
        "python", latencies, errors, job.duration_s, cpu_s, lag_p99_ms=percentile(lag_ms, 99) if lag_ms else None
    )


def run_python(job: LoadJob, cpus: Sequence[int] | None = None) -> LoadResult:
    """Run a job in a child Python process (optionally pinned to ``cpus``) and return its result."""
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar.dev.bench.loadgen"],
        input=json.dumps(job.to_json()).encode(),
        capture_output=True,
        timeout=job.warmup_s + job.duration_s + DRAIN_S + 60,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"load generator exited with {proc.returncode}: {proc.stderr.decode()[-400:]}")
    raw = json.loads(proc.stdout)
    raw["notes"] = tuple(raw["notes"])
    return LoadResult(**raw)


def _child() -> int:
    job = LoadJob.from_json(json.load(sys.stdin))
    runner = closed_loop if job.mode == "closed" else open_loop
    result = asyncio.run(runner(job))
    json.dump(asdict(result), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_child())
