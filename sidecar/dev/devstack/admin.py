"""Test and demo controls of the kagent stand-in under ``/__devstack/`` (not part of kagent).

``POST prune`` runs the cleanup job now; ``POST clock {"advance_s"}`` moves the stand-in clock;
``GET rows?agent_name&user_id`` dumps rows (content included); ``POST|DELETE db-fault`` makes
the database fail; ``POST|DELETE runtime`` points the simulated agent runtime somewhere.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from aiohttp import web

from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.gomux import Mux
from sidecar.dev.devstack.runtime import RuntimeConfig
from sidecar.dev.devstack.state import STATE
from sidecar.dev.devstack.store import DEFAULT_DB_ERROR, OPS, DbFault, MemoryRow, StoreError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def row_json(row: MemoryRow) -> dict[str, Any]:
    """A row as JSON; the embedding is reduced to its length."""
    return {
        "id": row.id,
        "agent_name": row.agent_name,
        "user_id": row.user_id,
        "content": row.content,
        "metadata": row.metadata,
        "created_at": _iso(row.created_at),
        "expires_at": _iso(row.expires_at),
        "access_count": row.access_count,
        "embedding_dims": None if row.embedding is None else len(row.embedding),
    }


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise web.HTTPBadRequest(text='{"error":"expected a JSON object"}', content_type="application/json")
    return value


async def prune(request: web.Request) -> web.Response:
    """Run kagent's PruneExpiredMemories now."""
    try:
        await request.app[STATE].store.prune()
    except StoreError as exc:
        return web.json_response({"error": str(exc)}, status=500)
    return web.json_response({"status": "pruned"})


async def clock(request: web.Request) -> web.Response:
    """Move every adjustable clock of the stand-in forward by ``advance_s`` seconds."""
    state = request.app[STATE]
    advance = (await _body(request)).get("advance_s")
    if not isinstance(advance, (int, float)) or isinstance(advance, bool):
        return web.json_response({"error": "advance_s must be a number"}, status=400)
    clocks = {id(c): c for c in (state.clock, state.store.now) if isinstance(c, DevClock)}
    if not clocks:
        return web.json_response({"error": "the clock is not adjustable"}, status=409)
    for c in clocks.values():
        c.advance(float(advance))
    return web.json_response({"now": state.clock().isoformat()})


async def rows(request: web.Request) -> web.Response:
    """Every column but the embedding, for the rows matching the optional filters."""
    found = await request.app[STATE].store.rows(request.query.get("agent_name"), request.query.get("user_id"))
    return web.json_response([row_json(r) for r in found])


async def set_db_fault(request: web.Request) -> web.Response:
    """Make store calls fail: ``{"message", "ops": [...], "after", "times"}``, all optional."""
    body = await _body(request)
    ops = frozenset(body.get("ops") or ())
    if not ops <= OPS:
        return web.json_response({"error": f"ops must be among {sorted(OPS)}"}, status=400)
    request.app[STATE].store.fault = DbFault(
        str(body.get("message", DEFAULT_DB_ERROR)), ops, int(body.get("after", 0)), body.get("times")
    )
    return web.json_response({"status": "set"})


async def clear_db_fault(request: web.Request) -> web.Response:
    """Stop failing store calls."""
    request.app[STATE].store.fault = None
    return web.json_response({"status": "cleared"})


async def set_runtime(request: web.Request) -> web.Response:
    """Point the simulated runtime: ``{"memory_base_url", "embedding_base_url", "memory_agents": [...]}``."""
    body = await _body(request)
    try:
        cfg = RuntimeConfig(
            str(body["memory_base_url"]),
            str(body["embedding_base_url"]),
            frozenset(body.get("memory_agents") or ()),
            ttl_days=int(body.get("ttl_days", 0)),
        )
    except (KeyError, TypeError, ValueError):
        return web.json_response({"error": "memory_base_url and embedding_base_url are required"}, status=400)
    request.app[STATE].runtime = cfg
    return web.json_response({"status": "set"})


async def clear_runtime(request: web.Request) -> web.Response:
    """Turn the simulated runtime off (agents only echo)."""
    request.app[STATE].runtime = None
    return web.json_response({"status": "cleared"})


def admin_mux() -> Mux[Handler]:
    """The ``/__devstack/`` routes."""
    mux: Mux[Handler] = Mux()
    mux.add("/__devstack/prune", prune, ["POST"])
    mux.add("/__devstack/clock", clock, ["POST"])
    mux.add("/__devstack/rows", rows, ["GET"])
    mux.add("/__devstack/db-fault", set_db_fault, ["POST"])
    mux.add("/__devstack/db-fault", clear_db_fault, ["DELETE"])
    mux.add("/__devstack/runtime", set_runtime, ["POST"])
    mux.add("/__devstack/runtime", clear_runtime, ["DELETE"])
    return mux
