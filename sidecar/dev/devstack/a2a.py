"""The controller's A2A front (``/api/a2a/{namespace}/{name}[/...]``) with a stand-in agent behind it.

JSON-RPC ``message/send`` answers one agent message that names the agent and echoes the text;
``message/stream`` answers server-sent events (task, working, artifact chunks, final completed
status). A path ending in ``/.well-known/agent-card.json`` returns the agent card. With a runtime
configured, memory-enabled agents make the calls kagent's Python runtime would make first.

In the 0.10 model kagent's own A2A handling comes first: under ``X-Share-Token`` a read-only
share refuses sending (and cancelling), a message naming another context than the shared
session is refused, and the agent receives the message with ``metadata.initiated_by`` set to the
caller (the user it is sent as stays the caller); ``tasks/list`` is answered from kagent's task
table, for the caller or, for the shared session's own context, for the share's owner. Those
answers are spelled as kagent's a2a-go server spells them; the agent's own answers are not.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from sidecar.dev.devstack import sessions
from sidecar.dev.devstack.gohttp import go_json, http_error, method_not_allowed
from sidecar.dev.devstack.gojson import go_dumps, go_loads, go_query_get
from sidecar.dev.devstack.memory_api import rfc3339
from sidecar.dev.devstack.runtime import run_turn
from sidecar.dev.devstack.state import PARAMS, STATE, KagentState

CARD_SUFFIX = "/.well-known/agent-card.json"
DEFAULT_USER = sessions.DEFAULT_USER
#: JSON-RPC methods a read-only share may not call (kagent's requireWritableShare).
_WRITES = frozenset({"message/send", "message/stream", "tasks/cancel", "tasks/pushNotificationConfig/set"})
_PAGE, _MAX_PAGE = 50, 100
SANDBOX_PREFIX = "/api/a2a-sandboxes/"


def agent_key(request: web.Request) -> str:
    """The registry key kagent looks agents up by (``ns/name``, or ``sandboxes/ns/name``)."""
    params = request[PARAMS]
    key = f"{params['namespace']}/{params['name']}"
    return f"sandboxes/{key}" if request.path.startswith(SANDBOX_PREFIX) else key


def _rpc(rpc_id: Any, *, result: Any = None, code: int = 0, message: str = "") -> dict[str, Any]:
    if code:
        return {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


def _text_of(message: Mapping[str, Any]) -> str | None:
    parts = message.get("parts")
    if not isinstance(parts, list):
        return None
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return " ".join(texts) if texts else None


def card(request: web.Request) -> dict[str, Any]:
    """An A2A (0.3) agent card for the addressed agent."""
    params = request[PARAMS]
    base = f"{request.scheme}://{request.host}{request.path.removesuffix(CARD_SUFFIX).rstrip('/')}/"
    return {
        "name": params["name"],
        "description": f"Stand-in for agent {params['namespace']}/{params['name']}",
        "url": base,
        "version": request.app[STATE].release.tag,
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
        "capabilities": {"streaming": True, "pushNotifications": False, "stateTransitionHistory": False},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [],
    }


async def _reply(request: web.Request, state: KagentState, text: str, context_id: str) -> str:
    params = request[PARAMS]
    agent = f"{params['namespace']}/{params['name']}"
    lines = [f"{agent} received: {text}"]
    cfg = state.runtime
    if cfg is not None and state.http is not None and agent in cfg.memory_agents:
        # Like kagent's unsecure authn: the user_id query wins over X-User-Id, else the default admin.
        user = (
            go_query_get(request.rel_url.raw_query_string, "user_id")
            or request.headers.get("X-User-Id")
            or DEFAULT_USER
        )
        first = (agent, context_id) not in state.seen_contexts
        state.seen_contexts.add((agent, context_id))
        turn = await run_turn(state.http, cfg, params["namespace"], params["name"], user, text, first_turn=first)
        if summary := turn.summary():
            lines.append(summary)
    return "\n".join(lines)


def _agent_message(text: str, context_id: str, task_id: str | None = None) -> dict[str, Any]:
    message = {
        "kind": "message",
        "messageId": str(uuid.uuid4()),
        "role": "agent",
        "parts": [{"kind": "text", "text": text}],
        "contextId": context_id,
    }
    if task_id:
        message["taskId"] = task_id
    return message


async def handle(request: web.Request) -> web.StreamResponse:
    """Everything under an A2A agent prefix."""
    state = request.app[STATE]
    key = agent_key(request)
    if state.agents is not None and key not in state.agents:
        return http_error(404, f"Agent {key} not found")
    if request.path.endswith(CARD_SUFFIX):
        return go_json(200, card(request)) if request.method in ("GET", "HEAD") else method_not_allowed()
    if request.method != "POST":
        return method_not_allowed()
    try:
        rpc = go_loads(await request.read())
    except (ValueError, RecursionError):  # a too-deep document is a parse error to the A2A server as well
        return go_json(200, _rpc(None, code=-32700, message="Parse error"))
    if not isinstance(rpc, dict) or rpc.get("jsonrpc") != "2.0" or not isinstance(rpc.get("method"), str):
        return go_json(200, _rpc(None, code=-32600, message="Invalid Request"))
    rpc_id, method = rpc.get("id"), rpc["method"]
    params = rpc.get("params")
    if state.sessions is not None:
        refused = _kagent_checks(request, rpc_id, method, params)
        if refused is not None:
            return refused
        if method == "tasks/list":
            return _list_tasks(request, state.sessions, rpc_id, params if isinstance(params, dict) else {})
    if method not in ("message/send", "message/stream"):
        return go_json(200, _rpc(rpc_id, code=-32601, message="Method not found"))
    message = params.get("message") if isinstance(params, dict) else None
    text = _text_of(message) if isinstance(message, dict) else None
    if text is None or not isinstance(message, dict):
        return go_json(200, _rpc(rpc_id, code=-32602, message="Invalid params"))
    if sessions.share_of(request) is not None:
        message["metadata"] = {**(message.get("metadata") or {}), "initiated_by": sessions.caller(request)}
    context_id = str(message.get("contextId") or uuid.uuid4())
    if method == "message/send":
        reply = await _reply(request, state, text, context_id)
        return go_json(200, _rpc(rpc_id, result=_agent_message(reply, context_id)))
    return await _stream(request, state, rpc_id, message, text, context_id)


def _kagent_error(rpc_id: Any, message: str, *, stream: bool) -> web.StreamResponse:
    """An internal error as kagent's a2a-go server writes it (with its ErrorInfo detail)."""
    stamp = rfc3339(datetime.now(UTC))
    info: dict[str, Any] = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "domain": "a2a-protocol.org"}
    info |= {"metadata": {"timestamp": stamp}, "reason": "INTERNAL_ERROR"}
    body = go_dumps({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32603, "message": message, "data": [info]}})
    if stream:
        event = f"id: {uuid.uuid4()}\ndata: {body}\n\n"
        return web.Response(body=event.encode(), headers={"Content-Type": "text/event-stream"})
    return web.Response(body=(body + "\n").encode(), content_type="application/json")


def _kagent_checks(request: web.Request, rpc_id: Any, method: str, params: Any) -> web.StreamResponse | None:
    """What kagent's A2A handler refuses under a share token before the agent sees the request."""
    share = sessions.share_of(request)
    if share is None:
        return None
    stream = method == "message/stream"
    if method in _WRITES and share.read_only:
        return _kagent_error(rpc_id, "share token is read-only", stream=stream)
    message = params.get("message") if isinstance(params, dict) else None
    context = message.get("contextId") if isinstance(message, dict) else None
    sending = method in ("message/send", "message/stream")
    if sending and isinstance(context, str) and context and context != share.session_id:
        return _kagent_error(rpc_id, f"share token is not valid for session {go_dumps(context)}", stream=stream)
    return None


def _task_json(task: sessions.Task, history_length: Any, artifacts: bool) -> dict[str, Any]:
    """A stored task as ``tasks/list`` returns it (legacy wire, a2a-go's field order)."""
    out: dict[str, Any] = {"kind": "task", "id": task.id}
    if artifacts and task.data.get("artifacts"):
        out["artifacts"] = task.data["artifacts"]
    out["contextId"] = task.data.get("contextId") or ""
    history = task.data.get("history") or []
    if isinstance(history_length, int):
        history = history[len(history) - history_length :] if history_length > 0 else []
    if history:
        out["history"] = history
    if task.data.get("metadata"):
        out["metadata"] = task.data["metadata"]
    return out | {"status": task.json()["status"]}


def _offset(token: Any) -> int | None:
    """kagent's page token: the base64url (unpadded) decimal offset of the page; None when malformed."""
    if not token:
        return 0
    try:
        text = base64.urlsafe_b64decode(str(token) + "=" * (-len(str(token)) % 4)).decode()
    except ValueError:
        return None
    return int(text) if text.isdigit() else None


def _list_tasks(request: web.Request, book: sessions.SessionBook, rpc_id: Any, params: dict[str, Any]) -> web.Response:
    """kagent v0.10's ``tasks/list``: the caller's tasks, or the share owner's for the shared context."""
    context = params.get("contextId") if isinstance(params.get("contextId"), str) else ""
    user = sessions.effective_user(request, context) if context else sessions.caller(request)
    if context:
        if book.session(context, user) is None:
            text = f"get session {context}: failed to get session {context}: record not found"
            body = go_dumps({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32603, "message": text}})
            return web.Response(body=(body + "\n").encode(), content_type="application/json")
        contexts = {context}
    else:
        contexts = {s.id for s in book.sessions.values() if s.user_id == user and not s.deleted}
    found = sorted(
        (t for t in book.tasks.values() if t.session_id in contexts and t.user_id == user and not t.deleted),
        key=lambda t: t.id,
    )
    status = params.get("status")
    if isinstance(status, str) and status:
        found = [t for t in found if t.json()["status"].get("state") == status]
    size = params.get("pageSize")
    page = _PAGE if not isinstance(size, int) or size <= 0 else min(size, _MAX_PAGE)
    offset = _offset(params.get("pageToken"))
    if offset is None:
        return go_json(200, _rpc(rpc_id, code=-32602, message="invalid pageToken"))
    end = min(offset + page, len(found))
    shown = [_task_json(t, params.get("historyLength"), params.get("includeArtifacts") is True) for t in found]
    after = base64.urlsafe_b64encode(str(end).encode()).rstrip(b"=").decode() if end < len(found) else ""
    result = {"tasks": shown[min(offset, end) : end], "pageSize": page, "totalSize": len(found), "nextPageToken": after}
    return web.Response(body=(go_dumps(_rpc(rpc_id, result=result)) + "\n").encode(), content_type="application/json")


async def _stream(
    request: web.Request, state: KagentState, rpc_id: Any, message: dict[str, Any], text: str, context_id: str
) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    task_id = str(uuid.uuid4())

    def status(state_name: str, final: bool, reply: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"state": state_name, "timestamp": datetime.now(UTC).isoformat()}
        if reply is not None:
            body["message"] = _agent_message(reply, context_id, task_id)
        return {"kind": "status-update", "taskId": task_id, "contextId": context_id, "status": body, "final": final}

    async def send(result: dict[str, Any], pause: bool = True) -> None:
        await resp.write(f"data: {go_dumps(_rpc(rpc_id, result=result))}\n\n".encode())
        if pause:
            await asyncio.sleep(state.stream_delay_s)  # paces the stream like a model producing tokens

    await send(
        {"kind": "task", "id": task_id, "contextId": context_id, "status": {"state": "submitted"}, "history": [message]}
    )
    await send(status("working", False))
    reply = await _reply(request, state, text, context_id)
    half = len(reply) // 2
    artifact_id = str(uuid.uuid4())
    for index, chunk in enumerate((reply[:half], reply[half:])):
        await send(
            {
                "kind": "artifact-update",
                "taskId": task_id,
                "contextId": context_id,
                "artifact": {"artifactId": artifact_id, "parts": [{"kind": "text", "text": chunk}]},
                "append": index > 0,
                "lastChunk": index == 1,
            }
        )
    await send(status("completed", True, reply), pause=False)
    await resp.write_eof()
    return resp
