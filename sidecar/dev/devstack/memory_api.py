"""kagent's five memory handlers (``handlers/memory.go``, the same in v0.9.11 and v0.10), flaws included.

Identity comes only from the body or query (no ownership check); insert uses agent_name exactly
as sent, search too in v0.9.11 (v0.10's DB client also matches the ``-``→``_`` spelling and
shrugs off a failed access-count update), while list and delete also match the ``_`` spelling; search has no
expiry filter and no maximum limit, counts rows min_score then drops, and fails with 500 after
counting when an all-zero vector is involved; 500 answers carry the raw database error. These texts are
kagent's, reproduced on purpose: the gateway in front is what must never echo them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from sidecar.dev.devstack.gohttp import go_error, go_json
from sidecar.dev.devstack.gojson import GoDecodeError, Kind, Raw, decode_struct, go_query_get
from sidecar.dev.devstack.state import STATE
from sidecar.dev.devstack.store import DIM, NewMemory, StoreError

MAX_BATCH = 50
DEFAULT_TTL_DAYS = 15
DEFAULT_LIMIT = 5
INVALID_BODY = "Invalid request body"
MISSING_FIELDS = "Missing required fields (agent_name, user_id, vector)"
MISSING_BATCH_FIELDS = "Missing required fields in batch item"
MISSING_QUERY = "Missing required query parameters (agent_name, user_id)"
MARSHAL_FAILED = "Error marshalling JSON response"

SAVE_FIELDS: Mapping[str, Kind] = {
    "agent_name": "string",
    "user_id": "string",
    "content": "string",
    "vector": "float32s",
    "metadata": "raw",
    "ttl_days": "int",
}
BATCH_FIELDS: Mapping[str, Kind] = {"items": (SAVE_FIELDS,)}
SEARCH_FIELDS: Mapping[str, Kind] = {
    "agent_name": "string",
    "user_id": "string",
    "vector": "float32s",
    "limit": "int",
    "min_score": "float64",
}
_ZERO_TIME = "0001-01-01T00:00:00Z"


def rfc3339(value: datetime | None, *, nano: bool = False) -> str:
    """Go's time.RFC3339 (seconds) or RFC3339Nano (trailing zeros trimmed) in UTC."""
    if value is None:
        return _ZERO_TIME
    value = value.astimezone(UTC)
    text = f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    if nano and value.microsecond:
        text += "." + f"{value.microsecond:06d}".rstrip("0")
    return text + "Z"


def ttl_delta(ttl_days: int) -> timedelta:
    """``time.Duration(ttlDays) * 24 * time.Hour``, wrapping on int64 overflow as Go does."""
    nanos = (ttl_days * 86_400 * 10**9 + 2**63) % 2**64 - 2**63
    return timedelta(microseconds=nanos // 1000)


def _vector_problem(fields: Mapping[str, Any], missing: str) -> str | None:
    vector = fields.get("vector") or []
    if not fields.get("agent_name") or not fields.get("user_id") or not vector:
        return missing
    if len(vector) != DIM:
        return f"vector must have exactly {DIM} dimensions, got {len(vector)}"
    return None


def _new_memory(fields: Mapping[str, Any], clock: Callable[[], datetime]) -> NewMemory:
    ttl = fields.get("ttl_days", 0)
    metadata = fields.get("metadata")
    return NewMemory(
        agent_name=fields["agent_name"],
        user_id=fields["user_id"],
        content=fields.get("content", ""),
        embedding=fields["vector"],
        metadata=metadata.text if isinstance(metadata, Raw) else "{}",
        expires_at=clock() + ttl_delta(ttl if ttl > 0 else DEFAULT_TTL_DAYS),
    )


async def _checked_body(request: web.Request, spec: Mapping[str, Kind]) -> dict[str, Any] | web.Response:
    """Decode a save or search body; a 400 response when it is not one."""
    try:
        fields = decode_struct(await request.read(), spec)
    except GoDecodeError:
        return go_error(400, INVALID_BODY)
    if problem := _vector_problem(fields, MISSING_FIELDS):
        return go_error(400, problem)
    return fields


async def add_session(request: web.Request) -> web.Response:
    """POST /api/memories/sessions -> 201 {"id"}."""
    state = request.app[STATE]
    fields = await _checked_body(request, SAVE_FIELDS)
    if isinstance(fields, web.Response):
        return fields
    try:
        new_id = await state.store.insert(_new_memory(fields, state.clock))
    except StoreError as exc:
        return go_error(500, f"failed to save memory: {exc}")
    state.log.info(
        "http",
        "added memory",
        method=request.method,
        path=request.path,
        id=new_id,
        userID=fields["user_id"],
        agentName=fields["agent_name"],
    )
    return go_json(201, {"id": new_id})


async def add_session_batch(request: web.Request) -> web.Response:
    """POST /api/memories/sessions/batch -> 201 {"count"}; every item is checked before any write."""
    state = request.app[STATE]
    try:
        items = decode_struct(await request.read(), BATCH_FIELDS).get("items") or []
    except GoDecodeError:
        return go_error(400, INVALID_BODY)
    if not items:
        return go_error(400, "Empty batch")
    if len(items) > MAX_BATCH:
        return go_error(400, f"batch size {len(items)} exceeds maximum allowed size of {MAX_BATCH}")
    for item in items:
        if problem := _vector_problem(item, MISSING_BATCH_FIELDS):
            return go_error(400, problem)
    try:
        await state.store.insert_batch([_new_memory(item, state.clock) for item in items])
    except StoreError as exc:
        return go_error(500, f"failed to save memory batch: {exc}")
    return go_json(201, {"count": len(items)})


async def search(request: web.Request) -> web.Response:
    """POST /api/memories/search -> 200 bare array, min_score applied after the access bump."""
    state = request.app[STATE]
    fields = await _checked_body(request, SEARCH_FIELDS)
    if isinstance(fields, web.Response):
        return fields
    limit = fields.get("limit", 0)
    min_score = fields.get("min_score", 0.0)
    try:
        hits = await state.store.search(
            fields["agent_name"],
            fields["user_id"],
            fields["vector"],
            limit if limit > 0 else DEFAULT_LIMIT,
            both_spellings=state.release.search_matches_both_spellings,
            best_effort_bump=state.release.access_bump_best_effort,
        )
    except StoreError as exc:
        return go_error(500, f"search failed: {exc}")
    if any(math.isnan(hit.score) for hit in hits):
        # A NaN score survives the min_score filter (NaN < x is false) and json.Marshal refuses it,
        # after the rows were already counted as accessed.
        return go_error(500, MARSHAL_FAILED)
    return go_json(
        200,
        [
            {
                "id": hit.row.id,
                "content": hit.row.content or "",
                "score": hit.score,
                "metadata": Raw(hit.row.metadata or "{}"),
                "created_at": rfc3339(hit.row.created_at, nano=True),
            }
            for hit in hits
            if not (min_score > 0 and hit.score < min_score)
        ],
    )


def _identity(request: web.Request) -> tuple[str, str]:
    raw = request.rel_url.raw_query_string
    return go_query_get(raw, "agent_name"), go_query_get(raw, "user_id")


async def list_memories(request: web.Request) -> web.Response:
    """GET /api/memories -> 200 bare array ordered by access_count, expired rows included."""
    agent_name, user_id = _identity(request)
    if not agent_name or not user_id:
        return go_error(400, MISSING_QUERY)
    try:
        rows = await request.app[STATE].store.list_memories(agent_name, user_id)
    except StoreError as exc:
        return go_error(500, f"failed to list memories: {exc}")
    out = []
    for row in rows:
        item: dict[str, Any] = {
            "id": row.id,
            "content": row.content or "",
            "access_count": row.access_count,
            "created_at": rfc3339(row.created_at),
        }
        if row.expires_at is not None:
            item["expires_at"] = rfc3339(row.expires_at)
        out.append(item)
    return go_json(200, out)


async def delete_memories(request: web.Request) -> web.Response:
    """DELETE /api/memories -> 200 {"status":"deleted"}, even when nothing matched."""
    agent_name, user_id = _identity(request)
    if not agent_name or not user_id:
        return go_error(400, MISSING_QUERY)
    try:
        await request.app[STATE].store.delete(agent_name, user_id)
    except StoreError as exc:
        return go_error(500, f"failed to delete memory: {exc}")
    return go_json(200, {"status": "deleted"})
