"""The OpenAPI 3.1 document of the control API, generated from its route table and the pydantic models.

Served at ``/v1/openapi.json`` and checked in as ``docs/openapi.json`` (a test keeps the two
identical); regenerate with ``python -m sidecar.control.openapi docs/openapi.json``.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from sidecar.control import models as m
from sidecar.control.routes import OPS, PARAMS, Op
from sidecar.reasons import STATUS, Reason

_REF = "#/components/schemas/{model}"
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
        out["parameters"] = [{"name": name, **PARAMS[name]} for name in op.params]
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
