"""The one kagent memory client: every outcome of save, search, list and delete, over real HTTP.

The round trip runs against the stand-in and against kagent v0.9.11 itself in both auth modes.
The failure outcomes run against a small hostile server that answers each call the way a broken
or compromised controller might: an error body quoting the row, a 201 without an id, a truncated
answer, silence, a reset, a closed port. Whatever it sends, the caller gets a typed outcome with a
status at most, and the row's text reaches no log line, metric, span or outcome.
"""

from __future__ import annotations

import ast
import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sidecar.contentstore.adapters import AdapterError, RestAdapter
from sidecar.contentstore.kagent import Created, Deleted, Found, KagentMemory, Rejected, Unknown, namespace_query
from sidecar.contentstore.reembed import Reembedder
from sidecar.contentstore.rotator import Rotator
from sidecar.dev.devstack.pg import PgServer
from sidecar.dev.devstack.realkagent import AuthMode
from sidecar.dev.devstack.vectors import embed_text
from sidecar.reasons import Reason
from sidecar.settings import UpstreamSettings
from sidecar.upstream import KagentBearer, Upstream, make_session
from tests.support.sentinel import capture_sinks, make_sentinel
from tests.support.upstream import Upstream as Kagent
from tests.support.upstream import start_stack

APP = "kagent__NS__helper"
KEY = "mgs1.scope-a.1"


@asynccontextmanager
async def client(url: str, *, timeout_s: float = 10.0, auth_mode: AuthMode = "unsecure") -> AsyncIterator[KagentMemory]:
    cfg = UpstreamSettings(controller_url=url, kagent_auth_mode=auth_mode)
    bearer = KagentBearer(cfg)
    session = make_session(cfg, pool_size=4, total_timeout_s=timeout_s)
    try:
        yield KagentMemory(Upstream("kagent", url, session), lambda: bearer.headers("memgov", 1_900_000_000))
    finally:
        await session.close()


class TestRoundTrip:
    @pytest.mark.kagent
    async def test_save_search_list_delete(self, upstream: Kagent, pg_server: PgServer, tmp_path: Path) -> None:
        stack = await start_stack(upstream, pg_server=pg_server, log_dir=tmp_path)
        try:
            async with client(stack.kagent_url, auth_mode=upstream.auth_mode) as kagent:
                vector = embed_text("lives in Lisbon")
                saved = await kagent.save(APP, KEY, "lives in Lisbon", vector, 7)
                assert isinstance(saved, Created)
                found = await kagent.search(APP, KEY, vector, 5, 0)
                assert isinstance(found, Found) and [r["id"] for r in found.rows] == [saved.id]
                listed = await kagent.list(APP, KEY)
                assert isinstance(listed, Found)
                assert [(r["id"], r["content"]) for r in listed.rows] == [(saved.id, "lives in Lisbon")]
                assert await kagent.list(APP, "mgs1.scope-b.1") == Found([], [])  # another namespace holds nothing
                assert await kagent.delete(APP, KEY) == Deleted()
                assert await kagent.list(APP, KEY) == Found([], [])
        finally:
            await stack.stop()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def hostile(handler: Handler) -> AsyncIterator[tuple[str, list[web.Request]]]:
    """A controller that answers every memory route with ``handler``; the requests it saw."""
    seen: list[web.Request] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        await request.read()
        seen.append(request)
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/"), seen
    finally:
        await server.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _calls(kagent: KagentMemory) -> list[object]:
    vector = [0.5, 0.25]
    return [
        await kagent.save(APP, KEY, "text", vector, 7),
        await kagent.search(APP, KEY, vector, 5, 0),
        await kagent.list(APP, KEY),
        await kagent.delete(APP, KEY),
    ]


class TestOutcomes:
    async def test_an_error_body_is_a_status_and_nothing_else(self) -> None:
        row = make_sentinel("kagent-error")

        async def fail(_: web.Request) -> web.Response:
            return web.json_response({"error": f"duplicate key: content={row}"}, status=500)

        with capture_sinks() as sinks:
            async with hostile(fail) as (url, _), client(url) as kagent:
                outcomes = await _calls(kagent)
        assert outcomes == [Rejected(500)] * 4
        sinks.extra.append(repr(outcomes))
        sinks.assert_clean(row)

    @pytest.mark.parametrize(
        ("body", "status", "expected"),
        [
            # A 201 names a row that exists: without its id the save's outcome is unknown, not refused.
            (b'{"status":"ok"}', 201, [Unknown(sent=True), Rejected(201), Rejected(201), Rejected(201)]),
            (b"not json", 201, [Unknown(sent=True), Rejected(201), Rejected(201), Rejected(201)]),
            (b'{"id": 7}', 201, [Unknown(sent=True), Rejected(201), Rejected(201), Rejected(201)]),
            # A list is what search and list need; delete needs 200 only.
            (b'[{"id":"r1","content":"c"},{"content":"no id"},3]', 200, None),
            (b'{"id":"r1"}', 200, [Rejected(200), Rejected(200), Rejected(200), Deleted()]),
        ],
    )
    async def test_answers_that_are_not_what_the_call_needs(
        self, body: bytes, status: int, expected: list[object] | None
    ) -> None:
        async def answer(_: web.Request) -> web.Response:
            return web.Response(body=body, status=status, content_type="application/json")

        async with hostile(answer) as (url, _), client(url) as kagent:
            outcomes = await _calls(kagent)
        if expected is None:
            rows = [{"id": "r1", "content": "c"}]
            expected = [Rejected(200), Found(rows, ["r1"]), Found(rows, ["r1"]), Deleted()]
        assert outcomes == expected

    async def test_silence_is_an_unknown_outcome_that_was_sent(self) -> None:
        async def hang(_: web.Request) -> web.Response:
            await asyncio.sleep(30)
            return web.Response()

        async with hostile(hang) as (url, _), client(url, timeout_s=0.3) as kagent:
            outcomes = await _calls(kagent)
        assert outcomes == [Unknown(sent=True, timeout=True)] * 4

    async def test_a_reset_mid_answer_is_an_unknown_outcome_that_was_sent(self) -> None:
        async def cut(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(status=201, headers={"Content-Length": "100"})
            await resp.prepare(request)
            await resp.write(b'{"id":')
            assert request.transport is not None
            request.transport.close()
            return resp

        async with hostile(cut) as (url, _), client(url) as kagent:
            outcomes = await _calls(kagent)
        assert all(isinstance(o, Unknown) and o.sent for o in outcomes), outcomes

    async def test_a_closed_port_was_never_sent(self) -> None:
        async with client(f"http://127.0.0.1:{closed_port()}") as kagent:
            outcomes = await _calls(kagent)
        assert outcomes == [Unknown(sent=False)] * 4


class TestWire:
    async def test_what_kagent_is_sent(self) -> None:
        """Bodies from the checked values; the caller's copies of the names and the length are replaced."""

        async def created(request: web.Request) -> web.Response:
            if request.method == "POST":
                return web.json_response({"id": "r1"}, status=201)
            return web.json_response([])

        caller = {"X-User-Id": "else", "X-Agent-Name": "other", "Content-Length": "3", "Authorization": "Bearer t"}
        async with hostile(created) as (url, seen), client(url, auth_mode="trusted-proxy") as kagent:
            assert await kagent.save(APP, KEY, "text", [0.5], 7, headers=caller) == Created("r1")
            assert await kagent.list(APP, KEY) == Found([], [])
        save, listing = seen
        assert save.path == "/api/memories/sessions" and save.headers["Authorization"] == "Bearer t"
        assert (save.headers["X-User-Id"], save.headers["X-Agent-Name"]) == (KEY, APP)
        assert save.headers["Content-Type"] == "application/json"
        body: dict[str, Any] = await save.json()
        assert body == {"agent_name": APP, "user_id": KEY, "content": "text", "vector": [0.5], "ttl_days": 7}
        # memgov's own call: its own bearer, the namespace in the query only.
        assert listing.path_qs == namespace_query(APP, KEY)
        assert listing.headers["Authorization"].startswith("Bearer ") and listing.headers["Authorization"] != "Bearer t"
        assert "X-User-Id" not in listing.headers


class TestUsers:
    """The erasure adapter and the rotation turn outcomes into their own codes."""

    async def test_rest_adapter_and_rotator_codes(self) -> None:
        async def fail(_: web.Request) -> web.Response:
            return web.Response(status=503)

        async with hostile(fail) as (url, _), client(url) as kagent:
            rest = RestAdapter(kagent)
            rotator = Rotator(kagent, Reembedder(make_session(UpstreamSettings()), "http://127.0.0.1:1", None), {})
            try:
                with pytest.raises(AdapterError) as deleted:
                    await rest.delete_namespace(APP, KEY)
                with pytest.raises(AdapterError) as remaining:
                    await rest.remaining(APP, KEY)
                with pytest.raises(AdapterError) as copied:
                    await rotator.save(APP, KEY, "text", [0.5], 7)
            finally:
                await rotator.close()
        assert (deleted.value.reason, remaining.value.reason, copied.value.reason) == (
            Reason.ERASURE_FAILED,
            Reason.UPSTREAM_ERROR,
            Reason.UPSTREAM_ERROR,
        )
        async with client(f"http://127.0.0.1:{closed_port()}") as kagent:
            with pytest.raises(AdapterError) as unreachable:
                await RestAdapter(kagent).delete_namespace(APP, KEY)
        assert unreachable.value.reason is Reason.UPSTREAM_UNAVAILABLE

    async def test_a_rotation_copy_with_an_unknown_outcome(self) -> None:
        async def hang(_: web.Request) -> web.Response:
            await asyncio.sleep(30)
            return web.Response()

        async with hostile(hang) as (url, _), client(url, timeout_s=0.3) as kagent:
            rotator = Rotator(kagent, Reembedder(make_session(UpstreamSettings()), "http://127.0.0.1:1", None), {})
            try:
                # Sent and never answered: the copy may still land, and the caller is told so.
                assert await rotator.save(APP, KEY, "text", [0.5], 7) == Unknown(sent=True, timeout=True)
            finally:
                await rotator.close()


class TestOneClient:
    def test_only_the_client_names_kagents_memory_paths(self) -> None:
        """No other runtime module spells a memory path: whatever reaches kagent's memory API goes through
        KagentMemory. The data plane's route table classifies incoming paths, and the drill and dev
        tooling are clients of memgov's own data plane."""
        root = Path(__file__).resolve().parents[2] / "sidecar"
        allowed = {"contentstore/kagent.py", "routes.py"}
        spelled = set()
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).as_posix()
            if rel in allowed or rel.startswith(("dev/", "drill/")):
                continue
            tree = ast.parse(path.read_text())
            prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}  # docstrings
            for node in ast.walk(tree):
                text = node.value if isinstance(node, ast.Constant) and id(node) not in prose else None
                if isinstance(text, str) and "/api/memories" in text:
                    spelled.add(rel)
        assert spelled == set()
