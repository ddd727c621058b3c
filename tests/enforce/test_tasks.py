"""kagent v0.10's tasks belong to users: through memgov, no scope reads another scope's tasks.

On a governed invocation kagent's user is the scope's session key, so the tasks of a memory
agent's conversation are stored under that key. Whoever asks through memgov with any other
identity (another scope's key, the people's own ids, a key-shaped id for the same scope with a
MAC memgov did not make) reads none of them, by REST or by A2A; the conversation's own governed
invocation still reads its task status. Runs on the v0.10 stand-in and on kagent v0.10's own
server in both auth modes.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from sidecar.dev.devstack.realkagent import AUTH_MODES
from tests.support.stack import AGENT, ALICE, BOB, Stack
from tests.support.upstream import bridge_headers

pytestmark = pytest.mark.kagent(releases=("0.10",), standins=("0.10",), auth_modes=AUTH_MODES)


def _as(stack: Stack, user: str) -> dict[str, str]:
    """kagent's user ``user`` as memgov names it on a governed call (and as a runtime relays it)."""
    return {"X-User-Id": user, **stack.parts.bearer.headers(user, int(stack.clock().timestamp()))}


def _person(stack: Stack, user: str) -> dict[str, str]:
    return {"X-User-Id": user, **bridge_headers(stack.upstream, user)}


async def _call(stack: Stack, method: str, path: str, headers: dict[str, str], body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    sent = {**headers, **({"Content-Type": "application/json"} if data else {})}
    async with stack.http.request(method, stack.gw.data_url + path, data=data, headers=sent) as resp:
        raw = await resp.read()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw


async def _list(stack: Stack, context: str, session_id: str) -> tuple[str, list[str]]:
    """tasks/list of a session through memgov, under a delegation context: decision and task ids."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/list", "params": {"contextId": session_id}}
    headers = {"X-Memgov-Context": context, "Content-Type": "application/json"}
    async with stack.http.post(f"{stack.gw.data_url}/api/a2a/{AGENT}/", data=json.dumps(body), headers=headers) as resp:
        answer = json.loads(await resp.read())
        result = answer.get("result") or {}
        return resp.headers["X-Memgov-Decision"], [t["id"] for t in result.get("tasks") or []]


def _forged(key: str) -> str:
    """The same scope and generation as ``key`` with a MAC memgov never made."""
    head, _, mac = key.rpartition(".")
    return f"{head}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"


class TestTaskIsolation:
    async def test_no_other_identity_reads_a_conversations_tasks(self, stack: Stack) -> None:
        """alice's conversation's task: read as her key only; bob's key, the people and a forged key get nothing."""
        await stack.scope()
        await stack.scope(mxid=BOB)
        alice_key = await stack.session_key()
        bob_key = await stack.session_key(sub=BOB)
        session_id, task_id = f"ctx-{secrets.token_hex(6)}", f"t-{secrets.token_hex(6)}"
        status, _ = await _call(
            stack, "POST", "/api/sessions", _as(stack, alice_key), {"agent_ref": AGENT, "id": session_id}
        )
        assert status == 201
        task = {"id": task_id, "contextId": session_id, "kind": "task", "status": {"state": "completed"}}
        assert (await _call(stack, "POST", "/api/tasks", _as(stack, alice_key), task))[0] == 201

        # The positive control: the owner's key reads it, by REST and through its governed invocation.
        assert (await _call(stack, "GET", f"/api/tasks/{task_id}", _as(stack, alice_key)))[0] == 200
        decision, ids = await _list(stack, stack.context(), session_id)
        assert decision.startswith("forward") and ids == [task_id]

        others = {
            "bob's key": _as(stack, bob_key),
            "a forged key of alice's scope": _as(stack, _forged(alice_key)),
            "alice herself": _person(stack, ALICE),
            "bob": _person(stack, BOB),
        }
        for who, headers in others.items():
            status, answer = await _call(stack, "GET", f"/api/tasks/{task_id}", headers)
            assert status == 404, (who, answer)
            status, answer = await _call(stack, "GET", f"/api/sessions/{session_id}/tasks", headers)
            assert status == 404 or not answer.get("data"), (who, answer)
            status, _ = await _call(stack, "POST", "/api/tasks", headers, {**task, "status": {"state": "failed"}})
            assert status == 409, who
            assert (await _call(stack, "DELETE", f"/api/tasks/{task_id}", headers))[0] == 404, who
        # bob's own governed conversation naming alice's session lists nothing of hers.
        _decision, ids = await _list(stack, stack.context(sub=BOB), session_id)
        assert task_id not in ids
        # And the task is still alice's, unchanged.
        status, answer = await _call(stack, "GET", f"/api/tasks/{task_id}", _as(stack, alice_key))
        assert status == 200 and answer["data"]["status"]["state"] == "completed"
