"""``memgov fuzz``: property-based fuzzing of the data plane and schema-driven fuzzing of the control API.

Runs an in-process gateway (Cedar, SQLite) in front of the kagent and embedding stand-ins, prints
progress and a summary (cases per route, failures by kind, one reduced reproducer per failure
class) and exits 1 when any contract broke.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from sidecar.command import add_command

if TYPE_CHECKING:  # the fuzzer needs the test extra (hypothesis, jsonschema); `memgov --help` must not
    from sidecar.dev.fuzz.runner import Key, Report, Target

LEGEND = (
    "placeholders: «S:<tag>» a sentinel; KEY, KEY_* session keys; STORAGE_KEY the scope's storage key; "
    "CTX, CTX_* delegation contexts; AUTH the caller's Authorization; SCOPE_ID, PRINCIPAL, ROOM, "
    "ENTRY_ID, ERASURE_ID, CONFIRM the case's own ids"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``fuzz`` command."""
    parser = add_command(
        subparsers, "fuzz", "Fuzz the data plane and the control API against their contracts (dev tooling).", __doc__
    )
    parser.add_argument("--cases", type=int, default=1000, help="How many cases to run (default 1000).")
    parser.add_argument("--seed", type=int, default=0, help="Seed; the same seed draws the same cases (default 0).")
    parser.add_argument(
        "--start",
        type=int,
        default=0,
        help="First case of the seed's sequence to run, a multiple of the stack length (2000; default "
        "0): runs from aligned starts are shards of one long run, for several cores.",
    )
    parser.add_argument(
        "--target",
        choices=("data", "control", "all"),
        default="all",
        help="Which interface to fuzz (default all: three data-plane cases per control case).",
    )
    parser.add_argument("--no-shrink", action="store_true", help="Print the smallest failing example as found.")
    parser.set_defaults(func=run)


async def fuzz(
    cases: int, seed: int, target: Target, *, shrink: bool = True, progress: Any = print, start: int = 0
) -> tuple[Report, dict[Key, Any]]:
    """Run the fuzzer on a fresh stack; the report and one reproducer per failure class."""
    from sidecar.dev.fuzz.runner import Fuzzer
    from sidecar.dev.fuzz.stack import fuzz_stack

    fuzzer = Fuzzer(fuzz_stack, target, seed, progress)
    report = await fuzzer.run(cases, start)
    if shrink and report.examples:
        progress(f"fuzz: reducing {len(report.examples)} failure classes to small reproducers")
    reduced = await fuzzer.shrink() if shrink and report.examples else dict(report.examples)
    return report, reduced


def summary(report: Report, reduced: dict[Key, Any], seed: int, start: int = 0) -> str:
    """The human summary: cases per route, failures by kind, reproducers."""
    planes: dict[str, int] = defaultdict(int)
    for (plane, _), n in report.cases.items():
        planes[plane] += n
    rate = report.total / report.seconds if report.seconds else 0.0
    lines = [
        f"memgov fuzz: {report.total} cases ({', '.join(f'{p} {n}' for p, n in sorted(planes.items()))}), "
        f"seed {seed}{f', from case {start}' if start else ''}, {report.seconds:.1f} s ({rate:.1f} cases/s)",
        "",
        "cases per route",
        f"{'plane':<8} {'route':<22} {'cases':>7} {'failing':>8}  answers",
    ]
    for (plane, route), n in sorted(report.cases.items()):
        answers = sorted(
            ((s, c) for (p, r, s), c in report.statuses.items() if (p, r) == (plane, route)),
            key=lambda sc: (sc[0] is None, sc[0] or 0),
        )
        shown = " ".join(f"{s if s is not None else 'none'}×{c}" for s, c in answers)
        lines.append(f"{plane:<8} {route:<22} {n:>7} {report.failed[(plane, route)]:>8}  {shown}")
    lines += ["", "failures by kind" if report.failures else "failures by kind: none"]
    if report.failures:
        lines.append(f"{'kind':<32} {'route':<22} {'cases':>7}  example")
        for (kind, route), n in sorted(report.failures.items()):
            lines.append(f"{kind:<32} {route:<22} {n:>7}  {report.details.get((kind, route), '')}")
    if reduced:
        lines += ["", f"reproducers ({LEGEND})"]
        for i, ((kind, route), case) in enumerate(sorted(reduced.items()), 1):
            lines += ["", f"[{i}] {kind} on {route}: {report.details.get((kind, route), '')}"]
            lines += ["  " + line for line in case.show().splitlines()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Fuzz, print the summary, exit 1 on any failure."""
    if args.cases < 1:
        print("memgov fuzz: --cases must be at least 1")
        return 2
    if any(importlib.util.find_spec(name) is None for name in ("hypothesis", "jsonschema")):
        print("memgov fuzz: needs the test extra (pip install -e '.[test]')")
        return 2
    from sidecar.dev.fuzz.runner import STACK_CASES

    if args.start < 0 or args.start % STACK_CASES:
        print(f"memgov fuzz: --start must be a non-negative multiple of {STACK_CASES}")
        return 2
    report, reduced = asyncio.run(fuzz(args.cases, args.seed, args.target, shrink=not args.no_shrink, start=args.start))
    print(summary(report, reduced, args.seed, args.start), flush=True)
    return 1 if report.failures else 0
