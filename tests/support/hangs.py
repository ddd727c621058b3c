"""When a test is about to hit pytest-timeout, print the stack of every unfinished asyncio task.

pytest-timeout prints the threads' stacks only; for an async test they show the event loop idle in
``select``, not the coroutine that waits. A timer thread started with each test's call prints each
pending task's stack (its coroutine chain down to the ``await`` that never returns) shortly
before the timeout, so the failure report says where the test hung. Diagnostics only: it reads
asyncio's registry of tasks without touching them.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

#: Seconds before pytest's own timeout at which the tasks are printed.
LEAD_S = 20.0


def _pending_tasks() -> list[asyncio.Task[object]]:
    # Every task of every loop (a weak set); read from this thread while the loop may change it.
    for _ in range(5):
        try:
            return [t for t in list(getattr(asyncio.tasks, "_all_tasks", ())) if not t.done()]
        except RuntimeError:  # the set changed while it was copied
            continue
    return []


def dump_tasks(label: str, out: TextIO | None = None) -> None:
    """Print the stack of every pending task, headed by ``label``."""
    stream = out or sys.stderr
    tasks = _pending_tasks()
    print(f"--- {label}: {len(tasks)} pending asyncio task(s) ---", file=stream)
    for task in tasks:
        try:
            task.print_stack(limit=12, file=stream)
        except Exception as exc:  # noqa: BLE001 - a task may finish while it is printed
            print(f"{task.get_name()}: stack unavailable ({type(exc).__name__})", file=stream)
    stream.flush()


@contextmanager
def tasks_dumped_before(timeout_s: float, label: str) -> Iterator[None]:
    """Dump the pending tasks ``LEAD_S`` before ``timeout_s`` unless the block ended by then."""
    if timeout_s <= LEAD_S:
        yield
        return
    timer = threading.Timer(timeout_s - LEAD_S, dump_tasks, args=(label,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
