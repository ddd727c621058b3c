"""Closed-loop GET runs through ``wrk`` when it is installed (a C generator rarely saturates first)."""

from __future__ import annotations

import math
import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sidecar.dev.bench.loadgen import SATURATED_CPU, LoadJob, LoadResult

# wrk's done() hook prints one parseable line; latencies are in microseconds.
_SCRIPT = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("memgov-bench %.0f %.0f %.0f %.0f %.0f %.0f %.0f\\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
"""


def wrk_path() -> str | None:
    """The wrk binary, or None when it is not installed."""
    return shutil.which("wrk")


def wrk_version() -> str | None:
    """wrk's version banner, or None."""
    path = wrk_path()
    if path is None:
        return None
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0].split(" Copyright")[0].strip()


def wrk_fits(job: LoadJob) -> bool:
    """wrk drives only the closed-loop case of a single bodiless GET."""
    return job.mode == "closed" and len(job.mix) == 1 and job.mix[0].method == "GET" and not job.mix[0].body


def _command(path: str, job: LoadJob, script: Path, seconds: int) -> list[str]:
    spec = job.mix[0]
    cmd = [path, "-t1", f"-c{job.concurrency}", f"-d{seconds}s", "--timeout", "10s", "-s", str(script)]
    for key, value in spec.headers:
        cmd += ["-H", f"{key}: {value}"]
    return [*cmd, job.url + spec.path]


def parse_done_line(stdout: str) -> tuple[int, float, int, list[float]]:
    """Read (requests, duration_s, errors, [p50, p99, p99.9, max] in ms) from the script's line."""
    for line in stdout.splitlines():
        if line.startswith("memgov-bench "):
            fields = [float(v) for v in line.split()[1:]]
            return int(fields[0]), fields[1] / 1e6, int(fields[2]), [v / 1000 for v in fields[3:7]]
    raise RuntimeError("wrk printed no summary line")


def run_wrk(job: LoadJob, cpus: Sequence[int] | None = None) -> LoadResult:
    """Run a warmup and then the measured wrk run; CPU time is the measured child's rusage."""
    path = wrk_path()
    if path is None or not wrk_fits(job):
        raise ValueError("wrk is missing or cannot drive this job")
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "report.lua"
        script.write_text(_SCRIPT)
        if job.warmup_s > 0:
            subprocess.run(
                _command(path, job, script, max(1, math.ceil(job.warmup_s))),
                capture_output=True,
                preexec_fn=pin,
                check=True,
            )
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds = max(1, round(job.duration_s))
        out = subprocess.run(
            _command(path, job, script, seconds),
            capture_output=True,
            text=True,
            preexec_fn=pin,
            check=True,
            timeout=seconds + 60,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    requests, elapsed, errors, (p50, p99, p999, top) = parse_done_line(out.stdout)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ok = max(requests - errors, 0)
    return LoadResult(
        generator="wrk",
        requests=ok,
        errors=errors,
        elapsed_s=elapsed,
        rps=ok / elapsed if elapsed else 0.0,
        p50_ms=p50,
        p99_ms=p99,
        p999_ms=p999,
        max_ms=top,
        cpu_s=cpu_s,
        saturated=elapsed > 0 and cpu_s / elapsed >= SATURATED_CPU,
    )
