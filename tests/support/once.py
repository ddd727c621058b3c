"""A build that runs once per test run, however many parallel workers (pytest-xdist) ask for it.

Each worker is its own process, so a module-scoped fixture would build once per worker that runs
one of its tests. ``once`` builds into a folder every worker of the run shares, under a file lock:
the first caller builds, the others wait for it and reuse what it left.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``build`` filled (it is called with an empty folder only if no worker built it yet)."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # every worker's own base folder lives in this one
    folder, done = base / f"once-{name}", base / f"once-{name}.done"
    with open(base / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed before starts afresh
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
