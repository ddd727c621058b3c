"""The transparent data plane: relay fidelity, streaming, limits, upstream failures, error bodies."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from yarl import URL

from sidecar.proxy import create_data_app
from sidecar.reasons import REASON_VALUES
from tests.support.echo import ECHO, Seen, create_echo_app
from tests.support.gateway import gateway, gateway_settings
from tests.support.pg import free_port
from tests.support.sentinel import capture_sinks, make_sentinel


@pytest.fixture
async def echo(aiohttp_server):
    return await aiohttp_server(create_echo_app())


@pytest.fixture
async def client():
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield session


def _url(server) -> str:
    return str(server.make_url("")).rstrip("/")


def _relayed(server) -> list[Seen]:
    """What reached the upstream on a client's behalf: memgov's own readings of kagent's release
    (``GET /version`` at start and periodically) left out."""
    return [s for s in server.app[ECHO].seen if not (s.method == "GET" and s.raw_path == "/version")]


class TestTransparency:
    @pytest.mark.parametrize(
        ("method", "path", "body"),
        [
            ("GET", "/api/sessions?user_id=alice%40x&limit=5", b""),
            ("POST", "/api/sessions", b'{"agent_ref":"kagent/a","name":"n"}'),
            ("PUT", "/api/sessions/abc%20def", b"\x00\x01binary\xff"),
            ("DELETE", "/api/tasks/t-1", b""),
            ("GET", "/api/modelproviderconfigs/memories", b""),
            ("POST", "/api/a2a/kagent/plain-agent/", b'{"jsonrpc":"2.0","method":"message/send","id":1}'),
            ("PATCH", "/some/unknown/path?x=%2F", b"abc"),
        ],
    )
    async def test_request_reaches_upstream_byte_for_byte(self, echo, client, method, path, body):
        """Method, raw path and query, body bytes and end-to-end headers arrive unchanged."""
        async with gateway(_url(echo)) as gw:
            headers = {"X-User-Id": "@alice:example.org", "X-Custom": "v1", "Content-Type": "application/x-test"}
            url = URL(gw.data_url + path, encoded=True)
            async with client.request(method, url, data=body or None, headers=headers) as resp:
                got = await resp.read()
                assert resp.status == 200
                assert resp.headers["X-Upstream"] == "echo"
                assert resp.headers["Set-Cookie"] == "a=b; Path=/"
        seen = _relayed(echo)[-1]
        assert (seen.method, seen.raw_path, seen.body) == (method, path, body)
        hdrs = {k.lower(): v for k, v in seen.headers}
        assert hdrs["x-user-id"] == "@alice:example.org" and hdrs["x-custom"] == "v1"
        assert got == (body or b"{}")

    async def test_hop_by_hop_headers_are_not_forwarded(self, echo, client):
        """Connection-scoped headers (and those Connection names) stop at the gateway."""
        async with gateway(_url(echo)) as gw:
            headers = {
                "Connection": "keep-alive, X-Drop-Me",
                "X-Drop-Me": "1",
                "Keep-Alive": "timeout=5",
                "Proxy-Authorization": "Basic abc",
                "X-Keep": "yes",
            }
            async with client.get(gw.data_url + "/api/agents", headers=headers) as resp:
                assert resp.status == 200
        names = {k.lower() for k, _ in _relayed(echo)[-1].headers}
        assert "x-keep" in names
        assert not names & {"x-drop-me", "keep-alive", "proxy-authorization"}

    async def test_gateway_adds_no_client_headers(self, echo, client):
        """No Accept-Encoding, User-Agent or Content-Type is invented for the client."""
        async with gateway(_url(echo)) as gw:
            async with client.get(
                gw.data_url + "/api/agents", skip_auto_headers=["User-Agent", "Accept-Encoding", "Accept"]
            ) as resp:
                assert resp.status == 200
        names = {k.lower() for k, _ in _relayed(echo)[-1].headers}
        assert not names & {"accept-encoding", "user-agent", "content-type", "accept"}

    @pytest.mark.parametrize("status", [201, 204, 400, 404, 409, 500, 503])
    async def test_passthrough_status_and_body_are_relayed(self, echo, client, status):
        """Non-memory routes relay upstream status and body unchanged, errors included."""
        body = json.dumps({"error": True, "message": "upstream says no"})
        async with gateway(_url(echo)) as gw:
            async with client.get(
                gw.data_url + "/api/agents/kagent/a", headers={"X-Echo-Status": str(status), "X-Echo-Body": body}
            ) as resp:
                assert resp.status == status
                text = await resp.text()
        assert text == ("" if status == 204 else body)

    async def test_large_chunked_body_streams_both_ways(self, echo, client):
        """An 8 MiB chunked upload arrives whole and comes back whole."""
        payload = bytes(range(256)) * (8 * 4096)

        async def gen():
            for i in range(0, len(payload), 65536):
                yield payload[i : i + 65536]

        async with gateway(_url(echo), listen={"max_body_bytes": 16 * 1024 * 1024}) as gw:
            async with client.post(gw.data_url + "/api/feedback", data=gen()) as resp:
                got = await resp.read()
        assert _relayed(echo)[-1].body == payload
        assert got == payload

    @pytest.mark.parametrize("path", ["/health", "/version"])
    async def test_health_and_version_are_untouched(self, echo, client, path):
        """/health and /version pass through with their upstream answer."""
        async with gateway(_url(echo)) as gw:
            async with client.get(gw.data_url + path, headers={"X-Probe": "client"}) as resp:
                assert resp.status == 200
        # The client's request, told from memgov's own reading of /version by the header it carried.
        relayed = [r for r in echo.app[ECHO].seen if ("x-probe", "client") in {(k.lower(), v) for k, v in r.headers}]
        assert [r.raw_path for r in relayed] == [path]


class TestStreaming:
    async def test_first_sse_event_arrives_before_upstream_finishes(self, echo, client):
        """The client reads event 1 while the upstream is still holding events 2 and 3."""
        state = echo.app[ECHO]
        async with gateway(_url(echo)) as gw:
            url = gw.data_url + "/api/a2a/kagent/plain/stream-test"
            async with client.post(url, json={"method": "message/stream"}) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), timeout=10)
                assert first == b'data: {"n": 1}\n\n'
                assert not state.sse_release.is_set()  # upstream has not been allowed to finish yet
                state.sse_release.set()
                rest = await resp.read()
        assert rest == b'data: {"n": 2}\n\ndata: {"n": 3, "final": true}\n\n'

    async def test_websocket_frames_are_relayed(self, echo, client):
        """WebSocket passthrough routes relay text and binary frames both ways."""
        async with gateway(_url(echo)) as gw:
            async with client.ws_connect(gw.data_url + "/api/sandbox/ssh") as ws:
                await ws.send_str("hello")
                assert (await ws.receive()).data == "echo:hello"
                await ws.send_bytes(b"abc")
                assert (await ws.receive()).data == b"cba"

    async def test_websocket_upgrade_on_memory_route_is_refused(self, echo, client):
        """A memory route never upgrades: 403 route_denied."""
        async with gateway(_url(echo)) as gw:
            with pytest.raises(aiohttp.WSServerHandshakeError) as err:
                await client.ws_connect(gw.data_url + "/api/memories?agent_name=a&user_id=b")
        assert err.value.status == 403


class TestLimitsAndFailures:
    async def test_declared_oversize_body_is_413(self, echo, client):
        """A Content-Length above the limit is refused before anything is forwarded."""
        async with gateway(_url(echo), listen={"max_body_bytes": 2048}) as gw:
            async with client.post(gw.data_url + "/api/sessions", data=b"x" * 4096) as resp:
                assert resp.status == 413
                assert (await resp.json())["error"] == "body_too_large"
        assert _relayed(echo) == []

    async def test_chunked_oversize_body_is_413(self, echo, client):
        """A chunked body that grows past the limit is cut off with 413."""

        async def gen():
            for _ in range(10):
                yield b"y" * 1024

        async with gateway(_url(echo), listen={"max_body_bytes": 4096}) as gw:
            async with client.post(gw.data_url + "/api/memories/search", data=gen()) as resp:
                assert resp.status == 413
                assert (await resp.json())["error"] == "body_too_large"

    async def test_upstream_down_is_502(self, client):
        """A refused connection becomes 502 upstream_unavailable with a decision id."""
        async with gateway(f"http://127.0.0.1:{free_port()}") as gw:
            async with client.get(gw.data_url + "/api/agents") as resp:
                assert resp.status == 502
                body = await resp.json()
        assert body["error"] == "upstream_unavailable" and body["decision_id"].startswith("d_")

    async def test_upstream_silence_is_504(self, echo, client):
        """An upstream that stops answering past the read timeout becomes 504."""
        async with gateway(_url(echo), upstream={"read_timeout_s": 0.2}) as gw:
            async with client.get(gw.data_url + "/api/sessions/stall") as resp:
                assert resp.status == 504
                assert (await resp.json())["error"] == "upstream_unavailable"
        echo.app[ECHO].slow.set()


class TestContentFreeErrors:
    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("POST", "/api/memories/sessions"),
            ("POST", "/api/memories/sessions/batch"),
            ("POST", "/api/memories/search"),
            ("GET", "/api/memories?agent_name=a&user_id=b"),
            ("DELETE", "/api/memories?agent_name=a&user_id=b"),
        ],
    )
    async def test_content_relay_replaces_upstream_error_bodies(self, echo, aiohttp_server, client, method, path):
        """The content-safe relay under the governed handlers never passes kagent's 4xx/5xx text on."""
        secret = make_sentinel("ctl")
        bare = await aiohttp_server(create_data_app(gateway_settings(_url(echo))))
        with capture_sinks() as sinks:
            body = json.dumps({"error": f"failed to save memory: ERROR: {secret}"})
            async with client.request(
                method, _url(bare) + path, json={"x": 1}, headers={"X-Echo-Status": "500", "X-Echo-Body": body}
            ) as resp:
                text = await resp.text()
                sinks.record(resp.status, resp.headers.items(), text)
                assert resp.status == 502
        got = json.loads(text)
        assert got["error"] == "upstream_error" and got["status"] == 500
        assert set(got) == {"error", "status", "decision_id"}
        sinks.assert_clean(secret)

    @pytest.mark.parametrize(
        ("method", "path", "reason"),
        [
            ("POST", "/api/memories%2Fsearch", "route_denied"),
            ("POST", "/API/memories/search", "route_denied"),
            ("POST", "/api/memories/search/", "route_denied"),
            ("GET", "/api/memories/", "route_denied"),
            ("POST", "/api/crewai/memory", "ungoverned_store"),
            ("GET", "/api/langgraph/checkpoints", "ungoverned_store"),
        ],
    )
    async def test_bypass_spellings_and_ungoverned_stores_are_refused(self, echo, client, method, path, reason):
        """Look-alike memory paths and ungoverned stores are refused without reaching kagent."""
        async with gateway(_url(echo)) as gw:
            async with client.request(method, URL(gw.data_url + path, encoded=True)) as resp:
                assert resp.status == 403
                body = await resp.json()
        assert body["error"] == reason and body["error"] in REASON_VALUES
        assert _relayed(echo) == []

    async def test_every_log_line_is_allow_listed_json(self, echo, client):
        """Request logs carry route templates, never raw paths, queries or header values."""
        secret = make_sentinel("path")
        with capture_sinks() as sinks:
            async with gateway(_url(echo)) as gw:
                async with client.get(
                    gw.data_url + f"/api/sessions/{secret[:16]}?user_id={secret[:16]}",
                    headers={"X-User-Id": secret[:16]},
                ) as resp:
                    assert resp.status == 200
        lines = [json.loads(line) for line in sinks.log_stream.getvalue().splitlines()]
        done = [line for line in lines if line["event"] == "request.done"]
        assert done and done[-1]["route"] == "/api/sessions/{id}" and done[-1]["route_class"] == "passthrough"
        assert secret[:16] not in sinks.log_stream.getvalue()
