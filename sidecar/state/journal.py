"""The audit spool on disk: what waits for the state store outlives a killed process.

Each process appends the records it spools to its own segment file in ``audit.spool_dir``
(``<segment id>.spool``, mode 0600, one JSON array per line: ``["r", <audit row values>]`` or
``["c", hour_us, operation, reason, n]``). Every record is in the file before the answer it belongs
to is sent: an audit row is appended as it is spooled, and a refusal count has one line per key in
a segment whose ``n`` is rewritten in place (a fixed-width number padded with JSON whitespace) as
each refusal of that key is counted, so a killed process loses none and the lines stay bounded by
the keys (at most ``max_count_lines`` until they are replayed). The page cache holds them across a
process kill; an fsync follows within ``BATCH_S`` for a host that loses power.
The lines hold exactly what the audit tables hold (codes, opaque ids, times), never memory content.

A process holds an exclusive ``flock`` on every segment it owns. A segment nobody holds was left by
a process that died: any process replays it (on start, and whenever the store answers again). A
segment is replayed in one transaction that also records its id in ``audit_spool_segments``; an id
already there means the segment landed before (its process died between the commit and the file's
removal) and it is only removed: every record lands exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from sidecar.logs import get_logger
from sidecar.state import codec
from sidecar.state.db import Param

_log = get_logger("state")
SUFFIX: Final = ".spool"
#: How long spooled lines may wait for their fsync (they are in the file already).
BATCH_S: Final = 0.2
#: Width of a count line's number: any count of one key fits, so it is rewritten in place.
_COUNT_WIDTH: Final = 20
#: Marks a segment as replayed; the insert changes no row when it was replayed before.
MARK_SEGMENT: Final = (
    "INSERT INTO audit_spool_segments (segment_id, replayed_us) VALUES ($1, $2) ON CONFLICT (segment_id) DO NOTHING"
)


class _Segment:
    """One open segment file of this process, locked while it is open."""

    __slots__ = ("counts", "fd", "path", "segment_id", "size", "slots", "updates")

    def __init__(self, folder: Path) -> None:
        self.segment_id = "j" + secrets.token_hex(12)
        # Locked before it carries its final name, so no other process ever takes it for an orphan.
        tmp = folder / f"{self.segment_id}.tmp"
        self.fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Without O_APPEND (where pwrite would append): the count numbers are rewritten through it.
        self.updates = os.open(tmp, os.O_WRONLY | os.O_CLOEXEC)
        self.path = folder / f"{self.segment_id}{SUFFIX}"
        os.rename(tmp, self.path)
        self.size = 0  # this process is the file's one writer: the offset of the next line
        #: Each count key's total in this segment, and where its number is in the file.
        self.counts: dict[tuple[int, str, str], int] = {}
        self.slots: dict[tuple[int, str, str], int] = {}

    def append(self, data: bytes) -> int:
        """Append ``data``; the offset it starts at."""
        at = self.size
        os.write(self.fd, data)
        self.size += len(data)
        return at

    def count(self, key: tuple[int, str, str], n: int) -> None:
        """Add ``n`` to the key's count line (a new line for a key this segment has not counted yet)."""
        total = self.counts.get(key, 0) + n
        number = f"{total:<{_COUNT_WIDTH}d}".encode()
        if key in self.slots:
            os.pwrite(self.updates, number, self.slots[key])
        else:
            head = _line(["c", *key, 0])[: -len(b"0]\n")]
            self.slots[key] = self.append(head + number + b"]\n") + len(head)
        self.counts[key] = total

    @property
    def count_lines(self) -> int:
        return len(self.slots)

    def close(self, remove: bool) -> None:
        if remove:
            # A file left behind is found as an orphan later, and only removed: its id is marked replayed.
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self.updates)
        os.close(self.fd)  # releases the lock


class Journal:
    """This process's segments in one folder, and the orphans other processes left there."""

    __slots__ = ("_current", "_dirty", "_folder", "_sealed", "_timer", "max_count_lines")

    def __init__(self, folder: Path, max_count_lines: int = 10_000) -> None:
        self.max_count_lines = max_count_lines
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._folder = folder
        self._current: _Segment | None = None
        self._sealed: list[_Segment] = []
        self._dirty = False
        self._timer: asyncio.TimerHandle | None = None

    def _segment(self) -> _Segment:
        if self._current is None:
            self._current = _Segment(self._folder)
        return self._current

    def append_row(self, values: tuple[Param, ...]) -> None:
        """Write one audit row now (its fsync follows within a batch). Raises OSError when it cannot."""
        self._segment().append(_line(["r", *values]))
        self._schedule()

    def add_count(self, key: tuple[int, str, str], n: int) -> bool:
        """Count refusals in the file now (its fsync follows within a batch); False when the count lines not
        yet replayed reached ``max_count_lines`` (the spool counts the refusals as dropped). Raises OSError
        when it cannot write."""
        segment = self._segment()
        if key not in segment.slots:
            written = sum(s.count_lines for s in self._sealed) + segment.count_lines
            if written >= self.max_count_lines:
                return False
        segment.count(key, n)
        self._schedule()
        return True

    def _schedule(self) -> None:
        self._dirty = True
        if self._timer is None:
            with contextlib.suppress(RuntimeError):  # no running loop (a CLI): the next sync() writes it
                self._timer = asyncio.get_running_loop().call_later(BATCH_S, self._batch)

    def _batch(self) -> None:
        self._timer = None
        try:
            self.sync()
        except OSError as exc:
            _log.error("audit.spool_write_failed", error_type=type(exc).__name__)

    def sync(self) -> None:
        """fsync the current segment (everything is written already)."""
        if not self._dirty:
            return
        if self._current is not None:
            os.fsync(self._current.fd)
        self._dirty = False

    def seal(self) -> list[str]:
        """End the current segment (later records go to a new one); the ids of every segment not yet replayed."""
        self.sync()
        if self._current is not None:
            self._sealed.append(self._current)
            self._current = None
        return [s.segment_id for s in self._sealed]

    def replayed(self, segment_ids: list[str]) -> None:
        """The store holds these sealed segments now: remove their files."""
        done = set(segment_ids)
        for s in [s for s in self._sealed if s.segment_id in done]:
            s.close(remove=True)
            self._sealed.remove(s)

    def close(self) -> None:
        """Write what is pending, then let go of every segment: left on disk, they are orphans to replay."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            self.sync()
        finally:
            for s in [*self._sealed, *([self._current] if self._current else [])]:
                s.close(remove=False)
            self._sealed, self._current = [], None

    @contextlib.contextmanager
    def orphan(self, path: Path) -> Iterator[int | None]:
        """Hold an orphaned segment while it is replayed: its fd, or None when a live process holds it."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            yield None
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            yield fd
        finally:
            os.close(fd)

    def orphans(self) -> list[Path]:
        """Segment files in the folder that are not this process's own."""
        own = {s.path for s in self._sealed} | ({self._current.path} if self._current else set())
        return sorted(p for p in self._folder.glob(f"*{SUFFIX}") if p not in own)


def _line(value: Sequence[object]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def read_segment(fd: int) -> tuple[list[tuple[Param, ...]], dict[tuple[int, str, str], int], int]:
    """Parse a segment: its audit rows, its counts per key, and how many lines could not be read."""
    with os.fdopen(os.dup(fd), "rb") as f:
        lines = f.read().splitlines()
    rows: list[tuple[Param, ...]] = []
    counts: dict[tuple[int, str, str], int] = {}
    bad = 0
    for raw in lines:
        try:
            item = json.loads(raw)
            if item[0] == "r" and len(item) == 10 and _row_shape(item[1:]):
                rows.append(tuple(item[1:]))
            elif item[0] == "c" and len(item) == 5 and _count_shape(item):
                key = (int(item[1]), str(item[2]), str(item[3]))
                counts[key] = counts.get(key, 0) + int(item[4])
            else:
                bad += 1
        except (ValueError, TypeError, IndexError, KeyError):
            bad += 1  # a line cut short by a crash while it was written
    return rows, counts, bad


def _row_shape(values: list[Any]) -> bool:
    """An audit row as the codec let it through (``AuditOps.audit``): a time, a kind, a reason, then
    opaque ids and an operation or nulls. Anything else would fail the insert and hold the segment."""
    at, kind, reason, *ids, operation, revision = values
    try:
        codec.check_code(kind, "kind")
        codec.check_reason(reason)
        for v in (*ids, revision):
            if v is not None:
                codec.check_id(v, "id")
        if operation is not None:
            codec.check_code(operation, "operation")
    except ValueError:  # codec.InvalidValue
        return False
    return type(at) is int


def _count_shape(item: list[Any]) -> bool:
    _, hour, operation, reason, n = item
    try:
        codec.check_code(operation, "operation")
        codec.check_reason(reason)
    except ValueError:  # codec.InvalidValue
        return False
    return type(hour) is int and type(n) is int and n > 0
