"""Scripts: ``fetchmany`` runs one statement per row of parameters, in order, on both backends."""

from __future__ import annotations

from sidecar.state import StateStore
from sidecar.state.db import Script, drive, execute, fetchmany

_UPSERT = (
    "INSERT INTO scratch (k, n) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET n = scratch.n + excluded.n RETURNING n"
)


def _counts() -> Script[list[int]]:
    yield execute("CREATE TABLE IF NOT EXISTS scratch (k VARCHAR(8) PRIMARY KEY, n INTEGER NOT NULL)")
    rows = yield fetchmany(_UPSERT, [("a", 1), ("a", 2), ("b", 5), ("a", 4)])
    return [int(r[0]) for r in rows]


class TestFetchmany:
    async def test_each_run_sees_the_runs_before_it_and_answers_in_order(self, store: StateStore) -> None:
        """Through the store's own path (on SQLite, the event loop's inline connection)."""
        assert await store.db.run(_counts) == [1, 3, 5, 7]

    async def test_the_same_through_a_transaction_handle(self, store: StateStore) -> None:
        """Through ``tx`` (on SQLite, the connection thread's path taken after a lock conflict)."""
        async with store.db.tx("write") as tx:
            assert await drive(_counts(), tx) == [1, 3, 5, 7]
        async with store.db.tx("write") as tx:
            assert await drive(_counts(), tx) == [8, 10, 10, 14]
