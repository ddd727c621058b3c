"""The audit spool on disk (``audit.spool_dir``): what a process leaves is replayed by the next, exactly once.

Both backends. The process-level proof (a gateway SIGKILLed during a PostgreSQL outage, restarted
after it) is in tests/enforce/test_outage.py.
"""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

from prometheus_client import REGISTRY

from sidecar.state import StateStore, open_store
from sidecar.state.journal import SUFFIX, read_segment
from tests.support.sentinel import capture_sinks
from tests.support.state import NOW

HOUR_US = int(NOW.replace(minute=0).timestamp()) * 1_000_000


def _row(n: int) -> tuple[object, ...]:
    at = int(NOW.timestamp()) * 1_000_000
    return (at, "decision", "state_unavailable", f"d_{n:016x}", None, None, None, "memory.save", None)


def _dropped(kind: str = "audit") -> float:
    return REGISTRY.get_sample_value("memgov_audit_spool_dropped_total", {"kind": kind}) or 0.0


async def _landed(store: StateStore) -> tuple[list[str], int]:
    rows = await store.audit_log.audit_rows()
    counts = await store.audit_log.refusal_counts()
    return sorted(r["decision_id"] for r in rows), sum(n for _, op, _, n in counts if op == "memory.search")


def _left(kind: str) -> float:
    return REGISTRY.get_sample_value("memgov_audit_spool_left_total", {"kind": kind}) or 0.0


def _segments(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{SUFFIX}"))


class TestJournal:
    async def test_a_stopped_process_leaves_its_records_and_the_next_replays_them_once(
        self, state_url: str, tmp_path: Path
    ) -> None:
        """Records spooled by a process that stops with the store away stay on disk (0600, in a 0700
        folder), counted as left (not dropped) and logged by kind; the next process writes them once, and a
        segment put back after its replay committed (a crash before the file's removal) adds nothing."""
        folder = tmp_path / "spool"
        first = await open_store(state_url, spool_dir=folder)
        for n in range(3):
            first.spool.add_row(_row(n))
        for _ in range(4):
            first.spool.add_count((HOUR_US, "memory.search", "state_unavailable"))
        dropped, left = _dropped(), {k: _left(k) for k in ("audit", "refusal_count")}
        with capture_sinks() as sinks:
            assert first.spool.lose() == 0  # what the process could not write stays on disk
        assert _dropped() == dropped
        assert {k: _left(k) - v for k, v in left.items()} == {"audit": 3, "refusal_count": 4}
        logged = [json.loads(line) for line in sinks.log_stream.getvalue().splitlines()]
        assert [(x["event"], x["kind"], x["count"]) for x in logged if x["event"] == "audit.spool_left"] == [
            ("audit.spool_left", "audit", 3),
            ("audit.spool_left", "refusal_count", 4),
        ]
        await first.close()
        (segment,) = _segments(folder)
        assert stat.S_IMODE(segment.stat().st_mode) == 0o600
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        kept = tmp_path / "kept"
        shutil.copy(segment, kept)

        second = await open_store(state_url, spool_dir=folder)
        try:
            assert await second.spool.replay_orphans(second.db) == 7
            assert _segments(folder) == []
            shutil.copy(kept, segment)  # as if the process had died between the commit and the removal
            assert await second.spool.replay_orphans(second.db) == 0
            assert _segments(folder) == []
            assert await _landed(second) == ([f"d_{n:016x}" for n in range(3)], 4)
        finally:
            await second.close()

    async def test_a_live_process_segment_is_not_taken_and_its_own_replay_lands_once(
        self, state_url: str, tmp_path: Path
    ) -> None:
        """Two processes on one folder: one never replays the other's live segment; each writes its
        own records when its store answers, and the folder is empty afterwards."""
        folder = tmp_path / "spool"
        a = await open_store(state_url, spool_dir=folder)
        b = await open_store(state_url, spool_dir=folder)
        try:
            a.spool.add_row(_row(10))
            assert await b.spool.replay_orphans(b.db) == 0
            assert len(_segments(folder)) == 1
            b.spool.add_row(_row(11))
            assert await a.spool.flush(a.db) == 1
            assert await b.spool.flush(b.db) == 1
            assert _segments(folder) == []
            assert (await _landed(a))[0] == [f"d_{10:016x}", f"d_{11:016x}"]
        finally:
            await a.close()
            await b.close()

    async def test_a_full_spool_counts_what_it_refuses(self, state_url: str, tmp_path: Path) -> None:
        """Beyond ``audit.spool_records`` a record is counted as dropped, not written to the journal."""
        folder = tmp_path / "spool"
        store = await open_store(state_url, spool_rows=2, spool_dir=folder)
        try:
            dropped = _dropped()
            for n in range(3):
                store.spool.add_row(_row(20 + n))
            assert _dropped() == dropped + 1
            store.spool.lose()
            (segment,) = _segments(folder)
            assert len(segment.read_bytes().splitlines()) == 2
        finally:
            await store.close()

    async def test_lines_that_cannot_be_read_back_are_counted_and_the_rest_lands(
        self, state_url: str, tmp_path: Path
    ) -> None:
        """A line cut short by a crash, or one the codec would never have let through, is counted as
        dropped; it holds up neither its segment nor the store's health."""
        folder = tmp_path / "spool"
        first = await open_store(state_url, spool_dir=folder)
        first.spool.add_row(_row(30))
        first.spool.lose()
        await first.close()
        (segment,) = _segments(folder)
        bad_reason = json.dumps(["r", 1, "decision", "not_a_reason", None, None, None, None, None, None])
        with segment.open("a") as f:
            f.write(bad_reason + "\n" + '["r",17966,"deci')
        second = await open_store(state_url, spool_dir=folder)
        try:
            dropped = _dropped()
            assert await second.spool.replay_orphans(second.db) == 1
            assert _dropped() == dropped + 2
            assert (await _landed(second))[0] == [f"d_{30:016x}"]
        finally:
            await second.close()

    async def test_count_lines_on_disk_are_bounded_and_what_exceeds_them_is_counted(
        self, state_url: str, tmp_path: Path
    ) -> None:
        """Each refusal is in the file as it is counted (its key's line rewritten in place, no batch to wait
        for); once ``audit.spool_records`` keys wait on disk, refusals of a new key are counted as dropped
        (a flood cannot grow the folder without bound)."""
        folder = tmp_path / "spool"
        store = await open_store(state_url, spool_rows=3, spool_dir=folder)
        keys = [(HOUR_US, "memory.search", reason) for reason in ("state_unavailable", "key_invalid", "not_found")]

        def on_disk() -> dict[tuple[int, str, str], int]:
            counts: dict[tuple[int, str, str], int] = {}
            for segment in _segments(folder):
                with segment.open("rb") as f:
                    counts.update(read_segment(f.fileno())[1])
            return counts

        try:
            for n in range(1, 6):
                store.spool.add_count(keys[0])
                assert on_disk() == {keys[0]: n}  # at once: nothing waits for a batch
            for key in keys[1:]:
                store.spool.add_count(key)
            assert sum(len(f.read_bytes().splitlines()) for f in _segments(folder)) == 3
            dropped = _dropped("refusal_count")
            store.spool.add_count((HOUR_US, "memory.save", "state_unavailable"))
            assert _dropped("refusal_count") == dropped + 1
            store.spool.add_count(keys[1])  # a key already on disk still counts
            assert on_disk() == {keys[0]: 5, keys[1]: 2, keys[2]: 1}
            assert len(store.spool) == 8
            assert await store.spool.flush(store.db) == 8
            assert _segments(folder) == []
            store.spool.add_count((HOUR_US, "memory.save", "state_unavailable"))  # replayed: room again
            assert len(store.spool) == 1
        finally:
            await store.close()
