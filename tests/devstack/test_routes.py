"""The stand-in routes like kagent's gorilla/mux router and echoes every other controller route."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from yarl import URL

from sidecar.dev.devstack import Devstack
from sidecar.dev.devstack.gomux import Mux, clean_path
from tests.support.devstack import Api


class TestMux:
    @pytest.mark.parametrize(
        ("path", "cleaned"),
        [
            ("/api/memories", "/api/memories"),
            ("/api//memories", "/api/memories"),
            ("/api/./memories/", "/api/memories/"),
            ("/api/x/../memories", "/api/memories"),
            ("/../api", "/api"),
            ("", "/"),
            ("//", "/"),
        ],
    )
    def test_clean_path_matches_go(self, path: str, cleaned: str) -> None:
        """Paths are cleaned like Go's path.Clean, keeping a trailing slash."""
        assert clean_path(path) == cleaned

    def test_a_later_route_with_the_right_method_wins_over_a_405(self) -> None:
        """A method mismatch on one route does not hide a later route that matches fully."""
        mux: Mux[str] = Mux()
        mux.add("/c/writes", "writes", ["POST"])
        mux.add("/c/{thread_id}", "thread", ["DELETE"])
        found = mux.resolve("DELETE", "/c/writes")
        assert (found.status, found.route.target if found.route else None, found.params) == (
            200,
            "thread",
            {"thread_id": "writes"},
        )
        assert mux.resolve("GET", "/c/writes").status == 405


class TestControllerRouting:
    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("GET", "/nope"),
            ("GET", "/api/memories/"),
            ("POST", "/api/memories/search/"),
            ("POST", "/api/memories/sessions/"),
            ("GET", "/api/unknown"),
            ("GET", "/api/sessions/a/b/c"),
        ],
    )
    async def test_unknown_paths_get_gos_plain_text_404(self, sqlite_api: Api, method: str, path: str) -> None:
        """Unknown paths and trailing slashes answer 404 `404 page not found` as text/plain."""
        assert await sqlite_api.call(method, path) == (404, "text/plain; charset=utf-8", b"404 page not found\n")

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("POST", "/api/memories"),
            ("PUT", "/api/memories"),
            ("GET", "/api/memories/search"),
            ("GET", "/api/memories/sessions/batch"),
            ("DELETE", "/health"),
            ("PATCH", "/api/sessions"),
        ],
    )
    async def test_known_paths_with_a_wrong_method_get_an_empty_405(
        self, sqlite_api: Api, method: str, path: str
    ) -> None:
        """A known path with the wrong method answers 405 with an empty body."""
        status, _ctype, body = await sqlite_api.call(method, path)
        assert (status, body) == (405, b"")

    @pytest.mark.parametrize(
        ("path", "location"),
        [
            ("/api//memories?agent_name=a&user_id=u", "/api/memories?agent_name=a&user_id=u"),
            ("/api/x/../memories", "/api/memories"),
        ],
    )
    async def test_unclean_paths_are_redirected(self, sqlite_api: Api, path: str, location: str) -> None:
        """Paths with // or .. get gorilla's 301 to the cleaned path, query kept."""
        async with sqlite_api.http.get(URL(sqlite_api.base + path, encoded=True), allow_redirects=False) as resp:
            assert (resp.status, resp.headers["Location"], await resp.read()) == (301, location, b"")

    @pytest.mark.parametrize(
        ("path", "body"),
        [
            ("/health", b'{"error":false,"data":{"status":"OK"},"message":"OK"}'),
            ("/version", b'{"kagent_version":"v0.9.11","git_commit":"14dcbfc","build_date":"2026-07-01"}'),
        ],
    )
    async def test_health_and_version_bodies(self, sqlite_api: Api, path: str, body: bytes) -> None:
        """/health and /version answer kagent's exact bytes."""
        assert await sqlite_api.call("GET", path) == (200, "application/json", body)


class TestEcho:
    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("GET", "/api/sessions?user_id=u&x=%20y"),
            ("POST", "/api/sessions/s-1/events"),
            ("DELETE", "/api/langgraph/checkpoints/writes"),
            ("PUT", "/api/agents"),
            ("GET", "/api/modelproviderconfigs/configured/openai/models"),
            ("POST", "/api/agentharnesses/ns/n/ws/deep"),
            ("POST", "/mcp/anything"),
            ("GET", "/api/crewai/memory?thread_id=t&q=x"),
        ],
    )
    async def test_other_routes_echo_the_request_byte_for_byte(self, sqlite_api: Api, method: str, path: str) -> None:
        """Non-memory routes answer kagent's envelope echoing method, path, raw query and exact body bytes."""
        body = b"\x00\xffraw \xe2\x82\xac bytes"
        status, ctype, raw = await sqlite_api.call(method, path, raw=body)
        data = json.loads(raw)
        assert (status, ctype, data["error"], data["message"]) == (200, "application/json", False, "devstack echo")
        echoed = data["data"]
        assert (echoed["method"], echoed["raw_path"], echoed["query"]) == (method, path, path.partition("?")[2])
        assert base64.b64decode(echoed["body_b64"]) == body

    async def test_a_forced_status_relays_an_error_body(self, sqlite_api: Api) -> None:
        """X-Devstack-Status forces the status and X-Devstack-Error the kagent-style error text."""
        status, _c, raw = await sqlite_api.call(
            "GET", "/api/agents", headers={"X-Devstack-Status": "503", "X-Devstack-Error": "SENTINEL-upstream-7"}
        )
        assert (status, json.loads(raw)) == (503, {"error": "SENTINEL-upstream-7"})

    async def test_every_request_is_recorded_with_headers_and_body(
        self, sqlite_api: Api, sqlite_stack: Devstack
    ) -> None:
        """The recorder keeps kind, method, raw path, headers and body of each request."""
        await sqlite_api.call("POST", "/api/sessions?user_id=u", raw=b"payload", headers={"X-Custom": "1"})
        await sqlite_api.call("GET", "/nope")
        api_req, miss = sqlite_stack.recorder.requests
        assert (api_req.kind, api_req.method, api_req.raw_path, api_req.body) == (
            "api",
            "POST",
            "/api/sessions?user_id=u",
            b"payload",
        )
        assert api_req.header("x-custom") == "1" and api_req.user_id_query == "u"
        assert (miss.kind, miss.raw_path) == ("unmatched", "/nope")

    async def test_wait_for_returns_once_enough_requests_arrived(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """Recorder.wait_for wakes when a matching request arrives."""
        waiter = asyncio.create_task(sqlite_stack.recorder.wait_for(lambda r: r.kind == "health", count=2))
        await sqlite_api.call("GET", "/health")
        await sqlite_api.call("GET", "/version")
        assert [r.raw_path for r in await waiter] == ["/health", "/version"]


class TestAdmin:
    @pytest.mark.parametrize(
        ("method", "path", "body", "status"),
        [
            ("POST", "/__devstack/clock", {"advance_s": "soon"}, 400),
            ("POST", "/__devstack/db-fault", {"ops": ["drop"]}, 400),
            ("POST", "/__devstack/runtime", {"memory_base_url": "http://x"}, 400),
            ("GET", "/__devstack/prune", None, 405),
            ("GET", "/__devstack/nothing", None, 404),
        ],
    )
    async def test_bad_admin_calls_are_refused(
        self, sqlite_api: Api, method: str, path: str, body: object, status: int
    ) -> None:
        """Malformed admin requests get 4xx and change nothing."""
        assert (await sqlite_api.call(method, path, body))[0] == status

    async def test_admin_calls_are_not_recorded(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """Test controls do not show up among the recorded controller requests."""
        await sqlite_api.call("POST", "/__devstack/prune")
        assert sqlite_stack.recorder.requests == []
