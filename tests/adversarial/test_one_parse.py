"""Family 3: what memgov checks is what it forwards (SPEC R-18).

The attacks: a body whose second reading differs from memgov's (duplicate keys, keys another
decoder matches case-insensitively, bytes after the value), and a request target memgov
classifies as one path while kagent routes it as another.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import pytest

from tests.support.adversarial import Target
from tests.support.harness import APP

BIG = "x" * 4000


async def _raw_request(url: str, request_line: str) -> tuple[int, bytes]:
    """Send a request line as written (no client library tidies it up); the status and body."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    writer.write(f"{request_line}\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


class TestEmbeddingBody:
    @pytest.mark.parametrize(
        "raw",
        [
            '{{"model": "m", "input": "a", "INPUT": [{}]}}'.format(", ".join([json.dumps(BIG)] * 40)),
            '{{"model": "m", "input": [{}], "input": "a"}}'.format(", ".join([json.dumps(BIG)] * 40)),
            '{"model": "m", "input": "a", "Input": ["b"]}',
            '{"model": "m", "input": "a"} {"input": ["b"]}',
        ],
    )
    async def test_an_ambiguous_body_never_reaches_the_provider(self, target: Target, raw: str) -> None:
        """Case-colliding or duplicate keys and trailing values are refused before any embedding work."""
        t = target
        await t.consented_scope()
        status, body, headers = await t.post(
            "/embeddings/team/helper/v1/embeddings",
            None,
            raw=raw.encode(),
            headers={"Content-Type": "application/json"},
        )
        assert (status, body["error"]) == (400, "bad_request")
        assert headers["X-Memgov-Decision"].startswith("deny; reason=bad_request")
        assert t.dev.embedding.calls == []

    async def test_the_provider_receives_only_what_was_checked(self, target: Target) -> None:
        """Fields memgov does not check (a free-text user id, anything unknown) are not forwarded."""
        t = target
        await t.consented_scope()
        status, _, _ = await t.post(
            "/embeddings/team/helper/v1/embeddings",
            {
                "model": "m",
                "input": ["hello"],
                "user": "@alice:example.org",
                "dimensions": 768,
                "extra": {"input": BIG},
            },
        )
        assert status == 200
        (call,) = t.dev.embedding.calls
        assert call.inputs == ("hello",) and call.body_keys == {"model", "input", "dimensions"}


class TestMemoryBody:
    @pytest.mark.parametrize(
        "mutate",
        [
            lambda b: b.replace('"user_id"', '"USER_ID": "mgs1.victim", "user_id"', 1),
            lambda b: b.replace('"agent_name"', '"agent_name": "other__NS__agent", "agent_name"', 1),
            lambda b: b + ' {"user_id": "mgs1.victim"}',
        ],
    )
    async def test_an_ambiguous_save_is_refused(self, target: Target, mutate) -> None:  # type: ignore[no-untyped-def]  # a fixture of the parametrized table
        """A save whose keys a case-insensitive or first-wins decoder would read differently is refused."""
        t = target
        await t.consented_scope()
        key = await t.session_key()
        raw = mutate(json.dumps(t.fact(key, "likes green tea")))
        status, body, _ = await t.post(
            "/api/memories/sessions",
            None,
            raw=raw.encode(),
            headers={"Content-Type": "application/json", "X-Agent-Name": APP},
        )
        assert (status, body["error"]) == (400, "bad_request")
        assert await t.rows() == []


class TestRequestTarget:
    @pytest.mark.parametrize(
        "line",
        [
            "GET /api/memories#?agent_name={app}&user_id=mgs1.x.1 HTTP/1.1",
            "GET http://kagent/api/memories?agent_name={app}&user_id=mgs1.x.1 HTTP/1.1",
            "DELETE http://kagent/api/memories?agent_name={app}&user_id=mgs1.x.1 HTTP/1.1",
        ],
    )
    async def test_a_target_kagent_could_read_differently_is_refused(self, target: Target, line: str) -> None:
        """Fragments and absolute forms get a clean 400 and never reach kagent."""
        t = target
        before = len(t.dev.recorder.requests)
        status, body = await _raw_request(t.gw.data_url, line.format(app=APP))
        assert (status, json.loads(body)["error"]) == (400, "bad_request")
        assert t.dev.recorder.requests[before:] == []

    @pytest.mark.parametrize("line", ["GET * HTTP/1.1", "OPTIONS * HTTP/1.1", "CONNECT 127.0.0.1:8083 HTTP/1.1"])
    async def test_asterisk_and_authority_forms_get_memgovs_own_answer(self, target: Target, line: str) -> None:
        """Even targets the HTTP parser or the router refuse are answered with a reason code, never with
        a text page that could quote the request, and never reach kagent."""
        before = len(target.dev.recorder.requests)
        status, body = await _raw_request(target.gw.data_url, line)
        assert status == 400 and set(json.loads(body)) == {"error", "decision_id"}
        assert target.dev.recorder.requests[before:] == []


class TestInvocationBody:
    @pytest.mark.parametrize(
        "raw",
        [
            '{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": ' + "[" * 5000 + "]" * 5000 + "}",
            '{"params": {"message": {"contextId": null, "contextId": "c1"}}}',
            '{"params": {"message": {"contextId": null, "ContextID": "c1"}}}',
        ],
    )
    async def test_an_ambiguous_invocation_goes_to_the_agent_without_memory(self, target: Target, raw: str) -> None:
        """An invocation memgov cannot read unambiguously is answered by the memory-disabled variant."""
        t = target
        await t.consented_scope()
        status, _, headers = await t.post(
            "/api/a2a/team/helper/",
            None,
            raw=raw.encode(),
            headers={
                "Content-Type": "application/json",
                "X-Memgov-Context": t.context(),
                "X-User-Id": "@alice:example.org",
            },
        )
        assert status == 200
        assert headers["X-Memgov-Decision"].startswith("rewrite_disabled; reason=bad_request")
        assert t.dev.recorder.of_kind("a2a")[-1].agent == "team/helper-nomem"
