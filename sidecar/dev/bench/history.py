"""``memgov bench history``: a scope's per-call cost as it forgets 1 to 1,000 times, and as its entries grow.

**Forget-ones.** One scope per checkpoint (1, 10, 100, 1,000 forget-ones) of the rotating agent
keeps ``--live`` entries in the kagent stand-in. Each round forgets its oldest entry the way the
control API does (lineage, the live-entry check, the erasure engine with rotation, the evidence
answer) and saves one new entry, so what is live stays the same while the history grows: every
forget-one adds a rotated namespace and a copy of every live entry. Once every scope has its
history, the store work of status and of an inspect page (``--samples`` calls) and five more
forget-ones are timed, taking the scopes in turn, so a machine whose load drifts during the run
weighs on every checkpoint alike. History is not compacted while it runs (the sweeper waits a
day), so the checkpoints see all of it; at the end one compaction shows what each scope keeps.

**Entries.** With the cap lifted, scopes of 0, 1,000 and 10,000 live entries, taken in turn: the
state work of a save (admission with its slot and in-flight record, then finishing it) and of a
search (admission, then the live filter over ten returned ids).

Every figure is per call: wall time p50 and this process's CPU time (the stand-ins run in it too,
the same amount for every scope). The report gives each as a ratio to the smallest scope.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from sidecar.dev.bench.report import bench_argv, publish
from sidecar.dev.bench.state import backends, scratch_databases
from sidecar.dev.bench.sweep import bench_scope, bench_settings, seed_entries
from sidecar.dev.devstack import start_devstack
from sidecar.erasure.machine import ErasureEngine
from sidecar.logs import configure_logging
from sidecar.ops import Readiness
from sidecar.root import ControlRoutes, Parts, control_routes, erasure_engine, open_parts
from sidecar.state import Scope, StateStore
from sidecar.state.types import ErasureKind, WriteAsk

CHECKPOINTS: Final = (1, 10, 100, 1000)
#: The largest scope the save and search state work is measured in; also at a tenth of it and empty.
ENTRIES: Final = 10_000
#: Forget-ones timed at each checkpoint.
_FORGETS_TIMED: Final = 5
_NO_CAP: Final = 10**9


def _stats(wall_ns: list[int], cpu_ns: list[int]) -> dict[str, float]:
    return {
        "n": len(wall_ns),
        "wall_p50_us": statistics.median(wall_ns) / 1000,
        "cpu_mean_us": statistics.fmean(cpu_ns) / 1000,
    }


async def _in_turn(ops: dict[int, Callable[[], Awaitable[Any]]], n: int) -> dict[int, dict[str, float]]:
    """Time each op ``n`` times, taking them in turn (one call of each per round), after one warm-up call each."""
    for op in ops.values():
        await op()  # warm prepared statements
    wall: dict[int, list[int]] = {k: [] for k in ops}
    cpu: dict[int, list[int]] = {k: [] for k in ops}
    for _ in range(n):
        for k, op in ops.items():
            w, c = time.perf_counter_ns(), time.process_time_ns()
            await op()
            cpu[k].append(time.process_time_ns() - c)
            wall[k].append(time.perf_counter_ns() - w)
    return {k: _stats(wall[k], cpu[k]) for k in ops}


async def _scope_rows(store: StateStore, scope_id: str) -> tuple[int, int]:
    async with store.db.tx("read") as tx:
        ledger = await tx.fetchrow("SELECT COUNT(*) FROM ledger WHERE scope_id = $1", scope_id)
        namespaces = await tx.fetchrow("SELECT COUNT(*) FROM namespaces WHERE scope_id = $1", scope_id)
    return (int(ledger[0]) if ledger else 0), (int(namespaces[0]) if namespaces else 0)


class _History:
    """One scope forgetting one entry per round while its live entries stay the same."""

    def __init__(self, gov: Parts, stack: Any, engine: ErasureEngine, control: ControlRoutes, scope: Scope) -> None:
        self.gov, self.stack, self.engine, self.control, self.scope = gov, stack, engine, control, scope
        self.rounds = 0

    async def forget_round(self) -> tuple[int, int]:
        """Forget the oldest entry as the control API does, then save one: (wall ns, cpu ns) of the forget."""
        gov, now = self.gov, self.gov.clock()
        oldest = (await gov.store.ledger.live_entries(self.scope.scope_id, now, None, 1))[0]
        w, c = time.perf_counter_ns(), time.process_time_ns()
        chain = await self.control.entries.forgettable(self.scope, oldest.entry_id)
        erasure = await self.engine.erase(self.scope, ErasureKind.FORGET_ONE, "subject", chain)
        record = await self.control.evidence.answer(erasure)
        cpu, wall = time.process_time_ns() - c, time.perf_counter_ns() - w
        if record.physical_deletion != "complete":
            raise RuntimeError("a forget-one did not finish with its entry physically deleted")
        scope = await gov.store.scopes.get_scope(self.scope.scope_id)
        assert scope is not None
        self.scope = scope
        await seed_entries(gov, self.stack, scope, [f"bench fact {self.rounds}"], gov.clock())
        self.rounds += 1
        return wall, cpu

    async def status(self) -> None:
        scope = await self.gov.store.scopes.get_scope(self.scope.scope_id)
        assert scope is not None
        await self.control.scopes.entry_counts(scope)
        await self.control.scopes.last_erasure(scope)

    async def inspect(self) -> None:
        now = self.gov.clock()
        scope = await self.gov.store.scopes.get_scope(self.scope.scope_id)
        assert scope is not None
        await self.gov.store.ledger.live_count(scope.scope_id, now)
        await self.gov.store.ledger.live_entries(scope.scope_id, now, None, 50)
        await self.gov.store.scopes.get_scope(scope.scope_id)  # the page's re-check of consent


async def _forget_checkpoints(
    gov: Parts, stack: Any, forgets: int, live: int, samples: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per checkpoint: the scope's rows, status, inspect and forget-one timed in turn; then one compaction."""
    engine = erasure_engine(gov)
    control = control_routes(gov, engine)
    scopes: dict[int, _History] = {}
    for target in (c for c in CHECKPOINTS if c <= forgets):
        scope = await bench_scope(gov, f"forgetting{target}", gov.clock())
        await seed_entries(gov, stack, scope, [f"bench seed {i}" for i in range(live)], gov.clock())
        history = scopes[target] = _History(gov, stack, engine, control, scope)
        while history.rounds < target:
            await history.forget_round()
        print(f"    a scope with {history.rounds} forget-ones …", flush=True)
    points = {
        c: dict(zip(("ledger_rows", "namespaces"), await _scope_rows(gov.store, h.scope.scope_id), strict=True))
        for c, h in scopes.items()
    }
    status = await _in_turn({c: h.status for c, h in scopes.items()}, samples)
    inspect = await _in_turn({c: h.inspect for c, h in scopes.items()}, samples)
    timed: dict[int, list[tuple[int, int]]] = {c: [] for c in scopes}
    for _ in range(_FORGETS_TIMED):
        for c, h in scopes.items():
            timed[c].append(await h.forget_round())
    out = [
        {
            "forgets": c,
            **points[c],
            "status": status[c],
            "inspect": inspect[c],
            "forget_one": _stats([w for w, _ in timed[c]], [u for _, u in timed[c]]),
        }
        for c in scopes
    ]
    grace = timedelta(seconds=gov.settings.erasure.history_grace_s)
    later = datetime.now(UTC) + grace + timedelta(hours=1)
    compacted = await gov.store.history.compact_history(later, later - grace, 500)
    kept = [await _scope_rows(gov.store, h.scope.scope_id) for h in scopes.values()]
    return out, {
        "ledger_rows_removed": compacted.ledger_rows,
        "namespaces_removed": compacted.namespaces,
        "kept_per_scope": [{"ledger_rows": k[0], "namespaces": k[1]} for k in kept],
    }


async def _entries_growth(gov: Parts, samples: int, entries: int) -> list[dict[str, Any]]:
    """CPU of a save's and a search's state work in scopes of 0, entries/10 and entries rows, in turn (cap lifted)."""
    store, now = gov.store, gov.clock()

    def no_claims(_scope: Scope, _window: str | None) -> list[Any]:
        return []

    class Growing:
        def __init__(self, scope: Scope) -> None:
            assert scope.namespace is not None
            self.scope, self.ns_id, self.filled = scope, scope.namespace.ns_id, 0

        async def save(self) -> None:
            scope, ask = self.scope, WriteAsk(1, _NO_CAP, 30.0)
            adm = await store.admission.admit(scope.scope_id, scope.generation, no_claims, now, write=ask)
            assert adm.op_id is not None and len(adm.slots) == 1
            fills = [(adm.slots[0], f"{scope.scope_id}-{self.filled}", now, now + timedelta(days=7))]
            await store.admission.finish_write(adm.op_id, scope.scope_id, self.ns_id, fills)
            self.filled += 1

        async def search(self) -> None:
            adm = await store.admission.admit(self.scope.scope_id, self.scope.generation, no_claims, now, window=True)
            assert adm.live
            ids = [f"{self.scope.scope_id}-{i}" for i in range(10)]
            await store.ledger.filter_live(self.scope.scope_id, self.ns_id, ids, now)

    growing = {}
    for size in (0, entries // 10, entries):
        g = growing[size] = Growing(await bench_scope(gov, f"growing{size}", now))
        while g.filled < size:
            await g.save()
    saves = await _in_turn({s: g.save for s, g in growing.items()}, samples)
    searches = await _in_turn({s: g.search for s, g in growing.items()}, samples)
    return [{"entries": s, "save": saves[s], "search": searches[s]} for s in growing]


async def run_history_bench(
    state_url: str, forgets: int, live: int, samples: int, folder: Path, entries: int = ENTRIES
) -> dict[str, Any]:
    """Grow one scope's history to ``forgets`` forget-ones, measuring at each checkpoint, then compact."""
    stack = await start_devstack(stream_delay_s=0)
    try:
        settings = bench_settings(folder, state_url, stack.kagent_url, stack.embedding_url)
        async with open_parts(settings, Readiness()) as gov:
            points, compaction = await _forget_checkpoints(gov, stack, forgets, live, samples)
            growth = await _entries_growth(gov, samples, entries)
            backend = gov.store.backend
    finally:
        await stack.stop()
    return {
        "backend": backend,
        "live_entries": live,
        "checkpoints": points,
        "compaction": compaction,
        "entries_growth": growth,
    }


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}" if base else "-"


def _render(runs: list[dict[str, Any]]) -> str:
    lines = [
        f"{'backend':<11}{'forgets':>8}{'ledger':>8}{'ns':>5}  {'status µs':>10}{'×':>6}{'cpu×':>6}"
        f"  {'inspect µs':>10}{'×':>6}{'cpu×':>6}  {'forget µs':>10}{'×':>6}{'cpu×':>6}"
    ]
    for run in runs:
        first = run["checkpoints"][0]
        for p in run["checkpoints"]:
            cells = []
            for op in ("status", "inspect", "forget_one"):
                s, b = p[op], first[op]
                cells.append(
                    f"{s['wall_p50_us']:>10.0f}{_ratio(s['wall_p50_us'], b['wall_p50_us']):>6}"
                    f"{_ratio(s['cpu_mean_us'], b['cpu_mean_us']):>6}"
                )
            lines.append(
                f"{run['backend']:<11}{p['forgets']:>8}{p['ledger_rows']:>8}{p['namespaces']:>5}  " + "  ".join(cells)
            )
        kept = ", ".join(f"{k['ledger_rows']}/{k['namespaces']}" for k in run["compaction"]["kept_per_scope"])
        lines.append(
            f"{run['backend']:<11}after compaction, ledger rows/namespaces per scope: {kept}"
            f" ({run['live_entries']} live entries each)"
        )
    lines.append("")
    lines.append(f"{'backend':<11}{'entries':>8}  {'save cpu µs':>12}{'×':>6}  {'search cpu µs':>14}{'×':>6}")
    for run in runs:
        first = run["entries_growth"][0]
        for p in run["entries_growth"]:
            save, search = p["save"]["cpu_mean_us"], p["search"]["cpu_mean_us"]
            lines.append(
                f"{run['backend']:<11}{p['entries']:>8}  {save:>12.0f}{_ratio(save, first['save']['cpu_mean_us']):>6}"
                f"  {search:>14.0f}{_ratio(search, first['search']['cpu_mean_us']):>6}"
            )
    return "\n".join(lines)


def _cmd(args: argparse.Namespace) -> int:
    configure_logging("warning", stream=open(os.devnull, "w"))  # noqa: SIM115 - lives for the process
    runs: list[dict[str, Any]] = []
    with scratch_databases("memgov-bench-history-") as url, tempfile.TemporaryDirectory() as keys:
        for backend in backends(args.backend):
            print(f"  {backend}: one scope of {args.live} live entries, {args.forgets} forget-ones …", flush=True)
            runs.append(
                asyncio.run(
                    run_history_bench(
                        url(backend, "memgov_bench_history"),
                        args.forgets,
                        args.live,
                        args.samples,
                        Path(keys),
                        args.entries,
                    )
                )
            )
    argv = bench_argv("history", args, "backend", "forgets", "live", "samples", "entries", "out")
    publish("history", argv, _render(runs), Path(args.out), runs=runs)
    return 0


def register_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memgov bench history``."""
    p = bench.add_parser("history", help="Status, inspect and forget-one cost from 1 to 1,000 forget-ones in a scope.")
    p.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both", help="Backend(s) to measure.")
    p.add_argument("--forgets", type=int, default=1000, help="Forget-ones in the scope at the last checkpoint.")
    p.add_argument("--live", type=int, default=10, help="Live entries the scope keeps throughout.")
    p.add_argument("--samples", type=int, default=200, help="Timed status, inspect, save and search calls per point.")
    p.add_argument(
        "--entries", type=int, default=ENTRIES, help="Largest scope (rows) a save and a search are measured in."
    )
    p.add_argument("--out", default="benchmarks/results", help="Folder for the JSON result.")
    p.set_defaults(func=_cmd)
