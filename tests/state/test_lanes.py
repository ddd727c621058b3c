"""The data lane: agents' calls never take the PostgreSQL connections the control API, erasures
and the sweeper need, so a backlog of saves cannot hold up a withdrawal's fence."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from sidecar.proxy import observe_data
from sidecar.state.db import _IN_DATA_LANE, _RESERVED, connect, data_lane
from tests.support.wait import until

POOL_SIZE = 4


class TestLanes:
    async def test_a_control_call_gets_a_connection_while_saves_fill_their_lane(self, pg_url: str) -> None:
        """Five data-lane transactions held open take only their share; a control-lane one still runs."""
        db = await connect(pg_url, POOL_SIZE)
        entered = 0
        release = asyncio.Event()

        async def save_held_open() -> None:
            nonlocal entered
            with data_lane():
                async with db.tx("write") as tx:
                    await tx.fetchrow("SELECT 1")
                    entered += 1
                    await release.wait()

        async def lane_full() -> bool:
            return entered == POOL_SIZE - _RESERVED

        saves = [asyncio.create_task(save_held_open()) for _ in range(5)]
        try:
            await until(lane_full)
            async with asyncio.timeout(30), db.tx("write") as tx:
                assert await tx.fetchrow("SELECT 1") == (1,)
            # The pool had free connections, yet the other saves waited for their lane.
            assert entered == POOL_SIZE - _RESERVED
            assert not any(s.done() for s in saves)
        finally:
            release.set()
            await asyncio.gather(*saves)
            await db.close()
        assert entered == 5

    async def test_without_the_lane_the_same_backlog_takes_every_connection(self, pg_url: str) -> None:
        """The reference case: control-lane work is not limited, so the lane above is what reserves."""
        db = await connect(pg_url, POOL_SIZE)
        entered = 0
        release = asyncio.Event()

        async def held_open() -> None:
            nonlocal entered
            async with db.tx("write") as tx:
                await tx.fetchrow("SELECT 1")
                entered += 1
                await release.wait()

        async def pool_full() -> bool:
            return entered == POOL_SIZE

        held = [asyncio.create_task(held_open()) for _ in range(POOL_SIZE)]
        try:
            await until(pool_full)
        finally:
            release.set()
            await asyncio.gather(*held)
            await db.close()

    async def test_the_data_plane_runs_its_handlers_in_the_data_lane(self) -> None:
        """Every agent-facing request's handler runs inside the data lane; nothing outside it does."""
        seen: list[bool] = []

        async def search(_request: web.Request) -> web.Response:
            seen.append(_IN_DATA_LANE.get())
            return web.json_response([])

        app = web.Application(middlewares=[observe_data])
        app.router.add_post("/api/memories/search", search)
        async with TestClient(TestServer(app)) as client:
            async with client.post("/api/memories/search", json={}) as resp:
                assert resp.status == 200
        assert seen == [True]
        assert _IN_DATA_LANE.get() is False
