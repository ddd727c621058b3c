"""Aggregate benchmark rounds into medians and within-round ratios; render the table and the JSON.

Each round measures the three targets back to back, so a ratio computed inside one round
compares runs that saw the same machine noise; the report gives the median of those ratios,
next to the median of each target's own numbers across rounds.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from sidecar import evloop

TARGETS: Final = {"a": "stand-in (direct)", "b": "bare proxy", "c": "memgov"}
#: The optional fourth target: memgov with several workers (`memgov bench proxy --workers N`).
WORKERS_TARGET: Final = "d"
METRICS: Final = ("rps", "p50_ms", "p99_ms", "p999_ms")
RATIOS: Final = (("c/a", "c", "a"), ("c/b", "c", "b"), ("d/b", "d", "b"), ("d/c", "d", "c"))

Run = dict[str, Any]  # {"round", "target", "result": LoadResult fields, "server_cpu_s", "upstream_cpu_s"}


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def _by_round(runs: Sequence[Run]) -> dict[int, dict[str, Run]]:
    rounds: dict[int, dict[str, Run]] = {}
    for run in runs:
        rounds.setdefault(run["round"], {})[run["target"]] = run
    return rounds


def target_labels(upstream: str, workers: int = 1) -> dict[str, str]:
    """The targets' labels when ``upstream`` (``standin`` or ``kagent``) plays kagent; with ``workers`` > 1
    a fourth target runs memgov with that many workers."""
    labels = {**TARGETS, "a": "kagent v0.9.11 (direct)"} if upstream == "kagent" else dict(TARGETS)
    if workers > 1:
        labels[WORKERS_TARGET] = f"memgov, {workers} workers"
    return labels


def _cpu_per_request(run: Run) -> float:
    requests = run["result"]["requests"]
    return float(run["server_cpu_s"]) / requests if requests else math.nan


def aggregate(runs: Sequence[Run], labels: Mapping[str, str] = TARGETS) -> dict[str, Any]:
    """Per-target medians across rounds, median within-round ratios and added latency in ms."""
    targets: dict[str, Any] = {}
    for key, label in labels.items():
        mine = [r for r in runs if r["target"] == key]
        if not mine:
            continue
        res = [r["result"] for r in mine]
        per_req = [r["server_cpu_s"] * 1e6 / r["result"]["requests"] for r in mine if r["result"]["requests"]]
        targets[key] = {
            "label": label,
            **{m: _median([x[m] for x in res]) for m in METRICS},
            "errors": sum(x["errors"] for x in res),
            "generator": res[0]["generator"],
            "generator_cpu_share": _median([x["cpu_s"] / x["elapsed_s"] if x["elapsed_s"] else math.nan for x in res]),
            "generator_saturated_rounds": sum(1 for x in res if x["saturated"]),
            "generator_lag_p99_ms": _median([x["lag_p99_ms"] for x in res if x["lag_p99_ms"] is not None]),
            "generator_late_rounds": sum(1 for x in res if x["notes"]),
            "server_cpu_us_per_request": _median(per_req),
            "servers_cores": _median([r["servers_cores"] for r in mine]),
        }
    rounds = _by_round(runs).values()
    ratios: dict[str, Any] = {}
    added: dict[str, Any] = {}
    for name, top, bottom in RATIOS:
        pairs = [(r[top]["result"], r[bottom]["result"]) for r in rounds if top in r and bottom in r]
        if not pairs:
            continue
        ratios[name] = {m: _median([t[m] / b[m] if b[m] else math.nan for t, b in pairs]) for m in METRICS}
        # CPU per request, each process's own, compared within a round (what a user pays in cores).
        cpu = [(_cpu_per_request(r[top]), _cpu_per_request(r[bottom])) for r in rounds if top in r and bottom in r]
        ratios[name]["cpu_per_request"] = _median([t / b if b else math.nan for t, b in cpu])
        added[name.replace("/", "-")] = {m: _median([t[m] - b[m] for t, b in pairs]) for m in METRICS[1:]}
    other = _median([r["other_load_cores"] for r in runs])
    return {"targets": targets, "ratios": ratios, "added_ms": added, "other_load_cores": other}


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if not math.isfinite(value) else f"{value:.{digits}f}"


def render(section: Mapping[str, Any]) -> str:
    """A plain-text table for one scenario and load mode."""
    agg = section["summary"]
    head = (
        f"{section['scenario']} ({section['mode']} loop, {section['load']}, "
        f"{section['duration_s']:g} s x {section['rounds']} rounds, medians) - {section['summary_text']}"
    )
    lines = [
        head,
        f"  {'target':<27}{'rps':>9}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}"
        f"{'cpu us/req':>12}{'srv cores':>11}  generator",
    ]
    for key, t in agg["targets"].items():
        gen = f"{t['generator']} cpu {t['generator_cpu_share']:.0%}"
        if math.isfinite(t["generator_lag_p99_ms"]):
            gen += f", send lag p99 {t['generator_lag_p99_ms']:.1f} ms"
        if t["generator_saturated_rounds"]:
            gen += f", SATURATED in {t['generator_saturated_rounds']} round(s)"
        if t["generator_late_rounds"]:
            gen += f", BEHIND SCHEDULE in {t['generator_late_rounds']} round(s)"
        if t["errors"]:
            gen += f", {t['errors']} errors"
        lines.append(
            f"  ({key}) {t['label']:<23}{_fmt(t['rps'], 1):>9}{_fmt(t['p50_ms']):>9}{_fmt(t['p99_ms']):>9}"
            f"{_fmt(t['p999_ms']):>10}{_fmt(t['server_cpu_us_per_request'], 0):>12}"
            f"{_fmt(t['servers_cores']):>11}  {gen}"
        )
    for name, r in agg["ratios"].items():
        add = agg["added_ms"][name.replace("/", "-")]
        lines.append(
            f"  ratio ({name[0]})/({name[2]}): rps {_fmt(r['rps'])}  p50 {_fmt(r['p50_ms'])}  "
            f"p99 {_fmt(r['p99_ms'])}  p99.9 {_fmt(r['p999_ms'])}  cpu/req {_fmt(r['cpu_per_request'])}"
            f"   added ms: p50 {_fmt(add['p50_ms'], 3)}  p99 {_fmt(add['p99_ms'], 3)}"
        )
    lines.append(f"  other processes on the machine used {_fmt(agg['other_load_cores'])} cores during a run (median)")
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_revision() -> str | None:
    out = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parent,
    )
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(v, 2) for v in os.getloadavg()]


def machine_info() -> dict[str, Any]:
    """Cores, CPU model, kernel and load average at the time of the call."""
    return {
        "cores": os.cpu_count(),
        "usable_cores": sorted(os.sched_getaffinity(0)),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "loadavg": load_average(),
    }


def versions(wrk: str | None) -> dict[str, Any]:
    """Versions of what was measured and what measured it."""

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "python": sys.version.split()[0],
        "aiohttp": version("aiohttp"),
        "memgov": version("memgov"),
        "git": _git_revision(),
        "wrk": wrk,
        "event_loop": evloop.name(),
    }


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json(report: Mapping[str, Any], out_dir: Path, stamp: str) -> Path:
    """Write the report as strict JSON (no NaN) to ``out_dir/<stamp>.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stamp}.json"
    path.write_text(json.dumps(_finite(report), indent=2, allow_nan=False) + "\n")
    return path


def bench_argv(
    name: str, args: argparse.Namespace, *options: str, flags: Sequence[str] = (), masked: Sequence[str] = ()
) -> list[str]:
    """The command that reproduces a bench run: ``options`` with their values, the ``flags`` that are set, and
    the ``masked`` options that are set with ``URL`` for their value (a database URL may hold a password)."""
    argv = ["memgov", "bench", name]
    for option in options:
        argv += [_flag(option), str(getattr(args, option))]
    argv += [_flag(flag) for flag in flags if getattr(args, flag)]
    for option in masked:
        argv += [_flag(option), "URL"] if getattr(args, option) else []
    return argv


def _flag(attribute: str) -> str:
    return "--" + attribute.replace("_", "-")


def publish(name: str, argv: list[str], table: str, out_dir: Path, **fields: Any) -> Path:
    """Print a bench's table and write its JSON report (command, machine, versions, then ``fields``, e.g. its
    runs) as ``<name>-<time>``."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    report = {
        "command": shlex.join(argv),
        "started": stamp,
        "machine": machine_info(),
        "versions": versions(None),
        **fields,
    }
    print(table)
    path = write_json(report, out_dir, f"{name}-{stamp}")
    print(f"\nresults: {path}")
    return path
