"""Drive the fuzzer: draw cases with hypothesis, run them, count, shrink failures, report.

Hypothesis generates the cases (seeded, no example database, generation phase only) in a worker
thread and hands each to the event loop that runs the stack; every case runs to its verdict, so
one run counts every failure instead of stopping at the first. Afterwards each failure class (kind
and route) is reduced from its smallest example by re-running simpler variants of it; what is
printed is that reduced, content-free reproducer.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from sidecar.dev.fuzz.bodies import weighted
from sidecar.dev.fuzz.cases import Case, Request, Setup
from sidecar.dev.fuzz.control import control_cases
from sidecar.dev.fuzz.data import data_cases
from sidecar.dev.fuzz.jsondoc import Arr, Deep, Doc, Node, Obj, Ph, Str
from sidecar.dev.fuzz.oracle import MARKER, Failure, Outcome
from sidecar.dev.fuzz.run_control import run_control_case
from sidecar.dev.fuzz.run_data import run_data_case
from sidecar.dev.fuzz.stack import FuzzStack, SetupFailed

Target = Literal["data", "control", "all"]
BATCH = 500
#: Cases per stack: kagent's table, the state store and the process stay small on long runs.
STACK_CASES = 2000
#: How often (in cases) the whole state store is scanned for sentinels.
STATE_SCAN_EVERY = 1000
#: Time to reduce one failure class, and all of them together.
SHRINK_SECONDS = 10.0
SHRINK_TOTAL_SECONDS = 240.0
Key = tuple[str, str]


@dataclass
class Report:
    """Counts of one run and one example per failure class."""

    cases: Counter[tuple[str, str]] = field(default_factory=Counter)
    statuses: Counter[tuple[str, str, int | None]] = field(default_factory=Counter)
    failed: Counter[tuple[str, str]] = field(default_factory=Counter)
    failures: Counter[Key] = field(default_factory=Counter)
    details: dict[Key, str] = field(default_factory=dict)
    examples: dict[Key, Case] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(self.cases.values())

    def add(self, outcome: Outcome) -> None:
        case: Case = outcome.case
        key = (case.plane, case.route)
        self.cases[key] += 1
        self.statuses[(*key, outcome.status)] += 1
        if outcome.failures:
            self.failed[key] += 1
        for failure in {(f.kind, f.route): f for f in outcome.failures}.values():
            self.record(failure, case)

    def record(self, failure: Failure, case: Case | None) -> None:
        cls = (failure.kind, failure.route)
        self.failures[cls] += 1
        if case is not None and (cls not in self.examples or _size(case) < _size(self.examples[cls])):
            self.examples[cls], self.details[cls] = case, failure.detail
        self.details.setdefault(cls, failure.detail)


def _size(case: Case) -> int:
    return len(case.show())


def strategy_for(target: Target, doc: Mapping[str, Any]) -> st.SearchStrategy[Case]:
    """The case strategy of a target (``all``: three data cases for each control case)."""
    if target == "data":
        return data_cases()
    if target == "control":
        return control_cases(doc)
    return weighted((3, "data"), (1, "control")).flatmap(
        lambda plane: data_cases() if plane == "data" else control_cases(doc)
    )


class Fuzzer:
    """One target, one seed; a fresh stack every :data:`STACK_CASES` cases keeps tables and memory small."""

    def __init__(
        self,
        open_stack: Callable[[], AbstractAsyncContextManager[FuzzStack]],
        target: Target,
        seed_value: int,
        progress: Callable[[str], None] = print,
    ) -> None:
        self.open_stack, self.target, self.seed = open_stack, target, seed_value
        self.progress = progress
        self.report = Report()
        self.doc: Mapping[str, Any] = {}
        self._started = time.perf_counter()
        self._stack: FuzzStack | None = None
        self._start = 0

    @property
    def stack(self) -> FuzzStack:
        assert self._stack is not None, "only while a stack runs"
        return self._stack

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FuzzStack]:
        """A fresh stack for the next stretch of cases (the OpenAPI document is read from the first)."""
        async with self.open_stack() as stack:
            self._stack = stack
            if not self.doc:
                self.doc = await stack.openapi()
            try:
                yield stack
            finally:
                self.scan_state()
                self._stack = None

    async def execute(self, case: Case) -> Outcome:
        try:
            if case.plane == "data":
                return await run_data_case(self.stack, case)
            return await run_control_case(self.stack, case, self.doc)
        except SetupFailed as exc:  # the gateway refused a well-formed setup step: a failure, not a crash
            return Outcome(case, None, [Failure("setup_failed", case.route, str(exc))])

    async def run(self, cases: int, start: int = 0) -> Report:
        """Run cases ``start`` to ``start + cases`` of the seed's sequence; failures are counted by class,
        one example kept per class.

        Cases are drawn per batch from the seed and the batch's position, and a fresh stack starts at
        every multiple of :data:`STACK_CASES`, so runs from aligned starts are shards of one long run:
        together they draw and judge exactly its cases, in the same stacks.
        """
        if start % STACK_CASES:
            raise ValueError(f"start must be a multiple of {STACK_CASES}")
        started = self._started = time.perf_counter()
        self._start = start
        loop = asyncio.get_running_loop()
        position, end = start, start + cases
        while position < end:
            stretch = min(STACK_CASES, end - position)
            async with self.running():
                await asyncio.to_thread(self._explore, position, stretch, end, loop)
            position += stretch
        self.report.seconds = time.perf_counter() - started
        return self.report

    def _explore(self, offset: int, stretch: int, end: int, loop: asyncio.AbstractEventLoop) -> None:
        strategy = strategy_for(self.target, self.doc)
        done = 0
        while done < stretch:
            size = min(BATCH, stretch - done)
            before = self.report.total
            self._batch(strategy, size, self.seed * 1_000_003 + (offset + done) // BATCH, loop)
            done += self.report.total - before
            self._say(offset + done, end)

    def _batch(
        self, strategy: st.SearchStrategy[Case], size: int, batch_seed: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        report = self.report

        @settings(
            max_examples=size,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
        )
        @seed(batch_seed)
        @given(strategy)
        def one(case: Case) -> None:
            outcome = asyncio.run_coroutine_threadsafe(self.execute(case), loop).result()
            report.add(outcome)
            if report.total % STATE_SCAN_EVERY == 0:
                self.scan_state()

        one()

    def _say(self, done: int, cases: int) -> None:
        report = self.report
        rate = (done - self._start) / max(time.perf_counter() - self._started, 1e-9)
        failing = sum(report.failed.values())
        self.progress(
            f"fuzz: {done}/{cases} cases, {failing} failing, {len(report.failures)} failure classes, {rate:.1f} cases/s"
        )

    def scan_state(self) -> None:
        """The state store holds ids, codes and counts only: no sentinel of any case may be in it."""
        found = sorted({m.group(1) for m in MARKER.finditer(self.stack.state_text())})
        if found:
            self.report.record(Failure("sentinel_in_state", "*", ",".join(found)), None)

    async def shrink(self, budget_s: float = SHRINK_SECONDS, total_s: float = SHRINK_TOTAL_SECONDS) -> dict[Key, Case]:
        """For each failure class, the simplest variant of its smallest example that still fails so."""
        async with self.running():
            return await self._shrink(budget_s, total_s)

    async def _shrink(self, budget_s: float, total_s: float) -> dict[Key, Case]:
        reduced = {}
        end = time.perf_counter() + total_s
        for cls, case in sorted(self.report.examples.items()):
            deadline = min(time.perf_counter() + budget_s, end)
            current = case
            improved = True
            while improved and time.perf_counter() < deadline:
                improved = False
                for candidate in simpler(current):
                    if time.perf_counter() >= deadline:
                        break
                    outcome = await self.execute(candidate)
                    if any((f.kind, f.route) == cls for f in outcome.failures):
                        current, improved = candidate, True
                        break
            reduced[cls] = current
        return reduced


# --- reduction ---------------------------------------------------------------------------------


def simpler(case: Case) -> Iterator[Case]:
    """Variants of a case that are one step simpler, most promising first."""
    if case.fault is not None:
        yield replace(case, fault=None)
    if case.epilogue:
        yield replace(case, epilogue=False)
    for setup in _simpler_setup(case.setup):
        yield replace(case, setup=setup)
    for request in _simpler_request(case.request):
        # The Authorization header is what the control case's caller class means; it stays.
        if case.plane == "data" or request.headers.count(("Authorization", Ph("AUTH"))) == case.request.headers.count(
            ("Authorization", Ph("AUTH"))
        ):
            yield replace(case, request=request)


def _simpler_setup(setup: Setup) -> Iterator[Setup]:
    for name, plain in (
        ("preseed", 0),
        ("regrant", False),
        ("new_conversation", True),
        ("confirm", ""),
        ("erasure", False),
    ):
        if getattr(setup, name) != plain:
            change: dict[str, Any] = {name: plain}
            yield replace(setup, **change)


def _simpler_request(request: Request) -> Iterator[Request]:
    for i in range(len(request.headers)):
        yield replace(request, headers=request.headers[:i] + request.headers[i + 1 :])
    if request.chunked:
        yield replace(request, chunked=False)
    if request.encoding != "identity":
        yield replace(request, encoding="identity")
    query = request.target[1:2]
    if query and isinstance(query[0], str) and query[0].startswith("?"):  # only a query; fragments define the case
        yield replace(request, target=request.target[:1])
    body = request.body
    if isinstance(body, Doc):
        if body.prefix or body.suffix:
            yield replace(request, body=Doc(body.value))
        for value in _simpler_node(body.value):
            yield replace(request, body=replace(body, value=value))
    elif isinstance(body, bytes) and body:
        yield replace(request, body=body[: len(body) // 2])


def _simpler_node(node: Node) -> Iterator[Node]:
    if isinstance(node, Obj):
        for i in range(len(node.pairs)):
            yield Obj(node.pairs[:i] + node.pairs[i + 1 :])
        for i, (key, value) in enumerate(node.pairs):
            for simpler_value in _simpler_node(value):
                yield Obj((*node.pairs[:i], (key, simpler_value), *node.pairs[i + 1 :]))
    elif isinstance(node, Arr):
        if len(node.items) > 1:
            yield Arr(node.items[: len(node.items) // 2])
        for i in range(len(node.items)):
            yield Arr(node.items[:i] + node.items[i + 1 :])
        for i, value in enumerate(node.items):
            for simpler_value in _simpler_node(value):
                yield Arr((*node.items[:i], simpler_value, *node.items[i + 1 :]))
    elif isinstance(node, Deep):
        if node.depth > 1:
            yield replace(node, depth=node.depth // 2)
        for leaf in _simpler_node(node.leaf):
            yield replace(node, leaf=leaf)
    elif isinstance(node, Str):
        if node.pad_n:
            yield replace(node, pad_n=node.pad_n // 2)
        if node.escaped:
            yield replace(node, escaped=False)
