"""Erasure adapters: how memgov deletes kagent memory rows and proves they are gone.

``kagent-db`` uses a least-privilege PostgreSQL role on kagent's database (docs/erasure-role.sql)
that can see ids, names and timestamps but never ``content`` or ``embedding``; it deletes and
verifies by id and by ``user_id`` (the storage key) whatever the stored ``agent_name``. ``rest``
only has kagent's whole-namespace ``DELETE /api/memories``; it can clear a storage namespace
exactly, but a single entry in a live namespace can only be tombstoned (never readable through
memgov again) until the namespace is cleared. Callers pass the agent's query spelling
(``identity.appname.query_spelling``), which kagent's List and Delete match against every
spelling memgov ever stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from sidecar.contentstore.kagent import Deleted, Found, KagentMemory, Rejected, Unknown
from sidecar.reasons import Reason
from sidecar.settings import AdapterName

#: Every storage key starts with this; the kagent-db orphan sweep never touches other rows.
STORAGE_PREFIX = "mgs1."
_PG_ERRORS: tuple[type[BaseException], ...] = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class AdapterError(Exception):
    """The content store did not confirm an erasure step; the reason is a code only."""

    def __init__(self, reason: Reason = Reason.ERASURE_FAILED) -> None:
        super().__init__(reason.value)
        self.reason = reason


class EraseAdapter(Protocol):
    """What the erasure engine, the sweepers and the enforcement rollback need from the content store."""

    name: AdapterName
    exact: bool  # True when single entries of a live namespace can be deleted physically

    async def delete_entries(self, agent_name: str, storage_key: str, entry_ids: Iterable[str]) -> None: ...

    async def delete_namespace(self, agent_name: str, storage_key: str) -> None: ...

    async def remaining(
        self, agent_name: str, storage_key: str, entry_ids: Iterable[str] | None = None
    ) -> set[str]: ...

    async def delete_created_before(self, cutoff: datetime) -> int | None: ...

    async def close(self) -> None: ...


def listed(outcome: Found | Rejected | Unknown) -> Found:
    """A namespace listing; AdapterError with a code when kagent did not list it."""
    if isinstance(outcome, Found):
        return outcome
    # SECURITY: kagent's error body can quote database errors; the client read and dropped it.
    raise AdapterError(Reason.UPSTREAM_UNAVAILABLE if isinstance(outcome, Unknown) else Reason.UPSTREAM_ERROR)


class RestAdapter:
    """Whole-namespace deletion through kagent's own REST API."""

    name = AdapterName.REST
    exact = False

    def __init__(self, kagent: KagentMemory) -> None:
        self._kagent = kagent  # memgov's own calls (a bearer in kagent's trusted-proxy mode)

    async def delete_entries(self, agent_name: str, storage_key: str, entry_ids: Iterable[str]) -> None:
        # kagent v0.9.11 has no per-entry delete; the caller tombstones and reports "pending".
        raise AdapterError(Reason.ERASURE_FAILED)

    async def delete_namespace(self, agent_name: str, storage_key: str) -> None:
        deleted = await self._kagent.delete(agent_name, storage_key)
        if isinstance(deleted, Unknown):
            raise AdapterError(Reason.UPSTREAM_UNAVAILABLE)
        if not isinstance(deleted, Deleted):
            raise AdapterError(Reason.ERASURE_FAILED)

    async def remaining(self, agent_name: str, storage_key: str, entry_ids: Iterable[str] | None = None) -> set[str]:
        # Only ids are kept; the content kagent returns with them is dropped right here.
        found = set(listed(await self._kagent.list(agent_name, storage_key)).ids)
        return found if entry_ids is None else found & set(entry_ids)

    async def delete_created_before(self, cutoff: datetime) -> int | None:
        return None  # kagent's REST API cannot enumerate namespaces, so orphans are out of its reach

    async def close(self) -> None:
        return None


class KagentDbAdapter:
    """Deletes and verifies by id through a role that cannot read content (see docs/erasure-role.sql)."""

    name = AdapterName.KAGENT_DB
    exact = True

    def __init__(self, url: str) -> None:
        self._url = url
        self._pool: asyncpg.Pool | None = None

    async def _conn_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            try:
                # Connections are opened only while erasing or sweeping (docs/erasure-role.sql bounds them).
                self._pool = await asyncpg.create_pool(
                    self._url, min_size=0, max_size=4, command_timeout=10, max_inactive_connection_lifetime=60
                )
            except _PG_ERRORS:
                raise AdapterError(Reason.UPSTREAM_UNAVAILABLE) from None
        return self._pool

    async def _run(self, sql: str, *args: object) -> list[Any]:
        pool = await self._conn_pool()
        try:
            rows = await pool.fetch(sql, *args)
        except asyncpg.PostgresError:
            # SECURITY: driver messages may quote values; only the code leaves the adapter.
            raise AdapterError(Reason.ERASURE_FAILED) from None
        except _PG_ERRORS:
            raise AdapterError(Reason.UPSTREAM_UNAVAILABLE) from None
        return [r[0] for r in rows]

    async def delete_entries(self, agent_name: str, storage_key: str, entry_ids: Iterable[str]) -> None:
        await self._run(
            "DELETE FROM memory WHERE user_id = $1 AND id = ANY($2::text[]) RETURNING id", storage_key, list(entry_ids)
        )

    async def delete_namespace(self, agent_name: str, storage_key: str) -> None:
        # The storage key names one scope and generation alone, so every agent_name spelling goes.
        await self._run("DELETE FROM memory WHERE user_id = $1 RETURNING id", storage_key)

    async def remaining(self, agent_name: str, storage_key: str, entry_ids: Iterable[str] | None = None) -> set[str]:
        if entry_ids is None:
            ids = await self._run("SELECT id FROM memory WHERE user_id = $1", storage_key)
        else:
            ids = await self._run("SELECT id FROM memory WHERE id = ANY($1::text[])", list(entry_ids))
        return set(ids)

    async def delete_created_before(self, cutoff: datetime) -> int | None:
        """Delete rows of memgov namespaces created before ``cutoff`` (past every possible hard expiry)."""
        ids = await self._run(
            "DELETE FROM memory WHERE user_id LIKE $1 AND created_at < $2 RETURNING id", STORAGE_PREFIX + "%", cutoff
        )
        return len(ids)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
