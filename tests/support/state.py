"""Scopes and namespaces as the state tests set them up, on either backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sidecar.state import Scope, StateStore
from sidecar.state.db import connect
from sidecar.state.migrations import LATEST, MIGRATIONS, Dialect, Migration, migrate

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


WEEK = timedelta(days=7)


async def new_scope(store: StateStore, room: str = "!room:example.org", *, granted: bool = True) -> Scope:
    """Create a scope for a fixed principal and agent, granted unless told otherwise."""
    scope, _ = await store.scopes.create_scope("@alice:example.org", "native", "team/helper", "control_room", room, NOW)
    if granted:
        scope, _ = await store.scopes.grant(scope.scope_id, "remember preferences", "v1", NOW)
    return scope


#: A namespace id no scope has (for calls that must be refused before any namespace matters).
NO_NAMESPACE = "n" + "0" * 24


async def ns_of(store: StateStore, scope_id: str) -> str:
    """The scope's live namespace id (a non-existent one while it has none)."""
    scope = await store.scopes.get_scope(scope_id)
    return scope.namespace.ns_id if scope is not None and scope.namespace is not None else NO_NAMESPACE


def next_release(compatible_from: int | None) -> tuple[Migration, ...]:
    """This release's migrations plus the next release's one (additive: a new table) naming the oldest
    schema whose release still runs on it (None: none before it)."""

    def extra(d: Dialect) -> list[str]:
        return [d.table("next_release_table", d.i("x") + " PRIMARY KEY")]

    return (*MIGRATIONS, Migration(LATEST + 1, "next_release", extra, compatible_from=compatible_from))


async def migrate_as(url: str, migrations: tuple[Migration, ...]) -> int:
    """Migrate the store at ``url`` the way a release with these migrations would; how many it applied."""
    db = await connect(url)
    try:
        return await migrate(db, migrations=migrations)
    finally:
        await db.close()
