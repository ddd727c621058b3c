"""Open the stand-in's memory store by URL: SQLite (in memory or a file) or PostgreSQL with pgvector."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sidecar.dev.devstack.store import MemoryStore
from sidecar.dev.devstack.store_pg import PgMemoryStore
from sidecar.dev.devstack.store_sqlite import SqliteMemoryStore


async def open_memory_store(url: str | None = None, *, now: Callable[[], datetime] | None = None) -> MemoryStore:
    """Open a store: ``sqlite:///path`` (``sqlite://`` or ``None``: in memory) or ``postgresql://...``."""
    store: MemoryStore
    if url is None or url.startswith("sqlite:"):
        path = (url or "sqlite://").removeprefix("sqlite:").removeprefix("//").removeprefix("/")
        store = SqliteMemoryStore(path or ":memory:", now=now)
    elif url.startswith(("postgresql://", "postgres://")):
        store = PgMemoryStore(url, now=now)
    else:
        raise ValueError("store URL must start with sqlite: or postgresql://")
    await store.open()
    return store
