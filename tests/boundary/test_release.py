"""`memgov doctor --ops-url` reports the kagent release memgov reads, and whether memgov is tested against it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from sidecar.boundary.doctor import kagent_release

TESTED = ["v0.9.11", "v0.10.0-rc3"]


async def _ops(aiohttp_server: Any, status: int, body: object) -> str:
    async def readyz(request: web.Request) -> web.Response:
        return web.Response(status=status, text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_get("/readyz", readyz)
    return str((await aiohttp_server(app)).make_url(""))


def _ready(release: str | None, tested: bool) -> dict[str, Any]:
    kagent = {"ok": True, "release": release, "tested": tested, "tested_releases": TESTED}
    return {"ready": True, "checks": {"kagent": kagent}}


class TestKagentRelease:
    @pytest.mark.parametrize(
        ("status", "body", "line"),
        [
            (200, _ready("v0.9.11", True), "kagent release: v0.9.11, tested"),
            (200, _ready("v0.10.4", False), "kagent release: v0.10.4, NOT tested (tested: v0.9.11, v0.10.0-rc3)"),
            (503, _ready(None, False), "kagent release: unknown (kagent's /version gave none memgov recognises"),
            (200, {"ready": True, "checks": {}}, "kagent release: memgov's /readyz does not report it"),
        ],
    )
    async def test_the_release_line(self, aiohttp_server: Any, status: int, body: object, line: str) -> None:
        """The doctor names the release and the verdict, from /readyz even when memgov is not ready."""
        url = await _ops(aiohttp_server, status, body)
        assert (await asyncio.to_thread(kagent_release, url)).startswith(line)

    async def test_an_ops_listener_that_does_not_answer(self) -> None:
        """An address nothing listens on is reported, not a traceback."""
        said = await asyncio.to_thread(kagent_release, "http://127.0.0.1:9")
        assert said.startswith("kagent release: memgov's /readyz did not answer")
