"""``memgov bench state``: state-store latency per operation as scopes and the ledger grow.

One database per backend is bulk-loaded server-side (``generate_series`` on PostgreSQL, a
recursive CTE on SQLite) to the small size, measured, then grown to the large size and measured
again. Each sample is one awaited store call from a single client, as the gateway's hot path
makes it. Budget claims use limits far above the samples taken so every reservation takes the
admitting (writing) path; the numbers measure cost, not policy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from sidecar.dev.bench.report import bench_argv, publish
from sidecar.logs import configure_logging
from sidecar.state import BudgetClaim, Scope, StateStore, open_store
from sidecar.state.codec import to_us
from sidecar.state.lanes import long_statements
from sidecar.state.types import WriteAsk

#: (scopes, ledger rows) per size; the issue's two points of comparison.
SIZES: Final = {"small": (100, 1_000), "large": (100_000, 1_000_000)}
_WEEK_US: Final = 7 * 86_400 * 1_000_000
_HUGE: Final = 10**12

_PG_SCOPES = """
INSERT INTO scopes (scope_id, principal_mxid, origin, agent, kind, room_id, enabled, generation, purpose,
                    policy_version, created_us, updated_us, consented_us)
SELECT 's' || lpad(to_hex(i), 24, '0'), '@user' || i || ':bench.example', 'native', 'bench/agent' || (i % 10),
       'control_room', '!room' || i || ':bench.example', TRUE, 1, 'benchmark', 'v1', $3, $3, $3
FROM generate_series(CAST($1 AS BIGINT), CAST($2 AS BIGINT) - 1) AS i
"""
_PG_LEDGER = """
INSERT INTO ledger (slot_id, scope_id, generation, entry_id, created_us, expires_us, ns_id)
SELECT 'k' || lpad(to_hex(j), 24, '0'), 's' || lpad(to_hex(LEAST(j / $3, $4 - 1)), 24, '0'), 1, 'bench-' || j,
       $5 - (j % 86400) * 1000000, $5 - (j % 86400) * 1000000 + $6, 'n' || lpad(to_hex(LEAST(j / $3, $4 - 1)), 24, '0')
FROM generate_series(CAST($1 AS BIGINT), CAST($2 AS BIGINT) - 1) AS j
"""
# Each bench scope's live namespace: id and salt derived from the scope id (the bench needs no secrecy).
_NAMESPACES = """
INSERT INTO namespaces (ns_id, scope_id, generation, salt, state, created_us)
SELECT 'n' || substr(s.scope_id, 2), s.scope_id, 1, substr(s.scope_id, 2) || '00000000', 'live', $1 FROM scopes s
WHERE NOT EXISTS (SELECT 1 FROM namespaces n WHERE n.scope_id = s.scope_id)
"""
_SQLITE_SEQ = "WITH RECURSIVE seq(i) AS (SELECT $1 WHERE $1 < $2 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < $2) "
_SQLITE_SCOPES = (
    _SQLITE_SEQ
    + """
INSERT INTO scopes (scope_id, principal_mxid, origin, agent, kind, room_id, enabled, generation, purpose,
                    policy_version, created_us, updated_us, consented_us)
SELECT printf('s%024x', i), '@user' || i || ':bench.example', 'native', 'bench/agent' || (i % 10),
       'control_room', '!room' || i || ':bench.example', 1, 1, 'benchmark', 'v1', $3, $3, $3 FROM seq
"""
)
_SQLITE_LEDGER = (
    _SQLITE_SEQ
    + """
INSERT INTO ledger (slot_id, scope_id, generation, entry_id, created_us, expires_us, ns_id)
SELECT printf('k%024x', i), printf('s%024x', min(i / $3, $4 - 1)), 1, 'bench-' || i,
       $5 - (i % 86400) * 1000000, $5 - (i % 86400) * 1000000 + $6, printf('n%024x', min(i / $3, $4 - 1)) FROM seq
"""
)


def _scope_id(i: int) -> str:
    return f"s{i:024x}"


async def _count(store: StateStore, sql: str) -> int:
    async with store.db.tx("read") as tx:
        row = await tx.fetchrow(sql)
    return int(row[0]) if row else 0


async def grow(store: StateStore, scopes: int, ledger_rows: int, now_us: int) -> float:
    """Bulk-load scopes and ledger rows up to the target size; return seconds spent."""
    have_scopes = await _count(store, "SELECT COUNT(*) FROM scopes")
    have_rows = await _count(store, "SELECT COUNT(*) FROM ledger WHERE slot_id LIKE 'k%'")
    if have_scopes > scopes or have_rows > ledger_rows:
        raise ValueError("the database is larger than the requested size; use an empty database")
    pg = store.backend == "postgresql"
    per_scope = max(1, ledger_rows // scopes)
    start = time.perf_counter()
    # Millions of rows in one statement: beyond the bound a gateway's statements have.
    with long_statements():
        async with store.db.tx("write") as tx:
            await tx.execute(_PG_SCOPES if pg else _SQLITE_SCOPES, have_scopes, scopes, now_us)
            await tx.execute(_NAMESPACES, now_us)
            await tx.execute(
                _PG_LEDGER if pg else _SQLITE_LEDGER, have_rows, ledger_rows, per_scope, scopes, now_us, _WEEK_US
            )
        async with store.db.tx("read") as tx:
            await tx.execute("ANALYZE")
    return time.perf_counter() - start


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    return {"n": len(ordered), "p50_us": pick(0.50), "p99_us": pick(0.99), "mean_us": statistics.fmean(ordered) / 1000}


async def _measure(op: Callable[[int], Awaitable[Any]], ops: int) -> dict[str, float]:
    for i in range(max(ops // 10, 10)):  # warm caches and prepared statements
        await op(i)
    samples: list[int] = []
    for i in range(ops):
        begin = time.perf_counter_ns()
        await op(i)
        samples.append(time.perf_counter_ns() - begin)
    return percentiles(samples)


async def run_state_bench(url: str, scopes: int, ledger_rows: int, ops: int) -> dict[str, Any]:
    """Grow the store at ``url`` to ``scopes``/``ledger_rows`` and measure each operation ``ops`` times."""
    now = datetime.now(UTC)
    rng = random.Random(scopes)
    picks = [_scope_id(rng.randrange(scopes)) for _ in range(ops * 2)]
    store = await open_store(url)
    try:
        load_s = await grow(store, scopes, ledger_rows, to_us(now))

        async def lookup(i: int) -> None:
            scope = await store.scopes.get_scope(picks[i % len(picks)])
            if scope is None or not scope.enabled or scope.generation != 1:
                raise RuntimeError("benchmark scope missing or fenced")

        async def fenced_write(i: int) -> None:
            sid = picks[i % len(picks)]
            await store.scopes.end_write(await store.scopes.begin_write(sid, 1, "n" + sid[1:], 60, now))

        async def ledger_insert(i: int) -> None:
            sid = picks[i % len(picks)]
            (slot,) = await store.ledger.reserve_entries(sid, 1, "n" + sid[1:], 1, _HUGE, now)
            await store.ledger.fill_entry(
                slot, f"m-{scopes}-{i}-{rng.getrandbits(32):08x}", now, now + timedelta(days=7)
            )

        async def filter_live(i: int) -> None:
            sid = picks[i % len(picks)]
            base = int(sid[1:], 16) * max(1, ledger_rows // scopes)
            await store.ledger.filter_live(sid, "n" + sid[1:], [f"bench-{base + k}" for k in range(10)], now)

        async def budget(i: int) -> None:
            claims = [
                BudgetClaim("bucket", f"@user{i % 1000}:bench.example|bench/agent", _HUGE, refill_per_s=1.0),
                BudgetClaim("window", picks[i % len(picks)], _HUGE, reason="hourly_budget_exhausted"),
            ]
            if await store.budgets.reserve_budget(claims, now) is not None:
                raise RuntimeError("benchmark budget refused")

        def claims(scope: Scope, _window: str | None) -> list[BudgetClaim]:
            return [
                BudgetClaim("bucket", f"rate:{scope.principal_mxid}:{scope.agent}", _HUGE, refill_per_s=1.0),
                BudgetClaim(
                    "window", f"hour:{scope.scope_id}", _HUGE, cost=2, window_s=3600, reason="hourly_budget_exhausted"
                ),
            ]

        async def governed_save(i: int) -> None:
            sid = picks[i % len(picks)]
            adm = await store.admission.admit(sid, 1, claims, now, write=WriteAsk(1, _HUGE, 60))
            if adm.op_id is None or adm.refused is not None:
                raise RuntimeError("benchmark save not admitted")
            fill = (adm.slots[0], f"s-{scopes}-{i}-{rng.getrandbits(32):08x}", now, now + timedelta(days=7))
            if not await store.admission.finish_write(adm.op_id, sid, "n" + sid[1:], [fill]):
                raise RuntimeError("benchmark save fenced")

        async def governed_search(i: int) -> None:
            sid = picks[i % len(picks)]
            adm = await store.admission.admit(sid, 1, claims, now, window=True)
            if not adm.live or adm.refused is not None:
                raise RuntimeError("benchmark search not admitted")
            base = int(sid[1:], 16) * max(1, ledger_rows // scopes)
            await store.ledger.filter_live(sid, "n" + sid[1:], [f"bench-{base + k}" for k in range(5)], now)

        measured = {
            "save: admit + finish_write": governed_save,
            "search: admit + filter_live": governed_search,
            "get_scope + generation check": lookup,
            "begin_write + end_write": fenced_write,
            "reserve_entries + fill_entry": ledger_insert,
            "filter_live (10 ids)": filter_live,
            "reserve_budget (bucket + window)": budget,
        }
        results = {name: await _measure(op, ops) for name, op in measured.items()}
    finally:
        await store.close()
    return {"backend": store.backend, "scopes": scopes, "ledger_rows": ledger_rows, "load_s": load_s, "ops": results}


def _render(runs: list[dict[str, Any]]) -> str:
    lines = [f"{'backend':<11}{'scopes':>8}{'ledger':>10}  {'operation':<34}{'p50 µs':>9}{'p99 µs':>9}{'n':>7}"]
    for run in runs:
        for name, s in run["ops"].items():
            lines.append(
                f"{run['backend']:<11}{run['scopes']:>8}{run['ledger_rows']:>10}  {name:<34}"
                f"{s['p50_us']:>9.0f}{s['p99_us']:>9.0f}{s['n']:>7}"
            )
    lines.append("bulk load: " + ", ".join(f"{r['backend']} {r['scopes']} scopes {r['load_s']:.1f} s" for r in runs))
    return "\n".join(lines)


def backends(choice: str) -> tuple[str, ...]:
    """The backends a ``--backend`` choice names."""
    return ("sqlite", "postgresql") if choice == "both" else (choice,)


@contextmanager
def scratch_databases(prefix: str, pg_url: str | None = None) -> Iterator[Callable[[str, str], str]]:
    """``url(backend, name)``: an empty database in a temporary folder or on a throwaway PostgreSQL server
    (``pg_url``: that database instead); everything is removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    server: Any = None

    def url(backend: str, name: str) -> str:
        nonlocal server
        if backend == "sqlite":
            return f"sqlite:///{tmp}/{name}.db"
        if pg_url:
            return pg_url
        if server is None:
            from sidecar.dev.devstack.pg import start_pg

            server = start_pg()
        return str(server.create_database(name))

    try:
        yield url
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _cmd(args: argparse.Namespace) -> int:
    sizes = [SIZES["small"], SIZES["large"]] if args.large else [SIZES["small"]]
    configure_logging("info", stream=open(os.devnull, "w"))  # noqa: SIM115 - lives for the process
    runs: list[dict[str, Any]] = []
    with scratch_databases("memgov-bench-state-", args.pg_url) as url:
        for backend in backends(args.backend):
            database = url(backend, "memgov_bench")  # grown in place from the small to the large size
            for scopes, rows in sizes:
                print(f"  {backend}: {scopes} scopes, {rows} ledger rows …", flush=True)
                runs.append(asyncio.run(run_state_bench(database, scopes, rows, args.ops)))
    argv = bench_argv("state", args, "backend", "ops", "out", flags=("large",), masked=("pg_url",))
    publish("state", argv, _render(runs), Path(args.out), runs=runs)
    return 0


def register_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memgov bench state``."""
    p = bench.add_parser("state", help="State-store latency per operation at 100 and 100,000 scopes.")
    p.add_argument("--pg-url", help="Empty PostgreSQL database to use (it is filled); default: a throwaway server.")
    p.add_argument("--large", action="store_true", help="Also grow to 100,000 scopes and 1,000,000 ledger rows.")
    p.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both", help="Backend(s) to measure.")
    p.add_argument("--ops", type=int, default=2000, help="Measured calls per operation and size.")
    p.add_argument("--out", default="benchmarks/results", help="Folder for the JSON result.")
    p.set_defaults(func=_cmd)
