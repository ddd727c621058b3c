"""kagent's ``memory`` table and the queries its Go DB client runs on it (v0.9.11; v0.10 on request).

One interface, two backends: SQLite (default, in memory or a file) and PostgreSQL (``real[]``
stands in for pgvector's ``vector(768)``; the table keeps kagent's name and columns so a
least-privilege role can be granted on it). Cosine scores are computed here in Python. Error
texts carry the Go client's wrapping (``failed to search agent memory: ...``) around a pgx-style
database message, so the handlers can add their own prefix exactly as kagent does.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sidecar.dev.devstack.clock import DevClock

DIM = 768
DEFAULT_DB_ERROR = 'ERROR: relation "memory" does not exist (SQLSTATE 42P01)'
NEGATIVE_LIMIT = "ERROR: LIMIT must not be negative (SQLSTATE 2201W)"
POPULAR_ACCESS_COUNT = 10
EXTENSION = timedelta(days=15)
OPS = frozenset({"insert", "insert_batch", "search", "bump", "list", "delete", "prune"})
#: Operations a fault trips only when it names them (so an all-operations fault keeps its count).
NAMED_ONLY = frozenset({"bump"})


class StoreError(Exception):
    """A failed store call; ``str()`` is what kagent's DB client error prints as."""


class DbError(Exception):
    """A backend failure in pgx's spelling; ``step`` is the failing statement of a multi-step call."""

    def __init__(self, text: str, step: int = 0) -> None:
        super().__init__(text)
        self.step = step


@dataclass(frozen=True)
class NewMemory:
    """A row to insert; ``created_at`` comes from the store's clock (kagent uses the DB's NOW())."""

    agent_name: str
    user_id: str
    content: str
    embedding: Sequence[float]
    metadata: str
    expires_at: datetime | None


@dataclass(frozen=True)
class MemoryRow:
    """Every column of one ``memory`` row."""

    id: str
    agent_name: str | None
    user_id: str | None
    content: str | None
    embedding: tuple[float, ...] | None
    metadata: str | None
    created_at: datetime | None
    expires_at: datetime | None
    access_count: int


@dataclass(frozen=True)
class SearchHit:
    """A search result row and its score (``1 - cosine_distance``, 0 when undefined)."""

    row: MemoryRow
    score: float


@dataclass
class DbFault:
    """Makes matching store calls fail with ``message`` as the database error text.

    ``ops`` limits it to some operations (empty: all of :data:`OPS` but the access-count update
    after a search, ``bump``, which only a fault naming it trips); the first ``after`` matching
    calls still succeed; then ``times`` calls fail (``None``: until the fault is cleared).
    """

    message: str = DEFAULT_DB_ERROR
    ops: frozenset[str] = frozenset()
    after: int = 0
    times: int | None = None

    def trips(self, op: str) -> bool:
        """Count one call of ``op`` and say whether it fails."""
        if (self.ops or op in NAMED_ONLY) and op not in self.ops:
            return False
        if self.after > 0:
            self.after -= 1
            return False
        if self.times is not None:
            if self.times <= 0:
                return False
            self.times -= 1
        return True


def cosine_similarity(a: Sequence[float] | None, b: Sequence[float]) -> float | None:
    """pgvector's cosine similarity (clamped to [-1, 1]); NaN when either vector is all zeros, ``None`` for NULL."""
    if a is None or len(a) != len(b):
        return None
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = sum(x * x for x in a) * sum(y * y for y in b)
    if norms == 0:
        return math.nan
    return max(-1.0, min(1.0, dot / math.sqrt(norms)))


def rank(vector: Sequence[float], rows: Sequence[MemoryRow], limit: int) -> list[SearchHit]:
    """``ORDER BY embedding <=> $vec LIMIT n`` with ``COALESCE(1 - distance, 0)`` scores.

    A zero vector's distance is NaN: COALESCE keeps it, so its score is NaN (and kagent then fails
    to encode the answer); a NULL embedding's distance is NULL, so its score is 0.
    """
    scored = []
    for seq, row in enumerate(rows):
        sim = cosine_similarity(row.embedding, vector)
        # PostgreSQL sorts NaN after every number, and NULL after NaN.
        if sim is None:
            key, score = (2, 0.0), 0.0
        elif math.isnan(sim):
            key, score = (1, 0.0), math.nan
        else:
            key, score = (0, 1.0 - sim), sim
        scored.append((key, seq, row, score))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [SearchHit(row, score) for _k, _s, row, score in scored[:limit]]


def _int32(value: int) -> int:
    # kagent converts the limit with int32(limit), which wraps.
    return (value + 2**31) % 2**32 - 2**31


class MemoryStore(ABC):
    """kagent's memory queries over one backend; every timestamp comes from ``now``."""

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self.now: Callable[[], datetime] = now if now is not None else DevClock()
        self.fault: DbFault | None = None

    def _trip(self, op: str) -> None:
        if self.fault is not None and self.fault.trips(op):
            raise DbError(self.fault.message)

    async def insert(self, item: NewMemory) -> str:
        """InsertMemory; returns the new id."""
        try:
            self._trip("insert")
            return (await self._insert([item], self.now()))[0]
        except DbError as exc:
            raise StoreError(str(exc)) from None

    async def insert_batch(self, items: Sequence[NewMemory]) -> list[str]:
        """InsertMemory for every item inside one transaction (all or nothing)."""
        try:
            self._trip("insert_batch")
            return await self._insert(items, self.now())
        except DbError as exc:
            raise StoreError(f"failed to store memory: {exc}") from None

    async def search(
        self,
        agent_name: str,
        user_id: str,
        vector: Sequence[float],
        limit: int,
        *,
        both_spellings: bool = False,
        best_effort_bump: bool = False,
    ) -> list[SearchHit]:
        """Nearest rows (no expiry filter), then access_count + 1 on each.

        v0.9.11 matches agent_name exactly and fails the search when the access-count update
        fails; v0.10 (``both_spellings``, ``best_effort_bump``) also matches the ``-``→``_``
        spelling and only logs a failed update.
        """
        limit = _int32(limit)
        names = (agent_name, agent_name.replace("-", "_") if both_spellings else agent_name)
        try:
            self._trip("search")
            if limit < 0:
                raise DbError(NEGATIVE_LIMIT)
            hits = rank(vector, await self._of_agent(*names, user_id, busiest=False), limit)
        except DbError as exc:
            raise StoreError(f"failed to search agent memory: {exc}") from None
        if hits:
            try:
                self._trip("bump")
                await self._bump([hit.row.id for hit in hits])
            except DbError as exc:
                if not best_effort_bump:
                    raise StoreError(f"failed to increment access count: {exc}") from None
        return hits

    async def list_memories(self, agent_name: str, user_id: str) -> list[MemoryRow]:
        """Rows of either agent_name spelling (``-`` or ``_``), expired ones included, busiest first."""
        try:
            self._trip("list")
            return await self._of_agent(agent_name, agent_name.replace("-", "_"), user_id, busiest=True)
        except DbError as exc:
            raise StoreError(f"failed to list agent memories: {exc}") from None

    async def delete(self, agent_name: str, user_id: str) -> None:
        """Hard delete for the agent_name as sent, then for its ``_`` spelling."""
        try:
            self._trip("delete")
            await self._delete(agent_name, user_id)
        except DbError as exc:
            raise StoreError(f"failed to delete agent memory: {exc}") from None
        normalized = agent_name.replace("-", "_")
        if normalized != agent_name:
            try:
                await self._delete(normalized, user_id)
            except DbError as exc:
                raise StoreError(f"failed to delete normalized agent memory: {exc}") from None

    async def prune(self) -> None:
        """PruneExpiredMemories: extend popular expired rows by 15 days, then delete the other expired."""
        try:
            self._trip("prune")
            await self._prune(self.now())
        except DbError as exc:
            label = "failed to delete expired memories" if exc.step else "failed to extend TTL for popular memories"
            raise StoreError(f"{label}: {exc}") from None

    async def rows(self, agent_name: str | None = None, user_id: str | None = None) -> list[MemoryRow]:
        """Test helper: every column of the matching rows, oldest first (no fault, no access bump)."""
        return await self._rows(agent_name, user_id)

    async def count(self, agent_name: str | None = None, user_id: str | None = None) -> int:
        """Test helper: how many rows match."""
        return len(await self._rows(agent_name, user_id))

    @abstractmethod
    async def open(self) -> None:
        """Connect and create the table and indexes if missing."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""

    @abstractmethod
    async def _insert(self, items: Sequence[NewMemory], created_at: datetime) -> list[str]: ...

    @abstractmethod
    async def _of_agent(self, agent_name: str, normalized: str, user_id: str, *, busiest: bool) -> list[MemoryRow]:
        """Rows of either spelling: oldest first for a search's candidates, or ``busiest`` first for a listing."""

    @abstractmethod
    async def _bump(self, ids: Sequence[str]) -> None: ...

    @abstractmethod
    async def _delete(self, agent_name: str, user_id: str) -> None: ...

    @abstractmethod
    async def _prune(self, now: datetime) -> None: ...

    @abstractmethod
    async def _rows(self, agent_name: str | None, user_id: str | None) -> list[MemoryRow]: ...
