"""kagent v0.10's share links through memgov (session.share).

A memory agent's conversation belongs to a session key; a link to it, made through memgov or
before memgov was there, never opens it. An ordinary user's session is shared and opened as
kagent allows. A share token reaches kagent only on a request a decision allowed. Each test runs
on the v0.10 stand-in and on kagent v0.10's own server in both auth modes.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import aiohttp
import pytest

from sidecar.dev.devstack.realkagent import AUTH_MODES
from tests.support.sentinel import capture_sinks, make_sentinel
from tests.support.stack import AGENT, ALICE, BOB, Stack
from tests.support.upstream import bridge_headers

pytestmark = pytest.mark.kagent(releases=("0.10",), standins=("0.10",), auth_modes=AUTH_MODES)

#: An agent without memory: its A2A calls are relayed, and a share token there names a session.
PLAIN = "kagent/plain"


async def _call(
    stack: Stack, method: str, path: str, headers: dict[str, str], body: Any = None, *, direct: bool = False
) -> tuple[int, Any, dict[str, str]]:
    """One request through memgov's data plane, or straight to kagent (``direct``: what memgov never sees)."""
    base = stack.dev.kagent_url if direct else stack.gw.data_url
    data = None if body is None else json.dumps(body).encode()
    sent = {**headers, **({"Content-Type": "application/json"} if data else {})}
    async with stack.http.request(method, base + path, data=data, headers=sent) as resp:
        raw = await resp.read()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw
        return resp.status, parsed, dict(resp.headers)


def _user(stack: Stack, user: str) -> dict[str, str]:
    """What the UI sends kagent for ``user`` in this auth mode."""
    return {"X-User-Id": user, **bridge_headers(stack.upstream, user)}


def _runtime(stack: Stack, key: str) -> dict[str, str]:
    """Acting as the session key, the way kagent sees a conversation memgov keyed: the key as
    ``X-User-Id`` and, in trusted-proxy mode, a bearer naming it (what a governed invocation carries)."""
    return {"X-User-Id": key, **stack.parts.bearer.headers(key, int(stack.clock().timestamp()))}


async def _key(stack: Stack) -> str:
    """alice's consented scope with the memory agent, and the session key of her conversation."""
    await stack.scope()
    return await stack.session_key()


async def _session(stack: Stack, headers: dict[str, str], agent: str = AGENT, name: str = "chat") -> str:
    """A session of ``agent`` created as ``headers``' user; its id."""
    session_id = f"ctx-{secrets.token_hex(6)}"
    status, answer, _ = await _call(
        stack, "POST", "/api/sessions", headers, {"agent_ref": agent, "id": session_id, "name": name}, direct=True
    )
    assert status == 201, answer
    return session_id


async def _share_directly(stack: Stack, session_id: str, headers: dict[str, str]) -> str:
    """A link kagent made without memgov (before it was deployed): its token."""
    status, answer, _ = await _call(
        stack, "POST", f"/api/sessions/{session_id}/shares", headers, {"read_only": False}, direct=True
    )
    assert status == 201, answer
    return str(answer["data"]["token"])


def _refused(answer: tuple[int, Any, dict[str, str]]) -> None:
    status, body, headers = answer
    assert status == 403, body
    assert body["error"] == "share_refused"
    assert headers["X-Memgov-Decision"].startswith("deny")


def _rpc(context_id: str) -> dict[str, Any]:
    message = {"role": "user", "messageId": secrets.token_hex(4), "parts": [{"kind": "text", "text": "hi"}]}
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"message": {**message, "contextId": context_id}},
    }


class TestMemorySessions:
    async def test_a_memory_agents_conversation_gets_no_link(self, stack: Stack) -> None:
        """The runtime, acting as the session key, asks for a link: refused on every verb, and kagent has none."""
        key = await _key(stack)
        session_id = await _session(stack, _runtime(stack, key))
        for method, path in (
            ("POST", f"/api/sessions/{session_id}/shares"),
            ("GET", f"/api/sessions/{session_id}/shares"),
            ("DELETE", f"/api/sessions/{session_id}/shares/anything"),
        ):
            _refused(await _call(stack, method, path, _runtime(stack, key), {} if method == "POST" else None))
        status, listed, _ = await _call(
            stack, "GET", f"/api/sessions/{session_id}/shares", _runtime(stack, key), direct=True
        )
        assert status == 200 and not listed.get("data")

    async def test_a_link_made_without_memgov_opens_nothing_through_it(self, stack: Stack) -> None:
        """A visitor holding a link to a keyed conversation: refused on its session routes and on any A2A call."""
        key = await _key(stack)
        session_id = await _session(stack, _runtime(stack, key))
        token = await _share_directly(stack, session_id, _runtime(stack, key))
        visitor = {**_user(stack, BOB), "X-Share-Token": token}
        # kagent itself would show bob the conversation: the link is genuine.
        assert (await _call(stack, "GET", f"/api/sessions/{session_id}", visitor, direct=True))[0] == 200
        for path in (
            f"/api/sessions/{session_id}",
            f"/api/sessions/{session_id}/events",
            f"/api/sessions/{session_id}/tasks",
        ):
            _refused(await _call(stack, "GET", path, visitor))
        before = len(stack.dev.recorder.of_kind("a2a"))
        _refused(await _call(stack, "POST", f"/api/a2a/{PLAIN}/", visitor, _rpc(session_id)))
        status, body, _ = await _call(stack, "POST", f"/api/a2a/{AGENT}/", visitor, _rpc(session_id))
        assert (status, body["error"]) == (403, "share_refused")
        assert len(stack.dev.recorder.of_kind("a2a")) == before

    async def test_a_call_naming_two_sessions_or_spelling_one_twice_is_refused(self, stack: Stack) -> None:
        """Another agent's call with a token naming an ordinary session in one field and the keyed one in another,
        or the keyed one under a case-folded key kagent's decoder also reads: refused, kagent never asked."""
        key = await _key(stack)
        keyed = await _session(stack, _runtime(stack, key))
        token = await _share_directly(stack, keyed, _runtime(stack, key))
        ordinary = await _session(stack, _user(stack, ALICE), agent=PLAIN)
        visitor = {**_user(stack, BOB), "X-Share-Token": token}
        before = len(stack.dev.recorder.of_kind("a2a"))
        two = _rpc(keyed)
        two["params"]["contextId"] = ordinary
        _refused(await _call(stack, "POST", f"/api/a2a/{PLAIN}/", visitor, two))
        folded = _rpc(ordinary)
        raw = json.dumps(folded).replace('"parts"', f'"CONTEXTID": "{keyed}", "parts"')
        async with stack.http.post(
            f"{stack.gw.data_url}/api/a2a/{PLAIN}/", data=raw, headers={**visitor, "Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 400 and (await resp.json())["error"] == "bad_request"
        assert len(stack.dev.recorder.of_kind("a2a")) == before

    async def test_a_forged_owner_header_does_not_make_a_keyed_session_shareable(self, stack: Stack) -> None:
        """A caller naming itself the session key still meets the key as the owner kagent shows: refused."""
        key = await _key(stack)
        session_id = await _session(stack, _runtime(stack, key))
        _refused(await _call(stack, "POST", f"/api/sessions/{session_id}/shares", _user(stack, key), {}))


class TestOrdinarySessions:
    async def test_a_user_shares_their_session_and_a_visitor_opens_it(self, stack: Stack) -> None:
        """alice's own session: her link is made through memgov and bob reads her session with it."""
        session_id = await _session(stack, _user(stack, ALICE), agent=PLAIN)
        status, made, headers = await _call(
            stack, "POST", f"/api/sessions/{session_id}/shares", _user(stack, ALICE), {"read_only": True}
        )
        assert status == 201 and headers["X-Memgov-Decision"].startswith("forward"), made
        token = made["data"]["token"]
        status, listed, _ = await _call(stack, "GET", f"/api/sessions/{session_id}/shares", _user(stack, ALICE))
        assert status == 200 and [s["token"] for s in listed["data"]] == [token]
        status, shown, headers = await _call(
            stack, "GET", f"/api/sessions/{session_id}", {**_user(stack, BOB), "X-Share-Token": token}
        )
        assert status == 200 and headers["X-Memgov-Decision"].startswith("forward")
        assert shown["data"]["session"]["user_id"] == ALICE and shown["data"]["read_only"] is True
        status, _, _ = await _call(stack, "DELETE", f"/api/sessions/{session_id}/shares/{token}", _user(stack, ALICE))
        assert status == 200

    async def test_someone_elses_session_is_not_shared_through_memgov(self, stack: Stack) -> None:
        """bob asking for a link to alice's session: kagent does not show it to him, so memgov refuses."""
        session_id = await _session(stack, _user(stack, ALICE), agent=PLAIN)
        _refused(await _call(stack, "POST", f"/api/sessions/{session_id}/shares", _user(stack, BOB), {}))


class TestTokenNeverRelayed:
    @pytest.mark.parametrize("path", ["/api/agents", "/api/me", "/api/sessions", "/version"])
    async def test_a_token_on_any_other_route_never_reaches_kagent(self, stack: Stack, path: str) -> None:
        """kagent refuses an unknown token on every route it serves; through memgov the token is gone."""
        headers = {**_user(stack, ALICE), "X-Share-Token": "not-a-share"}
        assert (await _call(stack, "GET", path, headers, direct=True))[0] in (401, 403)
        status, _, _ = await _call(stack, "GET", path, headers)
        assert status == 200

    async def test_a_governed_memory_call_never_carries_a_token(self, stack: Stack) -> None:
        """A search with a token: memgov governs it and kagent never sees the token."""
        key = await _key(stack)
        status, _, headers = await stack.search(key, "anything", extra_headers={"X-Share-Token": "not-a-share"})
        assert status == 200 and headers["X-Memgov-Decision"].startswith("forward")
        assert all("not-a-share" not in json.dumps(dict(r.headers)) for r in stack.dev.recorder.requests)

    async def test_an_a2a_call_naming_no_session_loses_the_token(self, stack: Stack) -> None:
        """Another agent's call with a token but no contextId: relayed as the caller, token dropped."""
        body = _rpc("x")
        del body["params"]["message"]["contextId"]
        headers = {**_user(stack, ALICE), "X-Share-Token": "not-a-share"}
        status, answer, _ = await _call(stack, "POST", f"/api/a2a/{PLAIN}/", headers, body)
        assert status == 200, answer


class TestSentinel:
    async def test_what_kagent_answers_about_a_session_reaches_no_sink(self, stack: Stack) -> None:
        """The owner lookup reads the session (its name, its first event): none of it is logged, counted or audited."""
        secret = make_sentinel("session")
        key = await _key(stack)
        keyed = await _session(stack, _runtime(stack, key), name=secret)
        ordinary = await _session(stack, _user(stack, ALICE), agent=PLAIN, name=secret)
        with capture_sinks() as sinks:
            for session_id, headers in ((keyed, _runtime(stack, key)), (ordinary, _user(stack, ALICE))):
                status, answer, got = await _call(stack, "POST", f"/api/sessions/{session_id}/shares", headers, {})
                if status >= 400:
                    sinks.record(status, got.items(), json.dumps(answer))
            async with aiohttp.ClientSession() as http, http.get(stack.gw.ops_url + "/metrics") as resp:
                sinks.extra.append(await resp.text())
            store = stack.parts.store
            sinks.extra.append(repr(await store.audit_log.audit_rows(limit=1000)))
            sinks.extra.append(repr(await store.audit_log.refusal_counts()))
        sinks.assert_clean(secret)
