"""The hang diagnostics print where a pending task waits (tests/support/hangs.py)."""

from __future__ import annotations

import asyncio
import io
import time

import pytest

from tests.support.hangs import dump_tasks, tasks_dumped_before


async def _waits_for_ever(event: asyncio.Event) -> None:
    await event.wait()


async def test_a_pending_task_is_printed_with_its_coroutine() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(_waits_for_ever(event))
    await asyncio.sleep(0)
    out = io.StringIO()
    dump_tasks("label-x", out)
    event.set()
    await task
    text = out.getvalue()
    assert text.startswith("--- label-x: ") and "_waits_for_ever" in text


def test_the_dump_fires_before_the_timeout_and_not_after_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    with tasks_dumped_before(20.3, "still-running"):
        time.sleep(0.8)  # the dump is due 0.3 s in
    with tasks_dumped_before(20.3, "ended-in-time"):
        pass
    time.sleep(0.8)  # long past that block's due time
    err = capsys.readouterr().err
    assert "--- still-running: " in err and "ended-in-time" not in err
