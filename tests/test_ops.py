"""Operations listener: metrics with bounded labels, health and readiness."""

from __future__ import annotations

import aiohttp

from sidecar.ops import Readiness, create_ops_app
from tests.support.echo import create_echo_app
from tests.support.gateway import gateway


class TestOps:
    async def test_metrics_count_requests_by_class_and_status(self, aiohttp_server):
        """After traffic, /metrics shows counts and latency per route class and status, no raw paths."""
        echo = await aiohttp_server(create_echo_app())
        async with gateway(str(echo.make_url("")).rstrip("/")) as gw, aiohttp.ClientSession() as client:
            for _ in range(3):
                async with client.get(gw.data_url + "/api/sessions/unique-session-xyz") as resp:
                    assert resp.status == 200
            async with client.get(gw.ops_url + "/metrics") as resp:
                text = await resp.text()
        line = next(
            x
            for x in text.splitlines()
            if x.startswith('memgov_requests_total{route_class="passthrough",status="200"}')
        )
        assert float(line.split()[-1]) >= 3
        assert "memgov_request_duration_seconds_bucket" in text
        assert "memgov_upstream_duration_seconds_bucket" in text
        assert "unique-session-xyz" not in text

    async def test_healthz_and_readyz(self, aiohttp_client):
        """healthz is always ok; readyz is 503 while any registered check fails, with a report."""
        state = {"ok": False}

        async def check():
            return state["ok"], {"revision": "abc123"}

        client = await aiohttp_client(create_ops_app(Readiness({"policy": check})))
        assert (await client.get("/healthz")).status == 200
        resp = await client.get("/readyz")
        assert resp.status == 503 and (await resp.json())["checks"]["policy"] == {"ok": False, "revision": "abc123"}
        state["ok"] = True
        resp = await client.get("/readyz")
        assert resp.status == 200 and (await resp.json())["ready"] is True

    async def test_failing_check_means_not_ready(self, aiohttp_client):
        """A check that raises makes the gateway not ready without exposing the error."""

        async def broken():
            raise RuntimeError("db password in message")

        client = await aiohttp_client(create_ops_app(Readiness({"state": broken})))
        resp = await client.get("/readyz")
        body = await resp.text()
        assert resp.status == 503 and "password" not in body
