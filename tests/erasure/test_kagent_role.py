"""docs/erasure-role.sql on a real PostgreSQL with kagent's memory table: delete and verify, never read.

The table comes from the stand-in and from each kagent release's own migrations (pgvector, HNSW index).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from sidecar.contentstore.adapters import KagentDbAdapter
from sidecar.dev.devstack import MemoryStore, open_memory_store
from sidecar.dev.devstack.realkagent import start_real_kagent
from sidecar.dev.devstack.releases import RELEASES
from sidecar.dev.devstack.store import NewMemory
from sidecar.dev.devstack.vectors import embed_text
from tests.support.harness import APP, install_role, role_url

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(
    params=[
        pytest.param(None, id="standin-schema"),
        *(pytest.param(r, id=f"kagent-{r.tag}-schema", marks=pytest.mark.real_kagent) for r in RELEASES.values()),
    ]
)
async def kagent_db(pg_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[MemoryStore]:
    """kagent's memory table, as the stand-in creates it or as a kagent release's own migrations do, with the role."""
    kagent = None
    if request.param is not None:
        kagent = await asyncio.to_thread(start_real_kagent, pg_url, tmp_path / "kagent", release=request.param)
    store = await open_memory_store(pg_url, now=lambda: NOW)
    await install_role(pg_url)
    try:
        yield store
    finally:
        await store.close()
        if kagent is not None:
            kagent.stop()


async def _insert(store: MemoryStore, user_id: str, text: str, *, age: timedelta = timedelta(0)) -> str:
    store.now = lambda: NOW - age
    try:
        return await store.insert(NewMemory(APP, user_id, text, embed_text(text), "{}", NOW - age + timedelta(days=7)))
    finally:
        store.now = lambda: NOW


class TestRoleGrants:
    @pytest.mark.parametrize(
        "statement",
        [
            "SELECT content FROM memory",
            "SELECT embedding FROM memory",
            "SELECT metadata FROM memory",
            "SELECT * FROM memory",
            "SELECT id FROM memory WHERE content LIKE '%'",
            "DELETE FROM memory WHERE id = 'x' RETURNING content",
            "UPDATE memory SET content = ''",
            "INSERT INTO memory (id, content) VALUES ('x', 'y')",
            "TRUNCATE memory",
        ],
    )
    async def test_the_role_can_never_read_or_write_content(
        self, kagent_db: MemoryStore, pg_url: str, statement: str
    ) -> None:
        """Every statement that would read or change content fails with permission denied."""
        await _insert(kagent_db, "mgs1.s000000000000000000000001.1", "secret plans for tuesday")
        conn = await asyncpg.connect(role_url(pg_url))
        try:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(statement)
        finally:
            await conn.close()

    async def test_the_role_sees_ids_names_and_times(self, kagent_db: MemoryStore, pg_url: str) -> None:
        """The granted columns are exactly what deletion and verification need."""
        entry = await _insert(kagent_db, "mgs1.s000000000000000000000001.1", "likes tea")
        conn = await asyncpg.connect(role_url(pg_url))
        try:
            row = await conn.fetchrow("SELECT id, agent_name, user_id, created_at, expires_at FROM memory")
        finally:
            await conn.close()
        assert row is not None and (row["id"], row["agent_name"]) == (entry, APP)

    async def test_rerunning_the_file_is_harmless(self, kagent_db: MemoryStore, pg_url: str) -> None:
        """Applying the SQL twice leaves the same grants (it is part of every upgrade)."""
        await install_role(pg_url)
        conn = await asyncpg.connect(role_url(pg_url))
        try:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("SELECT content FROM memory")
        finally:
            await conn.close()


class TestKagentDbAdapter:
    async def test_deletes_and_verifies_one_entry_by_id(self, kagent_db: MemoryStore, pg_url: str) -> None:
        """Forget-one removes exactly the named row and a read-after-delete finds it gone."""
        key = "mgs1.s000000000000000000000001.1"
        doomed, kept = await _insert(kagent_db, key, "likes tea"), await _insert(kagent_db, key, "likes rain")
        adapter = KagentDbAdapter(role_url(pg_url))
        try:
            await adapter.delete_entries(APP, key, [doomed])
            assert await adapter.remaining(APP, key, [doomed, kept]) == {kept}
        finally:
            await adapter.close()
        assert [r.id for r in await kagent_db.rows()] == [kept]

    async def test_clears_a_namespace_under_every_agent_spelling(self, kagent_db: MemoryStore, pg_url: str) -> None:
        """A storage key names one scope and generation, so every row under it goes, whatever agent_name says."""
        key, other = "mgs1.s000000000000000000000001.1", "mgs1.s000000000000000000000002.1"
        await _insert(kagent_db, key, "likes tea")
        foreign = await _insert(kagent_db, other, "someone else's")
        await kagent_db.insert(NewMemory("team__NS__helper-x", key, "odd spelling", embed_text("x"), "{}", None))
        adapter = KagentDbAdapter(role_url(pg_url))
        try:
            await adapter.delete_namespace(APP, key)
            assert await adapter.remaining(APP, key) == set()
        finally:
            await adapter.close()
        assert [r.id for r in await kagent_db.rows()] == [foreign]

    async def test_orphan_sweep_takes_only_old_rows_of_memgov_namespaces(
        self, kagent_db: MemoryStore, pg_url: str
    ) -> None:
        """Rows past every possible hard expiry go; fresh rows and rows outside memgov's namespaces stay."""
        old = await _insert(kagent_db, "mgs1.s000000000000000000000001.3", "old", age=timedelta(days=9))
        fresh = await _insert(kagent_db, "mgs1.s000000000000000000000001.3", "fresh")
        foreign = await _insert(kagent_db, "@alice:example.org", "written around memgov", age=timedelta(days=9))
        adapter = KagentDbAdapter(role_url(pg_url))
        try:
            assert await adapter.delete_created_before(NOW - timedelta(days=8)) == 1
        finally:
            await adapter.close()
        assert sorted(r.id for r in await kagent_db.rows()) == sorted([fresh, foreign])
        assert old not in {r.id for r in await kagent_db.rows()}
