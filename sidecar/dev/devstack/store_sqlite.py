"""SQLite backend of the kagent memory stand-in (aiosqlite; a file or ``:memory:``)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import aiosqlite

from sidecar.dev.devstack.store import EXTENSION, POPULAR_ACCESS_COUNT, DbError, MemoryRow, MemoryStore, NewMemory
from sidecar.dev.devstack.table import COLUMNS, Handle, schema

# PostgreSQL refuses NUL in text; kagent runs on PostgreSQL, so the stand-in refuses it too.
_NUL = 'ERROR: invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)'


def _ts(value: datetime | None) -> str | None:
    # Fixed-width UTC text sorts and compares like the timestamps it encodes.
    return None if value is None else value.astimezone(UTC).isoformat(timespec="microseconds")


def _parse_ts(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _row(r: Sequence[Any]) -> MemoryRow:
    embedding = None if r[4] is None else tuple(json.loads(r[4]))
    return MemoryRow(r[0], r[1], r[2], r[3], embedding, r[5], _parse_ts(r[6]), _parse_ts(r[7]), int(r[8] or 0))


def _no_nul(*values: str | None) -> None:
    if any(v is not None and "\x00" in v for v in values):
        raise DbError(_NUL)


class SqliteMemoryStore(MemoryStore):
    """The memory table in SQLite; one connection, calls serialized so transactions never interleave."""

    def __init__(self, path: str, *, now: Callable[[], datetime] | None = None) -> None:
        super().__init__(now)
        self._path = path
        self._db: Handle[aiosqlite.Connection] = Handle("sql: database is closed")
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        db = self._db.hold(await aiosqlite.connect(self._path))
        await db.executescript(schema(id_default="", embedding_type="TEXT"))
        await db.commit()

    async def close(self) -> None:
        await self._db.close()

    async def _write(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Run statements in one transaction; a failure rolls back and names the failing step."""
        async with self._lock:
            step = 0
            try:
                for sql, args in statements:
                    await self._db.get().execute(sql, args)
                    step += 1
                await self._db.get().commit()
            except sqlite3.Error as exc:
                await self._db.get().rollback()
                raise DbError(str(exc), step) from None

    async def _select(self, sql: str, args: Sequence[Any]) -> list[MemoryRow]:
        async with self._lock:
            try:
                async with self._db.get().execute(sql, args) as cursor:
                    return [_row(r) for r in await cursor.fetchall()]
            except sqlite3.Error as exc:
                raise DbError(str(exc)) from None

    async def _insert(self, items: Sequence[NewMemory], created_at: datetime) -> list[str]:
        ids = [str(uuid.uuid4()) for _ in items]
        statements = []
        for new_id, m in zip(ids, items, strict=True):
            _no_nul(m.agent_name, m.user_id, m.content, m.metadata)
            args = (
                new_id,
                m.agent_name,
                m.user_id,
                m.content,
                json.dumps(list(m.embedding)),
                m.metadata,
                _ts(created_at),
                _ts(m.expires_at),
                0,
            )
            statements.append((f"INSERT INTO memory ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", args))
        await self._write(statements)
        return ids

    async def _of_agent(self, agent_name: str, normalized: str, user_id: str, *, busiest: bool) -> list[MemoryRow]:
        _no_nul(agent_name, user_id)
        order = "access_count DESC, created_at, rowid" if busiest else "created_at, rowid"
        sql = f"SELECT {COLUMNS} FROM memory WHERE (agent_name = ? OR agent_name = ?) AND user_id = ? ORDER BY {order}"
        return await self._select(sql, (agent_name, normalized, user_id))

    async def _bump(self, ids: Sequence[str]) -> None:
        marks = ", ".join("?" for _ in ids)
        await self._write([(f"UPDATE memory SET access_count = access_count + 1 WHERE id IN ({marks})", ids)])

    async def _delete(self, agent_name: str, user_id: str) -> None:
        _no_nul(agent_name, user_id)
        await self._write([("DELETE FROM memory WHERE agent_name = ? AND user_id = ?", (agent_name, user_id))])

    async def _prune(self, now: datetime) -> None:
        stamp = _ts(now)
        await self._write(
            [
                (
                    "UPDATE memory SET expires_at = ?, access_count = 0 WHERE expires_at < ? AND access_count >= ?",
                    (_ts(now + EXTENSION), stamp, POPULAR_ACCESS_COUNT),
                ),
                ("DELETE FROM memory WHERE expires_at < ? AND access_count < ?", (stamp, POPULAR_ACCESS_COUNT)),
            ]
        )

    async def _rows(self, agent_name: str | None, user_id: str | None) -> list[MemoryRow]:
        sql = (
            f"SELECT {COLUMNS} FROM memory WHERE (? IS NULL OR agent_name = ?) AND (? IS NULL OR user_id = ?) "
            "ORDER BY created_at, rowid"
        )
        return await self._select(sql, (agent_name, agent_name, user_id, user_id))
