"""The OpenAPI 3.1 document of the control API, generated from the pydantic models.

Served at ``/v1/openapi.json`` and checked in as ``docs/openapi.json`` (a test keeps the two
identical); regenerate with ``python -m sidecar.control.openapi docs/openapi.json``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from sidecar.control import models as m
from sidecar.reasons import STATUS, Reason

_REF = "#/components/schemas/{model}"
_SUBJECT: list[dict[str, list[str]]] = [{"subjectToken": []}]
_OPERATOR: list[dict[str, list[str]]] = [{"operatorToken": []}]
_EITHER = [*_SUBJECT, *_OPERATOR]
#: What each error status means on the control API, after the codes that answer with it.
_MEANING = {
    400: "malformed input.",
    401: "no valid bearer token of the right type, or a subject token already spent.",
    403: "the caller may not do this (or another reason code).",
    413: "the request body exceeds 16 KiB.",
    500: "Location names the evidence.",
    502: "kagent did not answer as expected.",
}
#: Codes the control API answers with a status of its own (``Refusal(status=...)``), beside STATUS.
_ALSO: dict[int, tuple[Reason, ...]] = {403: (Reason.NOT_SUBJECT,), 409: (Reason.ERASURE_FAILED,)}


def _error_description(status: int) -> str:
    """The codes that answer ``status`` (from reasons.STATUS, the one table), then what it means."""
    codes = [*_ALSO.get(status, ()), *(r for r, s in STATUS.items() if s == status)]
    text = ", ".join(r.value for r in codes)
    return f"{text}: {_MEANING[status]}" if status in _MEANING else f"{text}."


_PARAMS: dict[str, dict[str, object]] = {
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
    "X-Memgov-Context": {
        "in": "header",
        "required": True,
        "description": "Fresh signed delegation context attesting the control room (R-5).",
        "schema": {"type": "string"},
    },
}


@dataclass(frozen=True)
class Op:
    """One operation of the control API."""

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
    Op(
        "post",
        "/v1/scopes/{scope_id}/forget-all",
        "forgetAll",
        "Erase every entry, keep consent. First call: confirmation token; second call with it: erasure.",
        _SUBJECT,
        {202: m.ConfirmationIssued, 200: m.ErasureRecord},
        (400, 401, 403, 404, 409, 413, 500, 502),
        m.Confirm,
        body_required=False,
        params=("scope_id",),
    ),
    Op(
        "post",
        "/v1/scopes/{scope_id}/off",
        "turnOff",
        "Disable, then erase every entry. First call: confirmation token; second call with it: erasure.",
        _SUBJECT,
        {202: m.ConfirmationIssued, 200: m.ErasureRecord},
        (400, 401, 403, 404, 409, 413, 500, 502),
        m.Confirm,
        body_required=False,
        params=("scope_id",),
    ),
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
        "/v1/erasures/{erasure_id}",
        "getErasure",
        "Content-free erasure evidence (subject or operator).",
        _EITHER,
        {200: m.ErasureRecord},
        (401, 403, 404),
        params=("erasure_id",),
    ),
)


def _schemas() -> dict[str, object]:
    inputs = {op.body for op in OPS if op.body is not None}
    outputs = {model for op in OPS for model in op.ok.values()} | {m.ErrorOut}
    pairs: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (model, "validation") for model in sorted(inputs, key=lambda c: c.__name__)
    ]
    pairs += [(model, "serialization") for model in sorted(outputs, key=lambda c: c.__name__)]
    _, top = models_json_schema(pairs, ref_template=_REF)
    return dict(sorted(top.get("$defs", {}).items()))


def _json(model: type[BaseModel]) -> dict[str, object]:
    return {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}}


def _operation(op: Op) -> dict[str, object]:
    out: dict[str, object] = {"operationId": op.operation_id, "summary": op.summary, "security": op.security}
    if op.params:
        out["parameters"] = [{"name": name, **_PARAMS[name]} for name in op.params]
    if op.body is not None:
        out["requestBody"] = {"required": op.body_required, "content": _json(op.body)}
    responses: dict[str, object] = {
        str(code): {"description": model.__doc__ or "", "content": _json(model)}
        for code, model in sorted(op.ok.items())
    }
    if not op.ok:
        responses["200"] = {"description": "The OpenAPI document.", "content": {"application/json": {"schema": {}}}}
    for code in op.errors:
        responses[str(code)] = {"description": _error_description(code), "content": _json(m.ErrorOut)}
    out["responses"] = responses
    return out


@lru_cache(maxsize=1)
def _document() -> str:
    paths: dict[str, dict[str, object]] = {}
    for op in OPS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    doc = {
        "openapi": "3.1.0",
        "info": {
            "title": "memgov control API",
            "version": "1",
            "description": "Consent, private inspect, exact erasure with evidence, and offboarding for "
            "kagent memory governed by memgov. See docs/control-api.md.",
        },
        "paths": paths,
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "subjectToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "JOSE typ memgov-subject+jwt, signed by the bridge key; sub is "
                    "the acting MXID; iat, exp (at most 300 s later) and jti required. "
                    "Consent changes and erasures spend the jti: one token, one change. "
                    "A delegation context is never accepted here.",
                },
                "operatorToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "JOSE typ memgov-operator+jwt, signed by the operator key; "
                    "role: operator; iat and exp (at most 1 h later) required.",
                },
            },
        },
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def openapi_document() -> dict[str, object]:
    """The document as a mapping."""
    doc = json.loads(_document())
    if not isinstance(doc, dict):
        raise TypeError("the OpenAPI document is not a JSON object")
    return doc


def openapi_text() -> str:
    """The document exactly as checked in under docs/openapi.json."""
    return _document()


async def openapi(request: web.Request) -> web.Response:
    """GET /v1/openapi.json (no authentication)."""
    return web.Response(text=_document(), content_type="application/json")


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(openapi_text())
