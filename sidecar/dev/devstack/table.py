"""What the two SQL backends of the memory stand-in share: kagent's table and the handle they hold.

The table keeps kagent's name and columns in both; they differ only in how a new id is made and in
how an embedding is stored (``real[]`` in PostgreSQL, JSON text in SQLite).
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from sidecar.dev.devstack.store import DbError

COLUMNS = "id, agent_name, user_id, content, embedding, metadata, created_at, expires_at, access_count"


def schema(*, id_default: str, embedding_type: str) -> str:
    """The ``memory`` table and its indexes, created when missing."""
    return f"""
CREATE TABLE IF NOT EXISTS memory (
    id           TEXT        PRIMARY KEY{id_default},
    agent_name   TEXT,
    user_id      TEXT,
    content      TEXT,
    embedding    {embedding_type},
    metadata     TEXT        DEFAULT '{{}}',
    created_at   TIMESTAMPTZ,
    expires_at   TIMESTAMPTZ,
    access_count BIGINT      DEFAULT 0
);
CREATE INDEX IF NOT EXISTS idx_memory_agent_user ON memory(agent_name, user_id);
CREATE INDEX IF NOT EXISTS idx_memory_expires_at ON memory(expires_at);
"""


class _Closable(Protocol):
    async def close(self) -> None: ...


_H = TypeVar("_H", bound=_Closable)


class Handle(Generic[_H]):
    """A backend's pool or connection, held from open to close; used while closed, it fails with the
    driver's own text (``closed``)."""

    def __init__(self, closed: str) -> None:
        self._held: _H | None = None
        self._closed = closed

    def hold(self, value: _H) -> _H:
        self._held = value
        return value

    def get(self) -> _H:
        if self._held is None:
            raise DbError(self._closed)
        return self._held

    async def close(self) -> None:
        if self._held is not None:
            await self._held.close()
            self._held = None
