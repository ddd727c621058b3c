"""Storage namespaces of a scope (SPEC D2, D4): which kagent ``user_id`` keys it has ever written.

A namespace is ``live`` while it is the one a scope writes to (at most one per scope, enforced
by a unique index), ``retired`` once the scope moved on, ``cleared`` after a delete and an empty
read-back. The row is the list every erasure and sweeper reads back, so nothing a scope could
have written escapes verification. Namespaces are created and retired only by the scope
transitions in :mod:`sidecar.state.scopes`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sidecar.state.codec import Columns, to_us
from sidecar.state.db import Facet, Row
from sidecar.state.types import Namespace

_NAMESPACE: Final = Columns(Namespace)
#: ns_id, scope_id, generation, salt, state, possibly_until_us, created_us, retired_us, cleared_us,
#: frozen_by, rotation_id
NS_COLS: Final = _NAMESPACE.select()


def namespace_of(r: Row) -> Namespace:
    return _NAMESPACE.read(r)


class NamespaceOps(Facet):
    """Reading namespaces and recording what was read back."""

    async def namespaces_of_scope(self, scope_id: str) -> list[Namespace]:
        """Every namespace the scope ever had, oldest first."""
        return await self._scope_rows(
            namespace_of, f"SELECT {NS_COLS} FROM namespaces WHERE scope_id = $1 ORDER BY created_us, ns_id", scope_id
        )

    async def open_namespaces(self, scope_id: str) -> list[Namespace]:
        """The scope's namespaces not yet cleared (live, staged, retired), oldest first."""
        return await self._scope_rows(
            namespace_of,
            f"SELECT {NS_COLS} FROM namespaces WHERE scope_id = $1 AND state <> 'cleared' ORDER BY created_us, ns_id",
            scope_id,
        )

    async def namespaces_by_id(self, scope_id: str, ns_ids: list[str]) -> list[Namespace]:
        """The scope's namespaces of these ids (a compacted one is left out)."""
        ids = sorted(set(ns_ids))
        if not ids:
            return []
        return await self._scope_rows(
            namespace_of,
            f"SELECT {NS_COLS} FROM namespaces WHERE scope_id = $1"
            f" AND ns_id IN ({', '.join(f'${i + 2}' for i in range(len(ids)))})",
            scope_id,
            *ids,
        )

    async def sweepable_namespaces(self, now: datetime, limit: int) -> list[Namespace]:
        """Namespaces to clear, oldest first: retired ones, and cleared ones a late write reached since.

        A late write is one the ledger knows (a filled entry or a pending slot not yet physically
        deleted); one still possibly landing (unknown outcome) waits until its lease ends.
        """
        rows = await self._fetch(
            "read",
            f"SELECT {NS_COLS} FROM namespaces n WHERE (n.state = 'retired' OR (n.state = 'cleared'"
            " AND EXISTS (SELECT 1 FROM ledger l WHERE l.ns_id = n.ns_id AND l.deleted_us IS NULL)))"
            " AND (n.possibly_until_us IS NULL OR n.possibly_until_us <= $1)"
            " ORDER BY n.retired_us, n.ns_id LIMIT $2",
            to_us(now),
            limit,
        )
        return [namespace_of(r) for r in rows]

    async def mark_cleared(self, ns_ids: list[str], now: datetime) -> None:
        """Record that these retired namespaces were deleted and read back empty (a live one never is)."""
        async with self._db.tx("single") as tx:
            for ns_id in ns_ids:
                await tx.execute(
                    "UPDATE namespaces SET state = 'cleared', cleared_us = $2 WHERE ns_id = $1 AND state <> 'live'",
                    ns_id,
                    to_us(now),
                )
