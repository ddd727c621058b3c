"""A2A send, stream and agent card, the agent registry, and what the recorder keeps of A2A calls."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sidecar.dev.devstack import Devstack, start_devstack
from tests.support.devstack import Api


def rpc(text: str, method: str = "message/send", context_id: str | None = None, rpc_id: Any = 7) -> dict[str, Any]:
    """A JSON-RPC 2.0 A2A request carrying one user text."""
    message: dict[str, Any] = {
        "kind": "message",
        "messageId": "m-1",
        "role": "user",
        "parts": [{"kind": "text", "text": text}],
    }
    if context_id:
        message["contextId"] = context_id
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {"message": message}}


def reply_text(body: Any) -> str:
    """The text of a message/send result."""
    return str(body["result"]["parts"][0]["text"])


async def stream_events(api: Api, path: str, body: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """POST a message/stream and collect the data events."""
    async with api.http.post(api.base + path, json=body) as resp:
        raw = (await resp.read()).decode()
        ctype = resp.headers.get("Content-Type")
    chunks = [c for c in raw.split("\n\n") if c]
    assert all(c.startswith("data: ") for c in chunks)
    return ctype, [json.loads(c.removeprefix("data: ")) for c in chunks]


class TestSend:
    @pytest.mark.parametrize("path", ["/api/a2a/kagent/helper", "/api/a2a/kagent/helper/"])
    async def test_send_answers_a_message_naming_the_agent(self, sqlite_api: Api, path: str) -> None:
        """message/send answers a JSON-RPC result message that names the agent and echoes the text."""
        status, body = await sqlite_api.json("POST", path, rpc("hello there"))
        assert status == 200 and body["jsonrpc"] == "2.0" and body["id"] == 7
        assert body["result"]["kind"] == "message" and body["result"]["role"] == "agent"
        assert reply_text(body) == "kagent/helper received: hello there"

    @pytest.mark.parametrize(
        ("raw", "code"),
        [
            (b"{not json", -32700),
            (b'{"jsonrpc": "2.0", "params": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", -32700),
            (b'{"jsonrpc": "1.0", "method": "message/send"}', -32600),
            (json.dumps(rpc("x", method="tasks/cancel")).encode(), -32601),
            (b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}', -32602),
        ],
    )
    async def test_bad_calls_get_json_rpc_errors(self, sqlite_api: Api, raw: bytes, code: int) -> None:
        """Malformed or unsupported calls answer JSON-RPC error objects."""
        status, _c, body = await sqlite_api.call("POST", "/api/a2a/kagent/helper/", raw=raw)
        assert status == 200 and json.loads(body)["error"]["code"] == code

    async def test_other_methods_on_the_rpc_path_are_405(self, sqlite_api: Api) -> None:
        """Only POST reaches the JSON-RPC endpoint."""
        assert (await sqlite_api.call("GET", "/api/a2a/kagent/helper/"))[0] == 405


class TestStream:
    async def test_stream_sends_several_events_ending_with_a_final_one(self, sqlite_api: Api) -> None:
        """message/stream answers text/event-stream: task, working, chunks, then a final completed status."""
        ctype, events = await stream_events(sqlite_api, "/api/a2a/kagent/helper/", rpc("stream me", "message/stream"))
        assert ctype == "text/event-stream"
        results = [e["result"] for e in events]
        assert [r["kind"] for r in results] == [
            "task",
            "status-update",
            "artifact-update",
            "artifact-update",
            "status-update",
        ]
        assert results[-1]["final"] is True and results[-1]["status"]["state"] == "completed"
        chunks = "".join(r["artifact"]["parts"][0]["text"] for r in results if r["kind"] == "artifact-update")
        assert chunks == "kagent/helper received: stream me"
        assert all(e["id"] == 7 for e in events)

    async def test_a_lone_surrogate_is_read_as_go_reads_it(self, sqlite_api: Api) -> None:
        """An unpaired surrogate escape in the text becomes U+FFFD, as Go's decoder makes it; the stream completes."""
        _, events = await stream_events(
            sqlite_api, "/api/a2a/kagent/helper/", rpc("half \ud800 pair", "message/stream")
        )
        final = events[-1]["result"]
        assert final["final"] is True
        assert final["status"]["message"]["parts"][0]["text"] == "kagent/helper received: half \ufffd pair"


class TestCard:
    async def test_card_describes_the_agent(self, sqlite_api: Api) -> None:
        """The well-known agent card names the agent, its URL and streaming support."""
        status, card = await sqlite_api.json("GET", "/api/a2a/kagent/helper/.well-known/agent-card.json")
        assert status == 200 and card["name"] == "helper"
        assert card["url"] == f"{sqlite_api.base}/api/a2a/kagent/helper/"
        assert card["capabilities"]["streaming"] is True


@pytest.fixture
async def registry_api(http: aiohttp.ClientSession) -> AsyncIterator[Api]:
    """A stand-in where only kagent/helper and the sandbox kagent/box exist."""
    ds = await start_devstack(agents={"kagent/helper", "sandboxes/kagent/box"}, stream_delay_s=0)
    try:
        yield Api(http, ds.kagent_url)
    finally:
        await ds.stop()


class TestRegistry:
    @pytest.mark.parametrize(
        ("path", "status", "text"),
        [
            ("/api/a2a/kagent/helper/", 200, None),
            ("/api/a2a/kagent/other/", 404, "Agent kagent/other not found\n"),
            ("/api/a2a/other/helper/.well-known/agent-card.json", 404, "Agent other/helper not found\n"),
            ("/api/a2a-sandboxes/kagent/box/", 200, None),
            ("/api/a2a-sandboxes/kagent/helper/", 404, "Agent sandboxes/kagent/helper not found\n"),
        ],
    )
    async def test_unregistered_agents_get_kagents_404_text(
        self, registry_api: Api, path: str, status: int, text: str | None
    ) -> None:
        """With a registry, unknown agents answer 404 `Agent <key> not found` as plain text."""
        method = "GET" if path.endswith(".json") else "POST"
        got, ctype, body = await registry_api.call(method, path, rpc("hi"))
        assert got == status
        if text is not None:
            assert (ctype, body.decode()) == ("text/plain; charset=utf-8", text)


class TestRecording:
    async def test_a2a_calls_record_identity_headers_and_query(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """Each A2A call records the agent, X-User-Id, X-Agent-Name, Authorization presence and user_id query."""
        await sqlite_api.call(
            "POST",
            "/api/a2a/kagent/helper/?user_id=q-user",
            rpc("hi"),
            headers={"X-User-Id": "h-user", "X-Agent-Name": "caller", "Authorization": "Bearer t"},
        )
        await sqlite_api.call("POST", "/api/a2a/kagent/helper", rpc("hi"))
        first, second = sqlite_stack.recorder.of_kind("a2a")
        assert (
            first.agent,
            first.user_id_header,
            first.agent_name_header,
            first.authorization_present,
            first.user_id_query,
        ) == ("kagent/helper", "h-user", "caller", True, "q-user")
        assert (second.user_id_header, second.authorization_present, second.user_id_query) == (None, False, None)
