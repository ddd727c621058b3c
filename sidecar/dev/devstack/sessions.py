"""kagent v0.10's sessions, events, tasks and share links (``handlers/sessions.go``, ``tasks.go``,
``session_shares.go``, ``middleware.go: shareTokenMiddleware``), for the stand-in's 0.10 mode.

What carries identity is modelled; everything else of these routes is kept small:

- a session is keyed by (id, user); ``X-Share-Token`` naming a share of *that* session makes
  get, task list and event append act as the share's owner; update, delete and the share routes
  always act as the caller;
- a task belongs to the user who stored it: another user's get and delete answer 404, their
  store 409; a task is kept as the JSON object posted, re-emitted in the legacy wire's field
  order (kagent converts between A2A wire versions; the tests post simple tasks);
- the share middleware runs on every matched route (memory and A2A included): an unknown token
  is 403, a read-only share refuses every non-GET session route, and no request line is logged.

Only in memory; a stand-in restart forgets it. In 0.9 mode these routes stay echoes.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web

from sidecar.dev.devstack.gohttp import go_json, http_error
from sidecar.dev.devstack.gojson import go_dumps, go_loads, go_query_get
from sidecar.dev.devstack.memory_api import rfc3339
from sidecar.dev.devstack.state import PARAMS, STATE

#: The user kagent's unsecure authenticator assumes when a request names none.
DEFAULT_USER = "admin@kagent.dev"
_ZERO_TIME = "0001-01-01T00:00:00Z"
_NOT_FOUND = "record not found"
_TASK_TAKEN = "task id owned by another user"
#: What ``shareTokenMiddleware`` puts on the request when the token resolved.
SHARE = web.RequestKey("devstack_share", object)


@dataclass
class Session:
    """One row of kagent's ``session`` table."""

    id: str
    user_id: str
    agent_id: str | None
    name: str | None
    source: str | None
    created_at: datetime
    updated_at: datetime
    deleted: bool = False

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        if self.name is not None:
            out["name"] = self.name
        out |= {"user_id": self.user_id, "created_at": _nano(self.created_at), "updated_at": _nano(self.updated_at)}
        if self.agent_id is not None:
            out["agent_id"] = self.agent_id
        if self.source is not None:
            out["source"] = self.source
        return out


@dataclass(frozen=True)
class Event:
    """One row of kagent's ``event`` table."""

    id: str
    session_id: str
    user_id: str
    data: str
    created_at: datetime

    def json(self) -> dict[str, Any]:
        stamp = _nano(self.created_at)
        out = {"id": self.id, "session_id": self.session_id, "user_id": self.user_id}
        return out | {"created_at": stamp, "updated_at": stamp, "data": self.data}


@dataclass
class Task:
    """One row of kagent's ``task`` table: its owner and the task as posted."""

    id: str
    session_id: str | None
    user_id: str
    data: dict[str, Any]
    created_at: datetime
    deleted: bool = False

    def json(self) -> dict[str, Any]:
        """The legacy (0.3) wire's Task: its Go struct's field order, ``kind`` always ``task``."""
        out: dict[str, Any] = {}
        if self.data.get("artifacts"):
            out["artifacts"] = self.data["artifacts"]
        out["contextId"] = self.data.get("contextId") or ""
        if self.data.get("history"):
            out["history"] = self.data["history"]
        out |= {"id": self.id, "kind": "task"}
        if self.data.get("metadata"):
            out["metadata"] = self.data["metadata"]
        posted = self.data.get("status")
        status: dict[str, Any] = posted if isinstance(posted, dict) else {}
        out["status"] = {k: status[k] for k in ("state", "message", "timestamp") if status.get(k)} or {"state": ""}
        return out


@dataclass(frozen=True)
class Share:
    """One row of kagent's ``session_share`` table."""

    id: int
    token: str
    session_id: str
    user_id: str
    read_only: bool
    created_at: datetime

    def json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "token": self.token,
            "session_id": self.session_id,
            "user_id": self.user_id,
            "read_only": self.read_only,
            "created_at": _nano(self.created_at),
        }


@dataclass
class SessionBook:
    """kagent's session, event, task, session_share and session_share_access tables."""

    clock: Callable[[], datetime]
    sessions: dict[tuple[str, str], Session] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    tasks: dict[str, Task] = field(default_factory=dict)
    shares: dict[str, Share] = field(default_factory=dict)
    #: (user, share id) pairs: who opened which share (the UI lists shared sessions by it).
    accessed: set[tuple[str, int]] = field(default_factory=set)
    last_share_id: int = 0

    def session(self, session_id: str, user_id: str) -> Session | None:
        found = self.sessions.get((session_id, user_id))
        return found if found is not None and not found.deleted else None

    def touch(self, session_id: str | None, user_id: str) -> None:
        if session_id is not None and (found := self.session(session_id, user_id)) is not None:
            found.updated_at = self.clock()

    def task(self, task_id: str, user_id: str) -> Task | None:
        found = self.tasks.get(task_id)
        return found if found is not None and not found.deleted and found.user_id == user_id else None


def _nano(value: datetime) -> str:
    return rfc3339(value, nano=True)


def _book(request: web.Request) -> SessionBook:
    book = request.app[STATE].sessions
    assert book is not None, "session routes exist only in the 0.10 model"
    return book


def api_error(status: int, message: str, underlying: str | None = None) -> web.Response:
    """``errorResponseWriter.RespondWithError``: json.Encoder output (a newline); no detail on a 5xx."""
    text = f"{message}: {underlying}" if underlying is not None and status < 500 else message
    body = (go_dumps({"error": text}) + "\n").encode()
    return web.Response(status=status, body=body, content_type="application/json")


def api_ok(status: int, data: Any, message: str) -> web.Response:
    """``RespondWithJSON(api.NewResponse(...))``: ``data`` left out when it is nil (None)."""
    body: dict[str, Any] = {"error": False}
    if data is not None:
        body["data"] = data
    body["message"] = message
    return go_json(status, body)


def caller(request: web.Request) -> str:
    """kagent's unsecure principal: the ``user_id`` query, else ``X-User-Id``, else the default admin."""
    return (
        go_query_get(request.rel_url.raw_query_string, "user_id")
        or request.headers.get("X-User-Id", "")
        or DEFAULT_USER
    )


def share_of(request: web.Request) -> Share | None:
    """The share the request's ``X-Share-Token`` resolved to, if any."""
    found = request.get(SHARE)
    return found if isinstance(found, Share) else None


def effective_user(request: web.Request, session_id: str) -> str:
    """``getEffectiveUserIDForSession``: a share of this very session acts as its owner."""
    share = share_of(request)
    return share.user_id if share is not None and share.session_id == session_id else caller(request)


def check_share(request: web.Request) -> web.Response | None:
    """``shareTokenMiddleware`` on a matched route: resolve the token, refuse what it may not do."""
    token = request.headers.get("X-Share-Token", "")
    if not token:
        return None
    if not request.path.startswith("/api"):
        return http_error(401, "Unauthorized")  # no authenticated session outside /api
    book = _book(request)
    share = book.shares.get(token)
    if share is None:
        return http_error(403, "Invalid or expired share token")
    if share.read_only and request.method not in ("GET", "HEAD") and request.path.startswith("/api/sessions/"):
        return http_error(403, "This share link is read-only")
    book.accessed.add((caller(request), share.id))
    request[SHARE] = share
    return None


async def _json_body(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = go_loads(await request.read())
    except (ValueError, RecursionError):
        return api_error(400, "Invalid request body", "invalid JSON")
    if not isinstance(body, dict):
        return api_error(400, "Invalid request body", "expected a JSON object")
    return body


def _agent_id(ref: str) -> str:
    return ref.replace("-", "_").replace("/", "__NS__")


def _agent_known(request: web.Request, agent_id: str) -> bool:
    agents = request.app[STATE].agents
    return agents is None or agent_id in {_agent_id(a) for a in agents}


def _text(body: dict[str, Any], key: str) -> str | None:
    """A non-empty string field of a decoded body, else None."""
    value = body.get(key)
    return value if isinstance(value, str) and value else None


def _missing(what: str, key: str) -> str:
    return f"failed to get {what} {key}: {_NOT_FOUND}"


def _ordered(sessions: list[Session]) -> list[Session]:
    return sorted(sessions, key=lambda s: (s.updated_at, s.created_at), reverse=True)


async def list_sessions(request: web.Request) -> web.Response:
    """GET /api/sessions: the caller's sessions, latest first."""
    user, book = caller(request), _book(request)
    mine = _ordered([s for s in book.sessions.values() if s.user_id == user and not s.deleted])
    return api_ok(200, [s.json() for s in mine] or None, "Successfully listed sessions")


async def create_session(request: web.Request) -> web.Response:
    """POST /api/sessions {agent_ref, name?, id?, source?}: 201 with the stored session."""
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    ref = body.get("agent_ref")
    if not isinstance(ref, str):
        return api_error(400, "agent_ref is required")
    agent_id = _agent_id(ref)
    if not _agent_known(request, agent_id):
        return api_error(400, f"Agent ref is invalid, please check the agent ref {ref}", _missing("agent", agent_id))
    book, user, now = _book(request), caller(request), _book(request).clock()
    session_id = _text(body, "id") or str(uuid.uuid4())
    existing = book.sessions.get((session_id, user))
    name = body.get("name") if isinstance(body.get("name"), str) else None
    source = body.get("source") if isinstance(body.get("source"), str) else None
    created = existing.created_at if existing is not None else now
    book.sessions[(session_id, user)] = Session(session_id, user, agent_id, name, source, created, now)
    return api_ok(201, book.sessions[(session_id, user)].json(), "Successfully created session")


async def sessions_for_agent(request: web.Request) -> web.Response:
    """GET /api/sessions/agent/{ns}/{name}: the caller's, plus those shared with and opened by them."""
    params, book, user = request[PARAMS], _book(request), caller(request)
    agent_id = _agent_id(f"{params['namespace']}/{params['name']}")
    if not _agent_known(request, agent_id):
        return api_error(404, "Agent not found", _missing("agent", agent_id))
    out = []
    for found in _ordered([s for s in book.sessions.values() if s.agent_id == agent_id and not s.deleted]):
        if found.source == "agent":
            continue
        if found.user_id == user:
            out.append(found.json())
            continue
        opened = [
            sh
            for sh in book.shares.values()
            if sh.session_id == found.id and sh.user_id == found.user_id and (user, sh.id) in book.accessed
        ]
        if opened:
            best = min(opened, key=lambda sh: (sh.read_only, -sh.created_at.timestamp()))
            out.append(found.json() | {"share_token": best.token, "share_read_only": best.read_only})
    return api_ok(200, out or None, "Successfully listed sessions")


async def get_session(request: web.Request) -> web.Response:
    """GET /api/sessions/{id}: the session and its events (as the share's owner under a share of it)."""
    session_id = request[PARAMS]["session_id"]
    book, user = _book(request), effective_user(request, session_id)
    found = book.session(session_id, user)
    if found is None:
        return api_error(404, "Session not found", _missing("session", session_id))
    asc = go_query_get(request.rel_url.raw_query_string, "order") == "asc"
    events = sorted(
        (e for e in book.events if e.session_id == session_id and e.user_id == user),
        key=lambda e: e.created_at,
        reverse=not asc,
    )
    limit = go_query_get(request.rel_url.raw_query_string, "limit")
    if limit.isdigit() and int(limit) > 0:
        events = events[: int(limit)]
    data: dict[str, Any] = {"session": found.json(), "events": [e.json() for e in events]}
    share = share_of(request)
    if share is not None and share.session_id == session_id and share.read_only:
        data["read_only"] = True
    return api_ok(200, data, "Successfully retrieved session")


async def update_session(request: web.Request) -> web.Response:
    """PUT|PATCH /api/sessions/{id} {name?, agent_ref?}: the caller's own session only."""
    session_id, user, book = request[PARAMS]["session_id"], caller(request), _book(request)
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    name, ref = body.get("name"), body.get("agent_ref")
    if name is None and ref is None:
        return api_error(400, "at least one of name or agent_ref is required")
    found = book.session(session_id, user)
    if found is None:
        return api_error(404, "Session not found", _missing("session", session_id))
    if isinstance(name, str):
        found.name = name
    if isinstance(ref, str):
        agent_id = _agent_id(ref)
        if not _agent_known(request, agent_id):
            return api_error(404, "Agent not found", _missing("agent", agent_id))
        found.agent_id = agent_id
    return api_ok(200, found.json(), "Successfully updated session")


async def delete_session(request: web.Request) -> web.Response:
    """DELETE /api/sessions/{id}: soft-deletes the caller's session; 200 whether or not there was one."""
    found = _book(request).session(request[PARAMS]["session_id"], caller(request))
    if found is not None:
        found.deleted = True
    return api_ok(200, {}, "Session deleted successfully")


async def session_tasks(request: web.Request) -> web.Response:
    """GET /api/sessions/{id}/tasks: the effective user's tasks of that session, oldest first."""
    session_id = request[PARAMS]["session_id"]
    book, user = _book(request), effective_user(request, session_id)
    if book.session(session_id, user) is None:
        return api_error(404, "Session not found for given ID", _missing("session", session_id))
    tasks = sorted(
        (t for t in book.tasks.values() if t.session_id == session_id and t.user_id == user and not t.deleted),
        key=lambda t: t.created_at,
    )
    return api_ok(200, [t.json() for t in tasks] or None, "Successfully retrieved session tasks")


async def add_event(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/events {id, data}: appended as the effective user, by the session's agent."""
    session_id = request[PARAMS]["session_id"]
    book, user = _book(request), effective_user(request, session_id)
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    found = book.session(session_id, user)
    if found is None:
        return api_error(404, "Session not found", _missing("session", session_id))
    agent = _agent_id(request.headers.get("X-Agent-Name", ""))
    if found.agent_id is not None and found.agent_id != agent:
        return api_error(403, "Session does not belong to this agent")
    event_id, data = str(body.get("id") or ""), str(body.get("data") or "")
    book.events.append(Event(event_id, session_id, user, data, book.clock()))
    book.touch(session_id, user)
    written = {"id": event_id, "session_id": session_id, "user_id": user}
    written |= {"created_at": _ZERO_TIME, "updated_at": _ZERO_TIME, "data": data}
    return api_ok(201, written, "Event added to session successfully")


async def get_task(request: web.Request) -> web.Response:
    """GET /api/tasks/{id}: the caller's task only."""
    task_id = request[PARAMS]["task_id"]
    found = _book(request).task(task_id, caller(request))
    if found is None:
        return api_error(404, "Task not found", _missing("task", task_id))
    return api_ok(200, found.json(), "Successfully retrieved task")


async def create_task(request: web.Request) -> web.Response:
    """POST /api/tasks: stored as the caller's; an id owned by another user (or deleted) is 409."""
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    book, user = _book(request), caller(request)
    task_id = _text(body, "id") or str(uuid.uuid4())
    existing = book.tasks.get(task_id)
    if existing is not None and (existing.deleted or existing.user_id != user):
        return api_error(409, "Task ID is already in use", _TASK_TAKEN)
    context = _text(body, "contextId")
    created = existing.created_at if existing is not None else book.clock()
    task = Task(task_id, context, user, body, created)
    book.tasks[task_id] = task
    book.touch(context, user)
    return api_ok(201, task.json(), "Successfully created task")


async def delete_task(request: web.Request) -> web.Response:
    """DELETE /api/tasks/{id}: 204 for the owner (or when there is none); 404 for another user."""
    task_id, user, book = request[PARAMS]["task_id"], caller(request), _book(request)
    existing = book.tasks.get(task_id)
    if existing is not None and not existing.deleted:
        if existing.user_id != user:
            return api_error(404, "Task not found", _TASK_TAKEN)
        existing.deleted = True
    return web.Response(status=204, content_type="application/json")


async def create_share(request: web.Request) -> web.Response:
    """POST /api/sessions/{id}/shares [{read_only}]: only the session's owner; read-only unless false."""
    session_id, user, book = request[PARAMS]["session_id"], caller(request), _book(request)
    read_only = True
    raw = await request.read()
    if raw:
        try:
            body = go_loads(raw)
        except (ValueError, RecursionError):
            return api_error(400, "invalid request body", "invalid JSON")
        value = body.get("read_only") if isinstance(body, dict) else None
        if value is not None and not isinstance(value, bool):
            kind = "string" if isinstance(value, str) else "object" if isinstance(value, dict) else "number"
            kind = "array" if isinstance(value, list) else kind
            return api_error(
                400,
                "invalid request body",
                f"json: cannot unmarshal {kind} into Go struct field createSessionShareRequest.read_only of type bool",
            )
        if value is False:
            read_only = False
    if book.session(session_id, user) is None:
        return api_error(404, "session not found", _missing("session", session_id))
    book.last_share_id += 1
    share = Share(book.last_share_id, secrets.token_hex(24), session_id, user, read_only, book.clock())
    book.shares[share.token] = share
    return api_ok(201, share.json(), "share created")


async def list_shares(request: web.Request) -> web.Response:
    """GET /api/sessions/{id}/shares: only the session's owner; newest first."""
    session_id, user, book = request[PARAMS]["session_id"], caller(request), _book(request)
    if book.session(session_id, user) is None:
        return api_error(404, "session not found", _missing("session", session_id))
    shares = sorted((s for s in book.shares.values() if s.session_id == session_id), key=lambda s: -s.id)
    return api_ok(200, [s.json() for s in shares], "shares listed")


async def delete_share(request: web.Request) -> web.Response:
    """DELETE /api/sessions/{id}/shares/{token}: only the session's owner; 200 even for no such token."""
    params, user, book = request[PARAMS], caller(request), _book(request)
    if book.session(params["session_id"], user) is None:
        return api_error(404, "session not found", _missing("session", params["session_id"]))
    found = book.shares.get(params["token"])
    if found is not None and found.session_id == params["session_id"] and found.user_id == user:
        del book.shares[found.token]
        book.accessed = {(u, i) for u, i in book.accessed if i != found.id}
    return api_ok(200, {}, "share deleted")
