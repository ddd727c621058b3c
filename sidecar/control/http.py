"""Shared pieces of the control handlers: app and request keys, JSON answers, body parsing.

A handler refuses by raising ``reasons.Refusal``; the middleware (``app``) turns it into the one
error shape (``reasons.error_body``), writes a content-free audit row or refusal count and logs
the code. Nothing from the request or from kagent is ever formatted into a refusal.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Final, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from sidecar.erasure.sweeper import Sweepers
from sidecar.reasons import Reason, Refusal

SWEEPERS: Final = web.AppKey("sweepers", Sweepers)
OPERATION: Final = web.RequestKey("control_operation", str)
#: The caller's bearer token verified (set before any state is read, so an outage's refusal knows it).
CREDENTIALED: Final = web.RequestKey("control_credentialed", bool)
MAX_BODY_BYTES: Final = 16 * 1024

M = TypeVar("M", bound=BaseModel)
#: A page's size (``limit``) by default, and at most (inspect pages, erasure listings).
DEFAULT_PAGE = 20
MAX_PAGE = 50


def page_limit(raw: str | None) -> int:
    """The ``limit`` query parameter: 1 to MAX_PAGE, DEFAULT_PAGE when absent; anything else is bad_request."""
    if raw is None:
        return DEFAULT_PAGE
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise Refusal(Reason.BAD_REQUEST)
    return int(raw)


def operation(request: web.Request, name: str) -> None:
    """Name the control operation of this request (audit rows and logs use it)."""
    request[OPERATION] = name


def ok(payload: BaseModel, status: HTTPStatus = HTTPStatus.OK, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer built from a response model."""
    body = json.dumps(payload.model_dump(mode="json"), separators=(",", ":")).encode()
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


async def parse_optional(request: web.Request, model: type[M]) -> M | None:
    """Parse the JSON body into ``model``; an empty body is None, anything malformed bad_request."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return model.model_validate_json(raw)
    except ValidationError:
        # SECURITY: pydantic messages quote the input; only the code goes back.
        raise Refusal(Reason.BAD_REQUEST) from None


async def parse(request: web.Request, model: type[M]) -> M:
    """Parse the required JSON body into ``model``; missing or malformed is bad_request."""
    body = await parse_optional(request, model)
    if body is None:
        raise Refusal(Reason.BAD_REQUEST)
    return body
