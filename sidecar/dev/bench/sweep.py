"""``memgov bench sweep``: the sweeper's cost with namespace rotation as the number of scopes grows.

A state store is bulk-loaded with scopes whose entries are all live (``bench state``'s loader), so
none needs rotating; then ``--rotations`` extra scopes each get ``--entries`` real rows in the
kagent stand-in, one of them forgotten. Measured on each size: the candidate query the sweeper
runs (p50/p99), one full sweep pass with the stand-ins and an embedding provider stand-in
(rotating exactly the prepared scopes), and a second pass with nothing left to do. Only the
prepared scopes may be rotated: the run fails otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from sidecar.dev.bench.report import bench_argv, publish
from sidecar.dev.bench.state import backends, grow, percentiles, scratch_databases
from sidecar.dev.devstack import start_devstack
from sidecar.dev.devstack.store import NewMemory
from sidecar.dev.devstack.vectors import embed_text
from sidecar.erasure.sweeper import sweep_once
from sidecar.identity.appname import app_name
from sidecar.logs import configure_logging
from sidecar.ops import Readiness
from sidecar.root import Parts, erasure_engine, erasure_parts, open_parts, sweep_plan
from sidecar.settings import PACKAGED_POLICY_DIR, load_settings
from sidecar.state import Scope

SIZES: Final = {"small": (1_000, 10_000), "large": (100_000, 1_000_000)}
AGENT: Final = "bench/rotating"
_MODEL: Final = "bench-embedding"


def bench_settings(folder: Path, state_url: str, kagent_url: str, embedding_url: str) -> Any:
    key = folder / "session.key"
    key.write_text(os.urandom(32).hex())
    return load_settings(
        upstream={"controller_url": kagent_url, "embedding_url": embedding_url},
        listen={"data": "127.0.0.1:0", "control": "127.0.0.1:0", "ops": "127.0.0.1:0"},
        state={"url": state_url},
        policy={"dir": str(PACKAGED_POLICY_DIR), "reload_interval_s": 0},
        secrets={"session_key_file": str(key)},
        matrix={"server_name": "bench.example"},
        agents={
            AGENT: {
                "disabled_variant": "rotating-nomem",
                "ghost": "@rotating:bench.example",
                "embedding_model": _MODEL,
                "embedding_dimensions": 768,
            }
        },
    )


async def _prepare(gov: Parts, stack: Any, rotations: int, entries: int, now: datetime) -> set[str]:
    """Scopes that need a rotation: ``entries`` rows each in kagent and the ledger, the first one forgotten."""
    store = gov.store
    prepared = set()
    for i in range(rotations):
        scope = await bench_scope(gov, f"rot{i}", now)
        ids = await seed_entries(gov, stack, scope, [f"bench scope {i} fact {n}" for n in range(entries)], now)
        await store.ledger.tombstone(scope.scope_id, ids[:1], now)
        prepared.add(scope.scope_id)
    return prepared


async def bench_scope(gov: Parts, name: str, now: datetime) -> Scope:
    """A granted scope of the bench's rotating agent."""
    scope, _ = await gov.store.scopes.create_scope(
        f"@{name}:bench.example", "native", AGENT, "control_room", f"!{name}:bench.example", now
    )
    scope, _ = await gov.store.scopes.grant(scope.scope_id, "benchmark", "v1", now)
    return scope


async def seed_entries(gov: Parts, stack: Any, scope: Scope, texts: list[str], now: datetime) -> list[str]:
    """Save ``texts`` into the scope's live namespace in the kagent stand-in and the ledger, as a save does."""
    ns = scope.namespace
    assert ns is not None  # a granted scope has its live namespace
    app = app_name(*AGENT.split("/"))
    slots = await gov.store.ledger.reserve_entries(scope.scope_id, scope.generation, ns.ns_id, len(texts), 10**9, now)
    ids = []
    for slot, text in zip(slots, texts, strict=True):
        entry_id = await stack.store.insert(NewMemory(app, ns.storage_key, text, embed_text(text), "{}", None))
        await gov.store.ledger.fill_entry(slot, entry_id, now, now + timedelta(days=7))
        ids.append(entry_id)
    return ids


async def run_sweep_bench(
    state_url: str, scopes: int, ledger_rows: int, rotations: int, entries: int, ops: int, folder: Path
) -> dict[str, Any]:
    """Grow the store, prepare the rotating scopes, and time the candidate query and two sweep passes."""
    now = datetime.now(UTC)
    stack = await start_devstack(stream_delay_s=0)
    try:
        settings = bench_settings(folder, state_url, stack.kagent_url, stack.embedding_url)
        async with open_parts(settings, Readiness()) as gov:
            load_s = await grow(gov.store, scopes, ledger_rows, int(now.timestamp() * 1_000_000))
            prepared = await _prepare(gov, stack, rotations, entries, now)
            found = set(await gov.store.lineage.rotation_candidates(now, now, 10 * rotations + 10))
            if found != prepared:
                raise RuntimeError("the candidate query found other scopes than the prepared ones")
            samples = []
            for _ in range(ops):
                begin = time.perf_counter_ns()
                await gov.store.lineage.rotation_candidates(now, now, 10_000)
                samples.append(time.perf_counter_ns() - begin)
            engine, erasing, plan = erasure_engine(gov), erasure_parts(gov), sweep_plan(gov)
            started = time.perf_counter()
            busy = await sweep_once(erasing, plan, engine)
            busy_s = time.perf_counter() - started
            started = time.perf_counter()
            idle = await sweep_once(erasing, plan, engine)
            idle_s = time.perf_counter() - started
            backend = gov.store.backend
        if (busy.rotated, busy.failures, idle.rotated) != (rotations, 0, 0):
            raise RuntimeError("the sweep did not rotate exactly the prepared scopes")
        embedded = sum(len(c.inputs) for c in stack.embedding.calls)
    finally:
        await stack.stop()
    return {
        "backend": backend,
        "scopes": scopes + rotations,
        "ledger_rows": ledger_rows + rotations * entries,
        "rotations": rotations,
        "entries_per_scope": entries,
        "load_s": load_s,
        "candidates_query": percentiles(samples),
        "sweep_with_rotations_s": busy_s,
        "per_rotation_ms": busy_s * 1000 / max(rotations, 1),
        "idle_sweep_s": idle_s,
        "embedding_items": embedded,
    }


def _render(runs: list[dict[str, Any]]) -> str:
    lines = [
        (
            f"{'backend':<11}{'scopes':>8}{'ledger':>10}{'cand p50 µs':>13}{'cand p99 µs':>13}"
            f"{'rotations':>10}{'pass s':>8}{'ms/rot':>8}{'idle s':>8}"
        )
    ]
    for r in runs:
        q = r["candidates_query"]
        lines.append(
            f"{r['backend']:<11}{r['scopes']:>8}{r['ledger_rows']:>10}{q['p50_us']:>13.0f}{q['p99_us']:>13.0f}"
            f"{r['rotations']:>10}{r['sweep_with_rotations_s']:>8.2f}{r['per_rotation_ms']:>8.1f}"
            f"{r['idle_sweep_s']:>8.3f}"
        )
    return "\n".join(lines)


def _cmd(args: argparse.Namespace) -> int:
    sizes = [SIZES["small"], SIZES["large"]] if args.large else [SIZES["small"]]
    configure_logging("warning", stream=open(os.devnull, "w"))  # noqa: SIM115 - lives for the process
    runs: list[dict[str, Any]] = []
    with scratch_databases("memgov-bench-sweep-") as url, tempfile.TemporaryDirectory() as keys:
        for backend in backends(args.backend):
            for n, (scopes, rows) in enumerate(sizes):
                print(f"  {backend}: {scopes} scopes, {rows} ledger rows, {args.rotations} to rotate …", flush=True)
                runs.append(
                    asyncio.run(
                        run_sweep_bench(
                            url(backend, f"memgov_bench_sweep_{n}"),
                            scopes,
                            rows,
                            args.rotations,
                            args.entries,
                            args.ops,
                            Path(keys),
                        )
                    )
                )
    argv = bench_argv("sweep", args, "backend", "rotations", "entries", "ops", "out", flags=("large",))
    publish("sweep", argv, _render(runs), Path(args.out), runs=runs)
    return 0


def register_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memgov bench sweep``."""
    p = bench.add_parser("sweep", help="Sweeper cost with namespace rotation at 1,000 and 100,000 scopes.")
    p.add_argument("--large", action="store_true", help="Also measure at 100,000 scopes and 1,000,000 ledger rows.")
    p.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both", help="Backend(s) to measure.")
    p.add_argument(
        "--rotations", type=int, default=100, help="Scopes prepared to need a rotation (one forgotten entry)."
    )
    p.add_argument("--entries", type=int, default=10, help="Entries per prepared scope.")
    p.add_argument("--ops", type=int, default=200, help="Measured candidate queries per size.")
    p.add_argument("--out", default="benchmarks/results", help="Folder for the JSON result.")
    p.set_defaults(func=_cmd)
