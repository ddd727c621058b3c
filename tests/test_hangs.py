"""The hang diagnostics log where a pending task waits (tests/support/hangs.py), through the allow-list."""

from __future__ import annotations

import asyncio
import json
import time

from sidecar.logs import AllowListSanitizer
from tests.support.hangs import dump_tasks, tasks_dumped_before
from tests.support.sentinel import capture_sinks


async def _waits_for_ever(event: asyncio.Event) -> None:
    await event.wait()


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_a_pending_task_is_logged_with_its_frames() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(_waits_for_ever(event))
    await asyncio.sleep(0)
    with capture_sinks() as sinks:
        dump_tasks()
    event.set()
    await task
    lines = _lines(sinks.log_stream.getvalue())
    frames = [f for line in lines if line["event"] == "test.hang_task" for f in line["frames"]]  # type: ignore[attr-defined]  # a JSON list
    assert any(f.startswith("tests/test_hangs.py:") and f.endswith(":_waits_for_ever") for f in frames)


def test_the_dump_fires_before_the_timeout_and_not_after_the_block() -> None:
    with capture_sinks() as sinks:
        with tasks_dumped_before(20.3):
            time.sleep(0.8)  # the dump is due 0.3 s in
        fired = sinks.log_stream.getvalue().count('"test.hang"')
        with tasks_dumped_before(20.3):
            pass
        time.sleep(0.8)  # long past that block's due time
        after = sinks.log_stream.getvalue().count('"test.hang"')
    assert (fired, after) == (1, 1)


def test_frames_that_are_not_code_locations_are_dropped() -> None:
    sanitize = AllowListSanitizer()
    kept = sanitize(None, "error", {"event": "test.hang_task", "frames": ["tests/x.py:3:f"]})
    dropped = sanitize(None, "error", {"event": "test.hang_task", "frames": ["my PIN is 1234"]})
    assert kept["frames"] == ["tests/x.py:3:f"] and "frames" not in dropped
