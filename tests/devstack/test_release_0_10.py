"""The stand-in's kagent v0.10.0-rc3 model: what changed for a gateway since v0.9.11.

Each answer here was read off v0.10.0-rc3 itself (tests/conformance/test_differential.py replays
the same kinds of request against both); these tests keep the model in the fast suite.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.dev.devstack import Devstack
from sidecar.dev.devstack.store import DbFault, NewMemory
from tests.support.devstack import Api, axis, save_body

ALICE = {"X-User-Id": "alice"}
BOB = {"X-User-Id": "bob"}
AGENT = {"X-Agent-Name": "team/helper"}
A2A = "/api/a2a/team/helper/"


async def _session(api: Api, session_id: str = "ctx-1", user: dict[str, str] = ALICE) -> None:
    body = {"agent_ref": "team/helper", "id": session_id}
    status, created = await api.json("POST", "/api/sessions", body, headers=user)
    assert status == 201, created


async def _share(api: Api, *, read_only: bool = True) -> str:
    status, created = await api.json(
        "POST", "/api/sessions/ctx-1/shares", None if read_only else {"read_only": False}, headers=ALICE
    )
    assert status == 201, created
    token: str = created["data"]["token"]
    return token


def _as_bob(token: str) -> dict[str, str]:
    return {**BOB, "X-Share-Token": token}


def _send(context: str, method: str = "message/send") -> dict[str, Any]:
    message = {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {**message, "contextId": context}}}


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}


class TestRoutes:
    async def test_version_names_the_release(self, v010: Api) -> None:
        """/version reports v0.10.0-rc3's tag, commit and build date."""
        expected = {"kagent_version": "v0.10.0-rc3", "git_commit": "7c52fff", "build_date": "2026-08-18"}
        assert await v010.json("GET", "/version") == (200, expected)

    @pytest.mark.parametrize(
        ("method", "path", "on_v09", "on_v010"),
        [
            ("GET", "/api/sandbox/ssh", 200, 404),
            ("GET", "/api/mcp-apps/team/srv/tools", 404, 200),
            ("POST", "/api/mcp-apps/team/srv/tools/t/call", 404, 200),
            ("GET", "/api/mcp-apps/team/srv/resources", 404, 200),
            ("GET", "/api/mcpapps/team/srv/tools", 404, 404),
            ("PATCH", "/api/sessions/s1", 405, 400),
        ],
    )
    async def test_routes_added_and_gone(
        self, sqlite_api: Api, v010: Api, method: str, path: str, on_v09: int, on_v010: int
    ) -> None:
        """MCP apps exist only in v0.10 (echoed), the sandbox PTY only in v0.9.11, PATCH of a session only in v0.10."""
        assert (await sqlite_api.call(method, path, raw=b"{}"))[0] == on_v09
        assert (await v010.call(method, path, raw=b"{}", headers=ALICE))[0] == on_v010

    @pytest.mark.parametrize("action", ["ensure", "suspend"])
    async def test_harness_session_routes_come_before_the_gateway_prefix(self, v010: Api, action: str) -> None:
        """An agent harness's per-session actor routes are v0.10 routes of their own (echoed as such)."""
        status, body = await v010.json("POST", f"/api/agentharnesses/team/h/sessions/s1/{action}")
        assert (status, body["data"]["path"]) == (200, f"/api/agentharnesses/team/h/sessions/s1/{action}")


class TestSearch:
    async def test_search_matches_the_underscore_spelling_in_v010_only(
        self, sqlite_stack: Devstack, sqlite_api: Api, v010_stack: Devstack, v010: Api
    ) -> None:
        """A search for ns__NS__my-agent also finds rows stored as ns__NS__my_agent in v0.10; v0.9.11 does not."""
        for stack in (sqlite_stack, v010_stack):
            for name in ("ns__NS__my_agent", "ns__NS__my-agent"):
                await stack.store.insert(NewMemory(name, "u", name, axis(0), "{}", None))
        query = {"agent_name": "ns__NS__my-agent", "user_id": "u", "vector": axis(0)}
        _, old = await sqlite_api.json("POST", "/api/memories/search", query)
        _, new = await v010.json("POST", "/api/memories/search", query)
        assert [r["content"] for r in old] == ["ns__NS__my-agent"]
        assert sorted(r["content"] for r in new) == ["ns__NS__my-agent", "ns__NS__my_agent"]

    async def test_a_failed_access_count_fails_the_search_in_v09_only(
        self, sqlite_stack: Devstack, sqlite_api: Api, v010_stack: Devstack, v010: Api
    ) -> None:
        """The access-count update after a search failing: v0.9.11 answers 500, v0.10 the hits (uncounted)."""
        for api, stack in ((sqlite_api, sqlite_stack), (v010, v010_stack)):
            assert (await api.json("POST", "/api/memories/sessions", save_body()))[0] == 201
            stack.store.fault = DbFault("ERROR: deadlock detected (SQLSTATE 40P01)", ops=frozenset({"bump"}))
        query = {"agent_name": "kagent__NS__helper", "user_id": "alice", "vector": save_body()["vector"]}
        old_status, old = await sqlite_api.json("POST", "/api/memories/search", query)
        new_status, new = await v010.json("POST", "/api/memories/search", query)
        assert (old_status, old["error"]) == (
            500,
            "search failed: failed to increment access count: ERROR: deadlock detected (SQLSTATE 40P01)",
        )
        assert (new_status, [r["content"] for r in new]) == (200, ["likes tea"])
        assert [r.access_count for r in await v010_stack.store.rows()] == [0]

    async def test_an_all_operations_fault_does_not_count_the_access_update(
        self, v010_stack: Devstack, v010: Api
    ) -> None:
        """A fault naming no operation trips the search itself, never the access-count update alone."""
        assert (await v010.json("POST", "/api/memories/sessions", save_body()))[0] == 201
        v010_stack.store.fault = DbFault(after=1, times=1)
        query = {"agent_name": "kagent__NS__helper", "user_id": "alice", "vector": save_body()["vector"]}
        assert (await v010.json("POST", "/api/memories/search", query))[0] == 200
        assert (await v010.json("POST", "/api/memories/search", query))[0] == 500


class TestSessions:
    async def test_a_session_belongs_to_its_user(self, v010: Api) -> None:
        """Another user gets 404 for alice's session; an unknown agent is refused at creation."""
        await _session(v010)
        status, body = await v010.json("GET", "/api/sessions/ctx-1", headers=ALICE)
        assert (status, body["data"]["session"]["user_id"], body["data"]["events"]) == (200, "alice", [])
        status, body = await v010.json("GET", "/api/sessions/ctx-1", headers=BOB)
        assert (status, body) == (404, {"error": "Session not found: failed to get session ctx-1: record not found"})
        status, body = await v010.json("POST", "/api/sessions", {"agent_ref": "team/other"}, headers=ALICE)
        assert status == 400 and body["error"].startswith("Agent ref is invalid")

    async def test_an_event_must_come_from_the_sessions_agent(self, v010: Api) -> None:
        """Events are appended by the session's own agent only (403 for another)."""
        await _session(v010)
        event = {"id": "e1", "data": "{}"}
        assert (await v010.json("POST", "/api/sessions/ctx-1/events", event, headers={**ALICE, **AGENT}))[0] == 201
        other = {**ALICE, "X-Agent-Name": "team/other"}
        assert (await v010.json("POST", "/api/sessions/ctx-1/events", event, headers=other)) == (
            403,
            {"error": "Session does not belong to this agent"},
        )

    async def test_errors_end_with_a_newline_like_gos_json_encoder(self, v010: Api) -> None:
        """Session routes' errors are json.Encoder output; success bodies are json.Marshal output."""
        assert (await v010.call("GET", "/api/sessions/none", headers=ALICE))[2].endswith(b"}\n")
        assert (await v010.call("GET", "/api/sessions", headers=ALICE))[2].endswith(b"}")


class TestShares:
    async def test_only_the_owner_creates_lists_and_deletes_shares(self, v010: Api) -> None:
        """Shares of alice's session: bob gets 404 on every share route; alice's delete is 200 even for no token."""
        await _session(v010)
        token = await _share(v010)
        for method, path in (
            ("POST", "/api/sessions/ctx-1/shares"),
            ("GET", "/api/sessions/ctx-1/shares"),
            ("DELETE", f"/api/sessions/ctx-1/shares/{token}"),
        ):
            assert (await v010.json(method, path, headers=BOB))[0] == 404
        status, listed = await v010.json("GET", "/api/sessions/ctx-1/shares", headers=ALICE)
        assert (status, [(s["token"], s["read_only"]) for s in listed["data"]]) == (200, [(token, True)])
        assert (await v010.json("DELETE", "/api/sessions/ctx-1/shares/other", headers=ALICE))[0] == 200
        assert (await v010.json("DELETE", f"/api/sessions/ctx-1/shares/{token}", headers=ALICE))[0] == 200
        assert (await v010.call("GET", "/api/sessions/ctx-1", headers=_as_bob(token)))[0] == 403

    async def test_a_share_token_acts_as_the_owner_on_that_session(self, v010: Api) -> None:
        """Under alice's share, bob reads her session (marked read-only) and its tasks, and may not change it."""
        await _session(v010)
        token = await _share(v010)
        task = {"id": "t1", "contextId": "ctx-1", "kind": "task", "status": {"state": "completed"}}
        assert (await v010.json("POST", "/api/tasks", task, headers=ALICE))[0] == 201
        status, body = await v010.json("GET", "/api/sessions/ctx-1", headers=_as_bob(token))
        assert (status, body["data"]["session"]["user_id"], body["data"]["read_only"]) == (200, "alice", True)
        status, tasks = await v010.json("GET", "/api/sessions/ctx-1/tasks", headers=_as_bob(token))
        assert (status, [t["id"] for t in tasks["data"]]) == (200, ["t1"])
        status, _ctype, raw = await v010.call("PUT", "/api/sessions/ctx-1", {"name": "x"}, headers=_as_bob(token))
        assert (status, raw) == (403, b"This share link is read-only\n")

    async def test_a_writable_share_appends_events_as_the_owner(self, v010: Api) -> None:
        """A writable share's visitor appends to the owner's session; rename and delete still act as the caller."""
        await _session(v010)
        token = await _share(v010, read_only=False)
        event = {"id": "e1", "data": "{}"}
        status, body = await v010.json("POST", "/api/sessions/ctx-1/events", event, headers={**_as_bob(token), **AGENT})
        assert (status, body["data"]["user_id"]) == (201, "alice")
        assert (await v010.json("PATCH", "/api/sessions/ctx-1", {"name": "x"}, headers=_as_bob(token)))[0] == 404
        assert (await v010.json("DELETE", "/api/sessions/ctx-1", headers=_as_bob(token)))[0] == 200
        status, body = await v010.json("GET", "/api/sessions/ctx-1", headers=ALICE)
        assert (status, [e["id"] for e in body["data"]["events"]]) == (200, ["e1"])

    @pytest.mark.parametrize(
        ("method", "path", "status", "text"),
        [
            ("GET", "/api/sessions/ctx-1", 403, b"Invalid or expired share token\n"),
            ("POST", "/api/memories/search", 403, b"Invalid or expired share token\n"),
            ("GET", "/api/a2a/team/helper/.well-known/agent-card.json", 403, b"Invalid or expired share token\n"),
            ("GET", "/health", 401, b"Unauthorized\n"),
            ("GET", "/version", 401, b"Unauthorized\n"),
            ("GET", "/api/nothing", 404, b"404 page not found\n"),
        ],
    )
    async def test_an_unknown_token_is_refused_on_every_route(
        self, v010_stack: Devstack, v010: Api, method: str, path: str, status: int, text: bytes
    ) -> None:
        """kagent's share middleware runs on every matched route, before its request log."""
        answer = await v010.call(method, path, raw=b"{}", headers={"X-Share-Token": "not-a-share"})
        assert (answer[0], answer[2]) == (status, text)
        assert "not-a-share" not in v010_stack.kagent_log() and '"Request completed"' not in v010_stack.kagent_log()

    async def test_a_visitor_lists_the_shared_session_once_opened(self, v010: Api) -> None:
        """bob's session list for the agent shows alice's session once he opened a share of it, with the writable
        share preferred."""
        await _session(v010)
        read_only, writable = await _share(v010), await _share(v010, read_only=False)
        assert (await v010.json("GET", "/api/sessions/agent/team/helper", headers=BOB)) == (
            200,
            {"error": False, "message": "Successfully listed sessions"},
        )
        for token in (read_only, writable):
            assert (await v010.call("GET", "/api/sessions/ctx-1", headers=_as_bob(token)))[0] == 200
        _status, body = await v010.json("GET", "/api/sessions/agent/team/helper", headers=BOB)
        (listed,) = body["data"]
        assert (listed["user_id"], listed["share_token"], listed["share_read_only"]) == ("alice", writable, False)


class TestTasks:
    async def test_a_task_belongs_to_the_user_who_stored_it(self, v010: Api) -> None:
        """bob cannot read (404), overwrite (409) or delete (404) alice's task; a deleted id stays burned."""
        task = {"id": "t1", "contextId": "ctx-1", "kind": "task", "status": {"state": "completed"}}
        status, body = await v010.json("POST", "/api/tasks", task, headers=ALICE)
        assert (status, body["data"]) == (
            201,
            {"contextId": "ctx-1", "id": "t1", "kind": "task", "status": {"state": "completed"}},
        )
        assert (await v010.json("GET", "/api/tasks/t1", headers=BOB))[0] == 404
        assert (await v010.json("POST", "/api/tasks", task, headers=BOB)) == (
            409,
            {"error": "Task ID is already in use: task id owned by another user"},
        )
        assert (await v010.json("DELETE", "/api/tasks/t1", headers=BOB))[0] == 404
        assert (await v010.call("DELETE", "/api/tasks/t1", headers=ALICE))[:1] == (204,)
        assert (await v010.json("POST", "/api/tasks", task, headers=ALICE))[0] == 409


class TestA2A:
    @pytest.mark.parametrize("method", ["message/send", "message/stream"])
    async def test_a_read_only_share_cannot_send(self, v010: Api, method: str) -> None:
        """kagent refuses a message under a read-only share with a JSON-RPC internal error, the agent never asked."""
        await _session(v010)
        token = await _share(v010)
        status, ctype, raw = await v010.call("POST", A2A, _send("ctx-1", method), headers=_as_bob(token))
        text = raw.decode()
        assert status == 200 and '"code":-32603' in text and '"message":"share token is read-only"' in text
        assert ctype == ("text/event-stream" if method == "message/stream" else "application/json")

    async def test_a_share_is_valid_for_its_own_context_only(self, v010: Api) -> None:
        """A writable share sends into the shared session only; another contextId is refused."""
        await _session(v010)
        token = await _share(v010, read_only=False)
        status, body = await v010.json("POST", A2A, _send("other"), headers=_as_bob(token))
        assert (status, body["error"]["message"]) == (200, 'share token is not valid for session "other"')
        status, body = await v010.json("POST", A2A, _send("ctx-1"), headers=_as_bob(token))
        assert (status, body["result"]["contextId"]) == (200, "ctx-1")

    async def test_the_agent_sees_the_caller_as_initiator(self, v010_stack: Devstack, v010: Api) -> None:
        """Under a share the message reaches the agent with metadata.initiated_by naming the caller."""
        await _session(v010)
        token = await _share(v010, read_only=False)
        _status, _ctype, raw = await v010.call("POST", A2A, _send("ctx-1", "message/stream"), headers=_as_bob(token))
        first = json.loads(raw.decode().split("data: ", 2)[1].split("\n", 1)[0])
        assert first["result"]["history"][0]["metadata"] == {"initiated_by": "bob"}

    async def test_tasks_list_reads_the_owners_tasks_only_under_a_share_of_that_context(self, v010: Api) -> None:
        """tasks/list: bob sees alice's tasks of the shared context under her share, none of his own, and a
        session that is not his is an error."""
        await _session(v010)
        token = await _share(v010)
        task = {"id": "t1", "contextId": "ctx-1", "kind": "task", "status": {"state": "completed"}}
        assert (await v010.json("POST", "/api/tasks", task, headers=ALICE))[0] == 201
        _, shared = await v010.json("POST", A2A, _rpc("tasks/list", {"contextId": "ctx-1"}), headers=_as_bob(token))
        assert [t["id"] for t in shared["result"]["tasks"]] == ["t1"]
        _, own = await v010.json("POST", A2A, _rpc("tasks/list", {}), headers=_as_bob(token))
        assert own["result"] == {"tasks": [], "pageSize": 50, "totalSize": 0, "nextPageToken": ""}
        _, missing = await v010.json("POST", A2A, _rpc("tasks/list", {"contextId": "ctx-1"}), headers=BOB)
        assert missing["error"]["message"] == "get session ctx-1: failed to get session ctx-1: record not found"

    async def test_tasks_list_pages(self, v010: Api) -> None:
        """Pages are ordered by task id; the next page's token is the offset."""
        await _session(v010)
        for task_id in ("t2", "t1", "t3"):
            task = {"id": task_id, "contextId": "ctx-1", "kind": "task", "status": {"state": "working"}}
            assert (await v010.json("POST", "/api/tasks", task, headers=ALICE))[0] == 201
        _, first = await v010.json("POST", A2A, _rpc("tasks/list", {"pageSize": 2}), headers=ALICE)
        page = first["result"]
        assert ([t["id"] for t in page["tasks"]], page["totalSize"]) == (["t1", "t2"], 3)
        params = {"pageSize": 2, "pageToken": page["nextPageToken"]}
        _, second = await v010.json("POST", A2A, _rpc("tasks/list", params), headers=ALICE)
        assert ([t["id"] for t in second["result"]["tasks"]], second["result"]["nextPageToken"]) == (["t3"], "")
