"""The data lane: agents' calls never take the PostgreSQL connections the control API, erasures
and the sweeper need, so a backlog of saves cannot hold up a withdrawal's fence."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from sidecar.proxy import observe_data
from sidecar.state.db import _RESERVED, Database, connect
from sidecar.state.lanes import IN_DATA_LANE, data_lane
from tests.support.wait import until

POOL_SIZE = 4


class _HeldOpen:
    """Write transactions that stay open (holding their connection) until released."""

    def __init__(self, db: Database) -> None:
        self.db, self.entered, self.release = db, 0, asyncio.Event()

    async def one(self, lane: bool) -> None:
        with data_lane() if lane else contextlib.nullcontext():
            async with self.db.tx("write") as tx:
                await tx.fetchrow("SELECT 1")
                self.entered += 1
                await self.release.wait()

    def start(self, n: int, *, lane: bool) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(self.one(lane)) for _ in range(n)]

    async def reach(self, n: int) -> None:
        async def reached() -> bool:
            return self.entered == n

        await until(reached)

    async def stop(self, tasks: list[asyncio.Task[None]]) -> None:
        self.release.set()
        await asyncio.gather(*tasks)
        await self.db.close()


class TestLanes:
    async def test_a_control_call_gets_a_connection_while_saves_fill_their_lane(self, pg_url: str) -> None:
        """Five data-lane transactions held open take only their share; a control-lane one still runs."""
        held = _HeldOpen(await connect(pg_url, POOL_SIZE))
        saves = held.start(5, lane=True)
        try:
            await held.reach(POOL_SIZE - _RESERVED)
            async with asyncio.timeout(30), held.db.tx("write") as tx:
                assert await tx.fetchrow("SELECT 1") == (1,)
            # The pool had free connections, yet the other saves waited for their lane.
            assert held.entered == POOL_SIZE - _RESERVED
            assert not any(s.done() for s in saves)
        finally:
            await held.stop(saves)
        assert held.entered == 5

    async def test_without_the_lane_the_same_backlog_takes_every_connection(self, pg_url: str) -> None:
        """The reference case: control-lane work is not limited, so the lane above is what reserves."""
        held = _HeldOpen(await connect(pg_url, POOL_SIZE))
        tasks = held.start(POOL_SIZE, lane=False)
        try:
            await held.reach(POOL_SIZE)
        finally:
            await held.stop(tasks)

    async def test_the_data_plane_runs_its_handlers_in_the_data_lane(self) -> None:
        """Every agent-facing request's handler runs inside the data lane; nothing outside it does."""
        seen: list[bool] = []

        async def search(_request: web.Request) -> web.Response:
            seen.append(IN_DATA_LANE.get())
            return web.json_response([])

        app = web.Application(middlewares=[observe_data])
        app.router.add_post("/api/memories/search", search)
        async with TestClient(TestServer(app)) as client:
            async with client.post("/api/memories/search", json={}) as resp:
                assert resp.status == 200
        assert seen == [True]
        assert IN_DATA_LANE.get() is False
