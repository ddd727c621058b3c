"""When a test is about to hit pytest-timeout, log where every unfinished asyncio task waits.

pytest-timeout prints the threads' stacks only; for an async test they show the event loop idle in
``select``, not the coroutine that waits. A timer thread started with each test's call logs, shortly
before the timeout, one ``test.hang_task`` line per pending task with its frames as code locations
(``path:line:function``: no values, no source text), through the project's logger and its
allow-list like every other line.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sidecar.logs import get_logger

#: Seconds before pytest's own timeout at which the tasks are logged.
LEAD_S = 20.0
_ROOT = Path(__file__).resolve().parents[2]
log = get_logger("tests")


def _pending_tasks() -> list[asyncio.Task[object]]:
    # Every task of every loop (a weak set); read from this thread while the loop may change it.
    for _ in range(5):
        try:
            return [t for t in list(getattr(asyncio.tasks, "_all_tasks", ())) if not t.done()]
        except RuntimeError:  # the set changed while it was copied
            continue
    return []


def _location(path: str) -> str:
    try:
        return Path(path).resolve().relative_to(_ROOT).as_posix()
    except ValueError:
        return Path(path).name  # a library's frame: its file name is enough to find it


def frames(task: asyncio.Task[object]) -> list[str]:
    """The task's frames, outermost first, as ``path:line:function``."""
    return [f"{_location(f.f_code.co_filename)}:{f.f_lineno}:{f.f_code.co_name}" for f in task.get_stack(limit=12)]


def dump_tasks() -> None:
    """Log every pending task's frames (one line per task, numbered)."""
    tasks = _pending_tasks()
    log.error("test.hang", count=len(tasks))
    for index, task in enumerate(tasks):
        log.error("test.hang_task", count=index, frames=frames(task))


@contextmanager
def tasks_dumped_before(timeout_s: float) -> Iterator[None]:
    """Log the pending tasks ``LEAD_S`` before ``timeout_s`` unless the block ended by then."""
    if timeout_s <= LEAD_S:
        yield
        return
    timer = threading.Timer(timeout_s - LEAD_S, dump_tasks)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
