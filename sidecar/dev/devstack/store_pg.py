"""PostgreSQL backend of the kagent memory stand-in (asyncpg pool).

The table is kagent's ``memory`` with the same column names; only ``embedding`` is ``real[]``
instead of pgvector's ``vector(768)``, so no extension is needed. It stays a plain table (no
views) because the erasure adapter's role gets column grants on it. Opened on a database where
kagent itself created the table (pgvector installed), the same store reads and writes kagent's
real rows: ``vector`` values are exchanged in pgvector's text form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from sidecar.dev.devstack.store import EXTENSION, POPULAR_ACCESS_COUNT, DbError, MemoryRow, MemoryStore, NewMemory
from sidecar.dev.devstack.table import COLUMNS, Handle, schema

_INSERT = (
    "INSERT INTO memory (agent_name, user_id, content, embedding, metadata, created_at, expires_at, "
    "access_count) VALUES ($1, $2, $3, $4, $5, $6, $7, 0) RETURNING id"
)


def _pgx_text(exc: Exception) -> str:
    """Spell a server error the way pgx's PgError.Error() does."""
    if isinstance(exc, asyncpg.PostgresError):
        severity = getattr(exc, "severity", None) or "ERROR"
        return f"{severity}: {exc.args[0] if exc.args else exc} (SQLSTATE {exc.sqlstate})"
    return str(exc)


def _vector_text(values: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def _vector_values(text: str) -> list[float]:
    return [float(v) for v in text.strip("[]").split(",") if v]


async def _vector_codec(conn: asyncpg.Connection) -> None:
    """Where pgvector is installed (kagent's own table), exchange ``vector`` as a list of floats."""
    if await conn.fetchval("SELECT to_regtype('vector') IS NOT NULL"):
        await conn.set_type_codec(
            "vector", schema="public", encoder=_vector_text, decoder=_vector_values, format="text"
        )


def _row(r: asyncpg.Record) -> MemoryRow:
    embedding = None if r["embedding"] is None else tuple(r["embedding"])
    return MemoryRow(
        r["id"],
        r["agent_name"],
        r["user_id"],
        r["content"],
        embedding,
        r["metadata"],
        r["created_at"],
        r["expires_at"],
        int(r["access_count"] or 0),
    )


class PgMemoryStore(MemoryStore):
    """The memory table in PostgreSQL."""

    def __init__(self, url: str, *, now: Callable[[], datetime] | None = None, pool_size: int = 10) -> None:
        super().__init__(now)
        self._url = url
        self._pool_size = pool_size
        self._pool: Handle[asyncpg.Pool] = Handle("closed pool")

    async def open(self) -> None:
        pool = self._pool.hold(
            await asyncpg.create_pool(self._url, min_size=1, max_size=self._pool_size, init=_vector_codec)
        )
        async with pool.acquire() as conn:
            await conn.execute(schema(id_default=" DEFAULT gen_random_uuid()::text", embedding_type="REAL[]"))

    async def close(self) -> None:
        await self._pool.close()

    async def _fetch(self, sql: str, *args: Any) -> list[MemoryRow]:
        try:
            return [_row(r) for r in await self._pool.get().fetch(sql, *args)]
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise DbError(_pgx_text(exc)) from None

    async def _execute(self, sql: str, *args: Any) -> None:
        try:
            await self._pool.get().execute(sql, *args)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise DbError(_pgx_text(exc)) from None

    async def _insert(self, items: Sequence[NewMemory], created_at: datetime) -> list[str]:
        ids: list[str] = []
        try:
            async with self._pool.get().acquire() as conn, conn.transaction():
                for m in items:
                    ids.append(
                        await conn.fetchval(
                            _INSERT,
                            m.agent_name,
                            m.user_id,
                            m.content,
                            list(m.embedding),
                            m.metadata,
                            created_at,
                            m.expires_at,
                        )
                    )
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise DbError(_pgx_text(exc)) from None
        return ids

    async def _of_agent(self, agent_name: str, normalized: str, user_id: str, *, busiest: bool) -> list[MemoryRow]:
        order = "access_count DESC, created_at, id" if busiest else "created_at, id"
        where = "(agent_name = $1 OR agent_name = $2) AND user_id = $3"
        return await self._fetch(
            f"SELECT {COLUMNS} FROM memory WHERE {where} ORDER BY {order}", agent_name, normalized, user_id
        )

    async def _bump(self, ids: Sequence[str]) -> None:
        await self._execute("UPDATE memory SET access_count = access_count + 1 WHERE id = ANY($1::text[])", list(ids))

    async def _delete(self, agent_name: str, user_id: str) -> None:
        await self._execute("DELETE FROM memory WHERE agent_name = $1 AND user_id = $2", agent_name, user_id)

    async def _prune(self, now: datetime) -> None:
        step = 0
        try:
            async with self._pool.get().acquire() as conn, conn.transaction():
                await conn.execute(
                    "UPDATE memory SET expires_at = $1, access_count = 0 WHERE expires_at < $2 AND access_count >= $3",
                    now + EXTENSION,
                    now,
                    POPULAR_ACCESS_COUNT,
                )
                step = 1
                await conn.execute(
                    "DELETE FROM memory WHERE expires_at < $1 AND access_count < $2", now, POPULAR_ACCESS_COUNT
                )
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise DbError(_pgx_text(exc), step) from None

    async def _rows(self, agent_name: str | None, user_id: str | None) -> list[MemoryRow]:
        sql = (
            f"SELECT {COLUMNS} FROM memory WHERE ($1::text IS NULL OR agent_name = $1) "
            "AND ($2::text IS NULL OR user_id = $2) ORDER BY created_at, id"
        )
        return await self._fetch(sql, agent_name, user_id)
