"""The control API's routes, declared once: the app registers a handler per operation id, and the
OpenAPI document (``openapi.py``) is generated from the same table."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from sidecar.control import models as m
from sidecar.state.types import ErasureKind, ErasureState

_SUBJECT: list[dict[str, list[str]]] = [{"subjectToken": []}]
_OPERATOR: list[dict[str, list[str]]] = [{"operatorToken": []}]
_EITHER = [*_SUBJECT, *_OPERATOR]

PARAMS: dict[str, dict[str, object]] = {
    "scope_id": {"in": "path", "required": True, "schema": {"type": "string", "pattern": "^s[0-9a-f]{24}$"}},
    "entry_id": {"in": "path", "required": True, "schema": {"type": "string", "maxLength": 64}},
    "erasure_id": {"in": "path", "required": True, "schema": {"type": "string", "maxLength": 64}},
    "mxid": {
        "in": "path",
        "required": True,
        "description": "Complete MXID, percent-encoded.",
        "schema": {"type": "string", "maxLength": 255},
    },
    "cursor": {
        "in": "query",
        "required": False,
        "description": "next_cursor of the previous page.",
        "schema": {"type": "string", "maxLength": 64},
    },
    "limit": {
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": 50, "default": 20},
    },
    "state": {
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": [s.value for s in ErasureState]},
    },
    "kind": {
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": [k.value for k in ErasureKind]},
    },
    "scope": {
        "in": "query",
        "required": False,
        "description": "Only erasures of this scope.",
        "schema": {"type": "string", "pattern": "^s[0-9a-f]{24}$"},
    },
    "since": {
        "in": "query",
        "required": False,
        "description": "Only erasures created at or after this RFC 3339 time.",
        "schema": {"type": "string", "format": "date-time", "maxLength": 40},
    },
    "until": {
        "in": "query",
        "required": False,
        "description": "Only erasures created before this RFC 3339 time.",
        "schema": {"type": "string", "format": "date-time", "maxLength": 40},
    },
    "superseded": {
        "in": "query",
        "required": False,
        "description": "true: only failures a later verified erasure covers; false: everything else (the"
        " failures the failed gauge counts, and every erasure that did not fail).",
        "schema": {"type": "boolean"},
    },
    "X-Memgov-Context": {
        "in": "header",
        "required": True,
        "description": "Fresh signed delegation context attesting the control room (R-5).",
        "schema": {"type": "string"},
    },
}


@dataclass(frozen=True)
class Op:
    """One operation of the control API: where it is, who may call it, what it takes and answers."""

    method: str
    path: str
    operation_id: str
    summary: str
    security: list[dict[str, list[str]]]
    ok: dict[int, type[BaseModel]]
    errors: tuple[int, ...]
    body: type[BaseModel] | None = None
    body_required: bool = True
    params: tuple[str, ...] = field(default_factory=tuple)


def _confirmed(action: str, operation_id: str, what: str) -> Op:
    """Forget-all and off: the first call answers a confirmation token, the second, carrying it, the erasure."""
    return Op(
        "post",
        f"/v1/scopes/{{scope_id}}/{action}",
        operation_id,
        f"{what} First call: confirmation token; second call with it: erasure.",
        _SUBJECT,
        {202: m.ConfirmationIssued, 200: m.ErasureRecord},
        (400, 401, 403, 404, 409, 413, 500, 502),
        m.Confirm,
        body_required=False,
        params=("scope_id",),
    )


OPS: tuple[Op, ...] = (
    Op("get", "/v1/openapi.json", "getOpenApi", "This document.", [], {}, ()),
    Op(
        "post",
        "/v1/scopes",
        "createScope",
        "Create a disabled scope for the typed triple (same triple: the existing one).",
        _SUBJECT,
        {201: m.ScopeCreated, 200: m.ScopeCreated},
        (400, 401, 403, 413),
        m.CreateScope,
    ),
    Op(
        "get",
        "/v1/scopes/{scope_id}",
        "getScopeStatus",
        "Consent, counts, limits and last erasure; no content.",
        _SUBJECT,
        {200: m.ScopeStatus},
        (401, 403, 404),
        params=("scope_id",),
    ),
    Op(
        "put",
        "/v1/scopes/{scope_id}/consent",
        "grantConsent",
        "Enable for a purpose: generation+1 and a receipt.",
        _SUBJECT,
        {200: m.ConsentChange},
        (400, 401, 403, 404, 409, 413),
        m.GrantConsent,
        params=("scope_id",),
    ),
    Op(
        "delete",
        "/v1/scopes/{scope_id}/consent",
        "withdrawConsent",
        "Withdraw: disable and generation+1 (receipt), then erase every entry with evidence.",
        _SUBJECT,
        {200: m.ConsentChange},
        (401, 403, 404, 500, 502),
        params=("scope_id",),
    ),
    Op(
        "get",
        "/v1/scopes/{scope_id}/entries",
        "inspectEntries",
        "One bounded page of the subject's memory; needs a fresh attested control room.",
        _SUBJECT,
        {200: m.InspectPage},
        (400, 401, 403, 404, 502),
        params=("scope_id", "cursor", "limit", "X-Memgov-Context"),
    ),
    Op(
        "delete",
        "/v1/scopes/{scope_id}/entries/{entry_id}",
        "forgetEntry",
        "Erase exactly one entry and verify it; evidence says whether physical deletion is pending.",
        _SUBJECT,
        {200: m.ErasureRecord},
        (401, 403, 404, 500, 502),
        params=("scope_id", "entry_id"),
    ),
    _confirmed("forget-all", "forgetAll", "Erase every entry, keep consent."),
    _confirmed("off", "turnOff", "Disable, then erase every entry."),
    Op(
        "post",
        "/v1/principals/{mxid}/offboard",
        "offboardPrincipal",
        "Operator: disable every scope of one MXID first, then erase and verify each; content-free result.",
        _OPERATOR,
        {200: m.OffboardResult},
        (400, 401, 403),
        params=("mxid",),
    ),
    Op(
        "get",
        "/v1/erasures",
        "listErasures",
        "Operator: erasures by state, kind, scope and creation time, newest first; ids, codes and times only.",
        _OPERATOR,
        {200: m.ErasureList},
        (400, 401, 403),
        params=("state", "kind", "scope", "since", "until", "superseded", "cursor", "limit"),
    ),
    Op(
        "post",
        "/v1/erasures/{erasure_id}/retry",
        "retryErasure",
        "Operator: run a failed erasure again as a new erasure of the same scope, kind and entries (its"
        " chain's unfinished retry is joined, a verified one answered).",
        _OPERATOR,
        {200: m.ErasureRecord},
        (401, 403, 404, 409, 500, 502),
        params=("erasure_id",),
    ),
    Op(
        "get",
        "/v1/erasures/{erasure_id}",
        "getErasure",
        "Content-free erasure evidence (subject or operator).",
        _EITHER,
        {200: m.ErasureRecord},
        (401, 403, 404),
        params=("erasure_id",),
    ),
)
