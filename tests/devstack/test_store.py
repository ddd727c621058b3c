"""The memory table keeps kagent's shape, and its scoring and fault rules hold on both backends."""

from __future__ import annotations

import math
import secrets
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from sidecar.dev.devstack import DbFault, DevClock, open_memory_store
from sidecar.dev.devstack.store import MemoryRow, NewMemory, StoreError, cosine_similarity, rank
from tests.support.devstack import START, axis

COLUMNS = [
    "id",
    "agent_name",
    "user_id",
    "content",
    "embedding",
    "metadata",
    "created_at",
    "expires_at",
    "access_count",
]


def _row(i: int, embedding: tuple[float, ...] | None) -> MemoryRow:
    return MemoryRow(f"r{i}", "a", "u", "c", embedding, "{}", START, None, 0)


class TestCosine:
    @pytest.mark.parametrize(
        ("a", "b", "expected"),
        [
            ((1.0, 0.0), (1.0, 0.0), 1.0),
            ((1.0, 0.0), (0.0, 1.0), 0.0),
            ((1.0, 0.0), (-2.0, 0.0), -1.0),
            (None, (1.0, 0.0), None),
        ],
    )
    def test_similarity_is_pgvector_cosine_or_none_for_null(
        self, a: tuple[float, ...] | None, b: tuple[float, ...], expected: float | None
    ) -> None:
        """Cosine similarity matches pgvector; a NULL embedding gives None (score 0 later)."""
        assert cosine_similarity(a, b) == expected

    @pytest.mark.parametrize(("a", "b"), [((0.0, 0.0), (1.0, 0.0)), ((1.0, 0.0), (0.0, 0.0))])
    def test_similarity_with_a_zero_vector_is_nan(self, a: tuple[float, ...], b: tuple[float, ...]) -> None:
        """pgvector's cosine distance to an all-zero vector is NaN, on either side."""
        similarity = cosine_similarity(a, b)
        assert similarity is not None and math.isnan(similarity)

    def test_rank_orders_nearest_first_then_nan_then_null(self) -> None:
        """Zero embeddings sort after every real distance with a NaN score; NULL embeddings last with 0."""
        rows = [_row(0, None), _row(1, (0.0, 1.0)), _row(2, (1.0, 0.0)), _row(3, (0.0, 0.0))]
        hits = rank((1.0, 0.0), rows, 10)
        assert [h.row.id for h in hits] == ["r2", "r1", "r3", "r0"]
        assert [h.score for h in hits][:2] == [1.0, 0.0] and math.isnan(hits[2].score) and hits[3].score == 0.0


class TestDbFault:
    @pytest.mark.parametrize(
        ("fault", "calls", "fails"),
        [
            (DbFault(), ["insert", "search", "prune"], [True, True, True]),
            (DbFault(ops=frozenset({"search"})), ["insert", "search"], [False, True]),
            (DbFault(after=2), ["list", "list", "list"], [False, False, True]),
            (DbFault(times=1), ["list", "list"], [True, False]),
            (DbFault(after=1, times=1), ["list", "list", "list"], [False, True, False]),
        ],
    )
    def test_fault_counts_calls(self, fault: DbFault, calls: list[str], fails: list[bool]) -> None:
        """ops, after and times pick exactly which calls fail."""
        assert [fault.trips(op) for op in calls] == fails


class TestOpenStore:
    @pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", None])
    async def test_in_memory_urls_open_an_empty_table(self, url: str | None) -> None:
        """sqlite://, sqlite:///:memory: and no URL all give an empty in-memory table."""
        store = await open_memory_store(url)
        try:
            assert await store.count() == 0
        finally:
            await store.close()

    async def test_a_sqlite_file_keeps_rows_across_reopening(self, tmp_path: Path) -> None:
        """sqlite:////abs/path stores rows in that file."""
        url = f"sqlite:///{tmp_path}/m.db"
        store = await open_memory_store(url)
        await store.insert(NewMemory("a", "u", "kept", axis(0), "{}", None))
        await store.close()
        store = await open_memory_store(url)
        try:
            assert [r.content for r in await store.rows()] == ["kept"]
        finally:
            await store.close()
        assert (tmp_path / "m.db").exists()

    async def test_other_schemes_are_refused(self) -> None:
        """Only sqlite: and postgresql:// URLs are accepted."""
        with pytest.raises(ValueError, match="store URL"):
            await open_memory_store("mysql://x")

    async def test_sqlite_table_has_kagents_columns_and_indexes(self, tmp_path: Path) -> None:
        """The SQLite table is named memory with kagent's columns and its two indexes."""
        store = await open_memory_store(f"sqlite:///{tmp_path}/m.db")
        await store.close()
        with sqlite3.connect(tmp_path / "m.db") as db:
            assert [r[1] for r in db.execute("PRAGMA table_info(memory)")] == COLUMNS
            names = {r[1] for r in db.execute("PRAGMA index_list(memory)")}
        assert {"idx_memory_agent_user", "idx_memory_expires_at"} <= names


class TestPostgresTable:
    async def test_columns_and_types_match_kagent(self, pg_url: str) -> None:
        """PostgreSQL gets table memory with kagent's columns; embedding is real[] and id defaults to a uuid."""
        store = await open_memory_store(pg_url)
        try:
            new_id = await store.insert(NewMemory("a", "u", "x", axis(0), "{}", None))
            conn = await asyncpg.connect(pg_url)
            try:
                cols = await conn.fetch(
                    "SELECT column_name, data_type FROM information_schema.columns "
                    "WHERE table_name = 'memory' ORDER BY ordinal_position"
                )
                indexes = {
                    r["indexname"]
                    for r in await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'memory'")
                }
            finally:
                await conn.close()
        finally:
            await store.close()
        assert [(c["column_name"], c["data_type"]) for c in cols] == [
            ("id", "text"),
            ("agent_name", "text"),
            ("user_id", "text"),
            ("content", "text"),
            ("embedding", "ARRAY"),
            ("metadata", "text"),
            ("created_at", "timestamp with time zone"),
            ("expires_at", "timestamp with time zone"),
            ("access_count", "bigint"),
        ]
        assert {"idx_memory_agent_user", "idx_memory_expires_at"} <= indexes
        assert len(new_id) == 36

    async def test_a_column_granted_role_can_delete_by_id_but_not_read_content(self, pg_url: str) -> None:
        """The erasure role's grants work on the plain table: ids readable and deletable, content refused."""
        role = f"eraser_{secrets.token_hex(4)}"
        store = await open_memory_store(pg_url)
        admin = await asyncpg.connect(pg_url)
        try:
            keep = await store.insert(NewMemory("a", "u", "secret", axis(0), "{}", None))
            gone = await store.insert(NewMemory("a", "u", "secret 2", axis(1), "{}", None))
            await admin.execute(f"CREATE ROLE {role} LOGIN")
            await admin.execute(
                f"GRANT SELECT (id, agent_name, user_id, created_at, expires_at), DELETE ON memory TO {role}"
            )
            limited = await asyncpg.connect(pg_url.replace("postgres@", f"{role}@"))
            try:
                assert {r["id"] for r in await limited.fetch("SELECT id FROM memory")} == {keep, gone}
                await limited.execute("DELETE FROM memory WHERE id = $1", gone)
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await limited.fetch("SELECT content FROM memory")
            finally:
                await limited.close()
            assert [r.id for r in await store.rows()] == [keep]
        finally:
            await admin.close()
            await store.close()


class TestClockAndPrune:
    async def test_prune_uses_the_injected_clock(self, store_url: str) -> None:
        """Moving the injected clock past an expiry is what makes prune delete the row."""
        clock = DevClock(datetime(2030, 1, 1, tzinfo=UTC), frozen=True)
        store = await open_memory_store(store_url, now=clock)
        try:
            await store.insert(NewMemory("a", "u", "x", axis(0), "{}", clock() + timedelta(hours=1)))
            await store.prune()
            assert await store.count() == 1
            clock.advance(7200)
            await store.prune()
            assert await store.count() == 0
        finally:
            await store.close()

    async def test_a_prune_fault_names_the_first_step(self, store_url: str) -> None:
        """A failing prune reports the TTL-extension step, as kagent's client does."""
        store = await open_memory_store(store_url)
        store.fault = DbFault("boom")
        try:
            with pytest.raises(StoreError, match=r"^failed to extend TTL for popular memories: boom$"):
                await store.prune()
        finally:
            await store.close()
