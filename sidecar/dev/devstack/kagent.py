"""Stand-in for kagent's controller HTTP API (``:8083``), for tests, the demo and benchmarks.

It models one release (``releases.py``): v0.9.11 by default, v0.10.0-rc3 on request. The route
table is that release's controller's (``server.go`` ``setupRoutes``), matched with gorilla/mux
semantics. Memory routes and A2A behave like kagent; in the 0.10 model so do sessions, tasks and
share links with their ``X-Share-Token`` (``sessions.py``). Every other API route answers an echo
in kagent's ``{"error","data","message"}`` envelope, so a proxy test can compare what arrived.
Every request is recorded in ``app[RECORDER]``; test controls live under ``/__devstack/``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Middleware

from sidecar.dev.devstack import a2a, definitions, memory_api, sessions
from sidecar.dev.devstack.admin import admin_mux
from sidecar.dev.devstack.gohttp import go_error, go_json, method_not_allowed, moved, not_found
from sidecar.dev.devstack.gojson import go_query_get
from sidecar.dev.devstack.gomux import Mux
from sidecar.dev.devstack.recorder import Recorder
from sidecar.dev.devstack.releases import DEFAULT, KagentRelease
from sidecar.dev.devstack.runtime import RuntimeConfig
from sidecar.dev.devstack.state import PARAMS, RECORDER, STATE, KagentState
from sidecar.dev.devstack.store import MemoryStore

__all__ = ["PARAMS", "RECORDER", "STATE", "create_kagent_app"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# kagent reads whole bodies with no size limit.
_MAX_BODY = 1 << 30


@dataclass(frozen=True)
class Target:
    """What a route runs and how its requests are recorded."""

    kind: str
    handler: Handler


async def health(request: web.Request) -> web.Response:
    """GET /health."""
    return go_json(200, {"error": False, "data": {"status": "OK"}, "message": "OK"})


async def version(request: web.Request) -> web.Response:
    """GET /version: the modelled release's."""
    return go_json(200, request.app[STATE].release.version_body)


async def echo(request: web.Request) -> web.Response:
    """Any other controller route: echo the request; ``X-Devstack-Status: NNN`` forces a status."""
    body = await request.read()
    forced = request.headers.get("X-Devstack-Status", "")
    status = int(forced) if forced.isdigit() and 200 <= int(forced) <= 599 else 200
    if status >= 400:
        return go_error(status, request.headers.get("X-Devstack-Error", f"forced status {status}"))
    data = {
        "method": request.method,
        "path": request.path,
        "raw_path": request.raw_path,
        "query": request.rel_url.raw_query_string,
        "body": body.decode("utf-8", "replace"),
        "body_b64": base64.b64encode(body).decode(),
    }
    return go_json(status, {"error": False, "data": data, "message": "devstack echo"})


Routes = tuple[tuple[str, Iterable[str]], ...]
_CONFIG_ROUTES: Routes = (
    ("/api/me", ["GET"]),
    ("/api/modelconfigs", ["GET"]),
    ("/api/modelconfigs/{namespace}/{name}", ["GET"]),
    ("/api/modelconfigs", ["POST"]),
    ("/api/modelconfigs/{namespace}/{name}", ["DELETE", "PUT"]),
)
#: v0.9.11's session and task routes (echoes in the 0.9 model).
_SESSION_ROUTES_0_9: Routes = (
    ("/api/sessions", ["GET", "POST"]),
    ("/api/sessions/agent/{namespace}/{name}", ["GET"]),
    ("/api/sessions/{session_id}", ["GET"]),
    ("/api/sessions/{session_id}/tasks", ["GET"]),
    ("/api/sessions/{session_id}", ["DELETE", "PUT"]),
    ("/api/sessions/{session_id}/events", ["POST"]),
    ("/api/tasks/{task_id}", ["GET"]),
    ("/api/tasks", ["POST"]),
    ("/api/tasks/{task_id}", ["DELETE"]),
)
#: v0.10.0-rc3's, modelled: PATCH joins PUT, share links follow the events route.
_SESSION_ROUTES_0_10: tuple[tuple[str, Handler, Iterable[str]], ...] = (
    ("/api/sessions", sessions.list_sessions, ["GET"]),
    ("/api/sessions", sessions.create_session, ["POST"]),
    ("/api/sessions/agent/{namespace}/{name}", sessions.sessions_for_agent, ["GET"]),
    ("/api/sessions/{session_id}", sessions.get_session, ["GET"]),
    ("/api/sessions/{session_id}/tasks", sessions.session_tasks, ["GET"]),
    ("/api/sessions/{session_id}", sessions.delete_session, ["DELETE"]),
    ("/api/sessions/{session_id}", sessions.update_session, ["PUT", "PATCH"]),
    ("/api/sessions/{session_id}/events", sessions.add_event, ["POST"]),
    ("/api/sessions/{session_id}/shares", sessions.create_share, ["POST"]),
    ("/api/sessions/{session_id}/shares", sessions.list_shares, ["GET"]),
    ("/api/sessions/{session_id}/shares/{token}", sessions.delete_share, ["DELETE"]),
    ("/api/tasks/{task_id}", sessions.get_task, ["GET"]),
    ("/api/tasks", sessions.create_task, ["POST"]),
    ("/api/tasks/{task_id}", sessions.delete_task, ["DELETE"]),
)
_TOOL_ROUTES: Routes = (
    ("/api/tools", ["GET"]),
    ("/api/toolservers", ["GET", "POST"]),
    ("/api/toolservers/{namespace}/{name}", ["DELETE"]),
)
#: New in v0.10: MCP apps (between the tool servers and their types).
_MCP_APP_ROUTES: Routes = (
    ("/api/mcp-apps/{namespace}/{name}/tools", ["GET"]),
    ("/api/mcp-apps/{namespace}/{name}/tools/{toolName}/call", ["POST"]),
    ("/api/mcp-apps/{namespace}/{name}/resources", ["GET"]),
)
_AGENT_ROUTES: Routes = (
    ("/api/toolservertypes", ["GET"]),
    ("/api/agents", ["GET", "POST", "PUT"]),
    ("/api/agents/{namespace}/{name}", ["GET", "DELETE"]),
    ("/api/sandboxagents", ["POST"]),
    ("/api/agentharnesses", ["POST"]),
    ("/api/agentharnesses/{namespace}/{name}", ["GET", "DELETE"]),
    ("/api/sandboxagents/{namespace}/{name}", ["GET", "PUT", "DELETE"]),
    ("/api/modelproviderconfigs/models", ["GET"]),
    ("/api/modelproviderconfigs/memories", ["GET"]),
    ("/api/modelproviderconfigs/configured", ["GET"]),
    ("/api/modelproviderconfigs/configured/{name}/models", ["GET"]),
    ("/api/models", ["GET"]),
)
_LATE_ECHO_ROUTES: Routes = (
    ("/api/namespaces", ["GET"]),
    ("/api/substrate/status", ["GET"]),
    ("/api/prompttemplates", ["GET", "POST"]),
    ("/api/prompttemplates/{namespace}/{name}", ["GET", "PUT", "DELETE"]),
    ("/api/feedback", ["POST", "GET"]),
    ("/api/langgraph/checkpoints", ["POST", "GET"]),
    ("/api/langgraph/checkpoints/writes", ["POST"]),
    ("/api/langgraph/checkpoints/{thread_id}", ["DELETE"]),
    ("/api/crewai/memory", ["POST", "GET", "DELETE"]),
    ("/api/crewai/flows/state", ["POST", "GET"]),
)
#: Gone in v0.10 (the OpenShell sandbox PTY).
_SANDBOX_SSH_ROUTES: Routes = (("/api/sandbox/ssh", ["GET"]),)
#: New in v0.10: an agent harness's per-session actor (before the harness gateway's prefix).
_HARNESS_SESSION_ROUTES: Routes = (
    ("/api/agentharnesses/{namespace}/{name}/sessions/{session_id}/ensure", ["POST"]),
    ("/api/agentharnesses/{namespace}/{name}/sessions/{session_id}/suspend", ["POST"]),
    ("/api/agentharnesses/{namespace}/{name}/sessions/{session_id}/status", ["GET"]),
)


#: The definition routes modelled (``definitions.py``); each other method of their paths echoes.
_MODELLED: dict[tuple[str, str], Handler] = {
    ("/api/modelconfigs", "POST"): definitions.create_model_config,
    ("/api/modelconfigs/{namespace}/{name}", "GET"): definitions.get_model_config,
    ("/api/agents", "POST"): definitions.create_agent,
    ("/api/agents/{namespace}/{name}", "GET"): definitions.get_agent,
}


def _echoes(mux: Mux[Target], routes: Routes) -> None:
    for template, methods in routes:
        echoed = [m for m in methods if (template, m) not in _MODELLED]
        for method in methods:
            if (template, method) in _MODELLED:
                mux.add(template, Target("api", _MODELLED[(template, method)]), [method])
        if echoed:
            mux.add(template, Target("api", echo), echoed)


def controller_mux(release: KagentRelease = DEFAULT) -> Mux[Target]:
    """``release``'s route table, in its registration order."""
    mux: Mux[Target] = Mux()
    mux.add("/health", Target("health", health), ["GET"])
    mux.add("/version", Target("health", version), ["GET"])
    _echoes(mux, _CONFIG_ROUTES)
    if release.owns_sessions:
        for template, handler, methods in _SESSION_ROUTES_0_10:
            mux.add(template, Target("api", handler), methods)
    else:
        _echoes(mux, _SESSION_ROUTES_0_9)
    _echoes(mux, _TOOL_ROUTES)
    if release.newer:
        _echoes(mux, _MCP_APP_ROUTES)
    _echoes(mux, _AGENT_ROUTES)
    mux.add("/api/memories/sessions", Target("memory", memory_api.add_session), ["POST"])
    mux.add("/api/memories/sessions/batch", Target("memory", memory_api.add_session_batch), ["POST"])
    mux.add("/api/memories/search", Target("memory", memory_api.search), ["POST"])
    mux.add("/api/memories", Target("memory", memory_api.list_memories), ["GET"])
    mux.add("/api/memories", Target("memory", memory_api.delete_memories), ["DELETE"])
    _echoes(mux, _LATE_ECHO_ROUTES)
    _echoes(mux, _HARNESS_SESSION_ROUTES if release.newer else _SANDBOX_SSH_ROUTES)
    mux.add("/api/agentharnesses/{namespace}/{name}/", Target("api", echo), prefix=True)
    mux.add("/api/a2a/{namespace}/{name}", Target("a2a", a2a.handle), prefix=True)
    mux.add("/api/a2a-sandboxes/{namespace}/{name}", Target("a2a", a2a.handle), prefix=True)
    mux.add("/mcp", Target("api", echo), prefix=True)
    return mux


def _log_completed(request: web.Request, status: int) -> None:
    """kagent's logging middleware: every routed request, with its ``user_id`` query parameter if any."""
    fields: dict[str, object] = {"method": request.method, "path": request.path, "remote_addr": request.remote or ""}
    if user_id := go_query_get(request.rel_url.raw_query_string, "user_id"):
        fields["user_id"] = user_id
    request.app[STATE].log.info("http", "Request completed", **fields, status=status)


def _dispatcher(mux: Mux[Target], admin: Mux[Handler]) -> Handler:
    async def dispatch(request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/__devstack/"):
            found = admin.resolve(request.method, request.path)
            if found.route is None:
                return not_found() if found.status == 404 else method_not_allowed()
            return await found.route.target(request)
        match = mux.resolve(request.method, request.path, request.rel_url.raw_query_string)
        request[PARAMS] = match.params
        kind = match.route.target.kind if match.route is not None else "unmatched"
        agent = None
        if kind == "a2a":
            agent = a2a.agent_key(request)
        await request.app[RECORDER].record(request, kind, agent)
        if match.status == 301 and match.location is not None:
            return moved(match.location)
        if match.route is None:
            return method_not_allowed() if match.status == 405 else not_found()
        if request.app[STATE].sessions is not None and (refused := sessions.check_share(request)) is not None:
            return refused  # kagent's share middleware runs before its request logging
        response = await match.route.target.handler(request)
        _log_completed(request, response.status)
        return response

    return dispatch


async def _http_client(app: web.Application) -> AsyncIterator[None]:
    # One client session per app for the simulated runtime's outgoing calls.
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    app[STATE].http = session
    yield
    await session.close()


def create_kagent_app(
    store: MemoryStore,
    *,
    clock: Callable[[], datetime] | None = None,
    agents: Iterable[str] | None = None,
    stream_delay_s: float = 0.05,
    runtime: RuntimeConfig | None = None,
    middlewares: Iterable[Middleware] = (),
    release: KagentRelease = DEFAULT,
) -> web.Application:
    """Build the stand-in controller app of ``release`` over an opened store.

    ``clock`` is the controller's clock (TTL arithmetic; default: the store's clock); ``agents``
    limits which ``ns/name`` A2A agents exist (default: all); ``runtime`` makes listed agents
    call memory and embeddings like kagent's Python runtime; ``middlewares`` run before kagent's
    router (fault injection and wire capture).
    """
    app = web.Application(client_max_size=_MAX_BODY, middlewares=list(middlewares))
    now = clock if clock is not None else store.now
    app[STATE] = KagentState(
        store,
        now,
        frozenset(agents) if agents is not None else None,
        stream_delay_s,
        runtime,
        release=release,
        sessions=sessions.SessionBook(now) if release.owns_sessions else None,
    )
    app[RECORDER] = Recorder()
    app[definitions.BOOK] = definitions.DefinitionBook()
    app.router.add_route("*", "/{tail:.*}", _dispatcher(controller_mux(release), admin_mux()))
    app.cleanup_ctx.append(_http_client)
    return app
