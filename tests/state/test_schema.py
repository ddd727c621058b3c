"""The schema: content-free by construction, identical on both backends, migrated exactly once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sidecar.reasons import Reason
from sidecar.state import StateError, StateStore, open_store
from sidecar.state.db import Database, connect
from sidecar.state.migrations import LATEST, MIGRATIONS, Dialect, migrate
from sidecar.state.types import SchemaMismatch
from tests.state import workers
from tests.state.workers import Pool
from tests.support.state import NOW, migrate_as, new_scope, next_release

#: Longest string any column may hold; only these columns may exceed the 64 of ids and codes.
MAX_BOUND = 320
LONG_COLUMNS = {"principal_mxid", "subject", "room_id", "agent", "purpose", "model"}
Column = tuple[str, int]  # ("int" | "float" | "str", bound for str else 0)


async def pg_columns(store: StateStore) -> dict[tuple[str, str], Column]:
    """Every column of the PostgreSQL schema, normalized."""
    kinds = {"bigint": "int", "integer": "int", "smallint": "int", "boolean": "int", "double precision": "float"}
    async with store.db.tx("read") as tx:
        rows = await tx.fetch(
            "SELECT table_name, column_name, data_type, character_maximum_length FROM information_schema.columns"
            " WHERE table_schema = 'public'"
        )
    out = {}
    for table, column, data_type, length in rows:
        if data_type == "character varying" and length is not None:
            out[(table, column)] = ("str", int(length))
        else:  # text, bytea, json, arrays and anything else land here as unbounded
            out[(table, column)] = (kinds.get(data_type, "unbounded:" + data_type), 0)
    return out


async def sqlite_columns(store: StateStore) -> dict[tuple[str, str], Column]:
    """Every column of the SQLite schema, normalized; TEXT counts as bounded only with a length CHECK."""
    kinds = {"INTEGER": "int", "REAL": "float"}
    out = {}
    async with store.db.tx("read") as tx:
        tables = await tx.fetch("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        for table, sql in tables:
            strict = re.search(r"\)\s*STRICT\s*$", sql) is not None
            for col in await tx.fetch(f"SELECT name, type FROM pragma_table_info('{table}')"):
                name, decl = col[0], col[1].upper()
                bound = re.search(rf"CHECK \(length\({name}\) <= (\d+)\)", sql)
                if decl == "TEXT" and bound and strict:
                    out[(table, name)] = ("str", int(bound.group(1)))
                else:
                    out[(table, name)] = (kinds.get(decl, "unbounded:" + decl) if strict else "unbounded:lax", 0)
    return out


async def columns(store: StateStore) -> dict[tuple[str, str], Column]:
    return await (pg_columns(store) if store.backend == "postgresql" else sqlite_columns(store))


class TestContentFree:
    async def test_no_column_can_hold_free_text(self, store: StateStore) -> None:
        """Every column is a number or a string bounded to ids, codes, MXIDs, rooms, agents or a purpose."""
        cols = await columns(store)
        assert len({t for t, _ in cols}) >= 12
        unbounded = {k: v for k, v in cols.items() if v[0] not in ("int", "float", "str")}
        assert unbounded == {}
        too_long = {
            k: n
            for k, (kind, n) in cols.items()
            if kind == "str" and (n > MAX_BOUND or (n > 64 and k[1] not in LONG_COLUMNS))
        }
        assert too_long == {}

    async def test_both_backends_have_the_same_schema(self, tmp_path: Path, pg_url: str) -> None:
        """SQLite and PostgreSQL hold the same tables, columns and string bounds."""
        lite = await open_store(f"sqlite:///{tmp_path}/s.db")
        pg = await open_store(pg_url)
        try:
            assert await sqlite_columns(lite) == await pg_columns(pg)
        finally:
            await lite.close()
            await pg.close()

    @pytest.mark.parametrize(
        "sql",
        [
            "UPDATE scopes SET purpose = $1",
            "UPDATE scopes SET principal_mxid = $1",
            "INSERT INTO audit (at_us, kind, reason) VALUES (0, 'denial', $1)",
        ],
    )
    async def test_the_database_itself_refuses_long_strings(self, store: StateStore, sql: str) -> None:
        """Bypassing the store's checks still cannot put a long text into a row."""
        await new_scope(store)
        with pytest.raises(StateError):
            async with store.db.tx() as tx:
                await tx.execute(sql, "remember this: " + "x" * 400)

    async def test_stats_are_counts_only(self, store: StateStore) -> None:
        """`memgov state stats` reports integers per record kind and nothing else."""
        await new_scope(store)
        stats = await store.stats()
        assert stats["scopes"] == 1 and stats["scopes_enabled"] == 1 and stats["receipts"] == 1
        assert all(isinstance(v, int) for v in stats.values())


class TestMigrations:
    async def test_migrating_twice_changes_nothing(self, state_url: str) -> None:
        """Reopening an up-to-date store applies no migration and keeps the data."""
        first = await open_store(state_url)
        scope = await new_scope(first)
        await first.close()
        again = await open_store(state_url)
        try:
            assert await migrate(again.db) == 0
            assert await again.schema_version() == LATEST
            assert await again.scopes.get_scope(scope.scope_id) == scope
        finally:
            await again.close()

    async def test_existing_generations_become_legacy_namespaces(self, state_url: str) -> None:
        """Upgrading keeps rows written under unsalted keys reachable: each generation becomes a namespace."""
        db = await connect(state_url)
        try:
            await _apply_only(db, 1)
            async with db.tx("write") as tx:
                for sid, enabled, gen in (("s" + "a" * 24, True, 3), ("s" + "b" * 24, False, 2)):
                    await tx.execute(
                        "INSERT INTO scopes (scope_id, principal_mxid, origin, agent, kind, room_id, enabled,"
                        " generation, created_us, updated_us) VALUES ($1, $2, 'native', 'ns/a', 'control_room',"
                        " $3, $4, $5, 0, 0)",
                        sid,
                        f"@{sid}:example.org",
                        f"!{sid}:example.org",
                        enabled,
                        gen,
                    )
                for slot, gen in (("l1", 1), ("l3", 3)):
                    await tx.execute(
                        "INSERT INTO ledger (slot_id, scope_id, generation, entry_id, created_us, expires_us)"
                        " VALUES ($1, $2, $3, $4, 0, 1)",
                        slot,
                        "s" + "a" * 24,
                        gen,
                        "e-" + slot,
                    )
        finally:
            await db.close()
        store = await open_store(state_url)
        try:
            live = await store.scopes.get_scope("s" + "a" * 24)
            assert live is not None and live.namespace is not None
            assert (live.namespace.generation, live.namespace.legacy) == (3, True)
            assert live.namespace.storage_key == f"mgs1.{'s' + 'a' * 24}.3"
            spaces = await store.namespaces.namespaces_of_scope("s" + "a" * 24)
            assert sorted((n.generation, n.state) for n in spaces) == [
                (0, "retired"),
                (1, "retired"),
                (2, "retired"),
                (3, "live"),
            ]
            by_gen = {n.generation: n.ns_id for n in spaces}
            assert {e.entry_id: e.ns_id for e in await store.ledger.entries_of_scope("s" + "a" * 24)} == {
                "e-l1": by_gen[1],
                "e-l3": by_gen[3],
            }
            disabled = await store.namespaces.namespaces_of_scope("s" + "b" * 24)
            assert {n.state for n in disabled} == {"retired"} and len(disabled) == 3
            assert (await store.scopes.get_scope("s" + "b" * 24)).namespace is None  # type: ignore[union-attr]  # the scope exists
        finally:
            await store.close()

    async def test_processes_starting_together_migrate_once(self, state_url: str, pool: Pool) -> None:
        """Replicas that start at the same moment all come up on the latest schema, applied once."""
        assert pool.run(state_url, workers.open_only, [()] * pool.size) == [LATEST] * pool.size
        store = await open_store(state_url)
        try:
            async with store.db.tx("read") as tx:
                rows = await tx.fetch("SELECT version FROM schema_migrations ORDER BY version")
            assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
            assert (await store.stats())["scopes"] == 0
            await store.scopes.create_scope("@a:example.org", "native", "ns/a", "control_room", "!r:example.org", NOW)
        finally:
            await store.close()

    async def test_memory_database_works_for_tests_and_demos(self) -> None:
        """sqlite:///:memory: gives a private, migrated store."""
        store = await open_store("sqlite:///:memory:")
        try:
            scope, created = await store.scopes.create_scope(
                "@a:example.org", "native", "ns/a", "control_room", "!r:x", NOW
            )
            assert created and (await store.scopes.get_scope(scope.scope_id)) == scope
        finally:
            await store.close()

    async def test_an_unknown_scheme_is_a_configuration_error(self) -> None:
        """Only sqlite:/// and postgresql:// URLs are accepted."""
        with pytest.raises(ValueError):
            await open_store("mysql://localhost/db")

    async def test_an_unreachable_server_is_state_unavailable(self) -> None:
        """A PostgreSQL server that does not answer surfaces as the state_unavailable code only."""
        with pytest.raises(StateError) as err:
            await open_store("postgresql://memgov:hunter2@127.0.0.1:1/none")
        assert err.value.reason is Reason.STATE_UNAVAILABLE
        assert str(err.value) == "state_unavailable"


async def _apply_only(db: Database, version: int) -> None:
    """Bring an empty database to one old schema version, the way a released gateway left it."""
    dialect = Dialect(db.dialect)
    async with db.tx("write") as tx:
        await tx.execute(
            dialect.table(
                "schema_migrations",
                dialect.i("version") + " PRIMARY KEY",
                dialect.s("name", 64),
                dialect.i("applied_us"),
            )
        )
        for m in MIGRATIONS:
            if m.version <= version:
                for stmt in m.statements(dialect):
                    await tx.execute(stmt)
                await tx.execute(
                    "INSERT INTO schema_migrations (version, name, applied_us) VALUES ($1, $2, 0)", m.version, m.name
                )


class TestRollback:
    async def test_this_release_runs_on_a_newer_schema_that_names_it_compatible(self, state_url: str) -> None:
        """Rolled back after an additive migration that names it compatible, this release starts and works,
        and the newer release finds its schema intact when it rolls forward again."""
        assert await migrate_as(state_url, next_release(compatible_from=LATEST)) == LATEST + 1
        store = await open_store(state_url)
        try:
            scope = await new_scope(store)
            await store.audit_log.audit("decision", "consent_missing", scope_id=scope.scope_id, now=NOW)
            assert await store.schema_version() == LATEST + 1
            assert (await store.scopes.get_scope(scope.scope_id)) == scope
        finally:
            await store.close()
        assert await migrate_as(state_url, next_release(compatible_from=LATEST)) == 0

    async def test_a_schema_this_release_cannot_follow_is_refused(self, state_url: str) -> None:
        """A newer migration that does not name this release compatible stops it before anything changes."""
        await migrate_as(state_url, next_release(compatible_from=None))
        with pytest.raises(SchemaMismatch) as refused:
            await open_store(state_url)
        assert (refused.value.found, refused.value.supported, refused.value.newer) == (LATEST + 1, LATEST, True)
        with pytest.raises(SchemaMismatch):
            await open_store(state_url, auto_migrate=False)
        assert await migrate_as(state_url, next_release(compatible_from=None)) == 0  # untouched by the refusals

    async def test_without_auto_migrate_an_unmigrated_schema_is_refused(self, state_url: str) -> None:
        """A gateway that does not migrate refuses a schema behind its release, and runs once it is migrated."""
        with pytest.raises(SchemaMismatch) as refused:
            await open_store(state_url, auto_migrate=False)
        assert (refused.value.found, refused.value.newer) == (0, False)
        await migrate_as(state_url, MIGRATIONS)
        store = await open_store(state_url, auto_migrate=False)
        try:
            assert await store.schema_version() == LATEST
        finally:
            await store.close()
