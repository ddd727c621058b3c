"""Shared pieces of the control handlers: app keys, refusals, JSON answers, body parsing.

A handler refuses by raising :class:`Refused`; the middleware turns it into the one error shape
(``reasons.error_body``), writes a content-free audit row and logs the code. Nothing from the
request or from kagent is ever formatted into a refusal.
"""

from __future__ import annotations

import json
from typing import Final, TypeVar

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ValidationError

from sidecar.erasure.engine import ErasureEngine
from sidecar.erasure.sweeper import Sweepers
from sidecar.governance import Governance
from sidecar.identity.tokens import Verifier
from sidecar.reasons import Reason
from sidecar.state.types import Scope

ENGINE: Final = web.AppKey("erasure_engine", ErasureEngine)
OPERATORS: Final = web.AppKey("operator_verifier", Verifier)
KAGENT: Final = web.AppKey("kagent_session", aiohttp.ClientSession)
SWEEPERS: Final = web.AppKey("sweepers", Sweepers)
OPERATION: Final = web.RequestKey("control_operation", str)
MAX_BODY_BYTES: Final = 16 * 1024

M = TypeVar("M", bound=BaseModel)


class Refused(Exception):
    """A control request is refused with ``status`` and ``reason``; ``audited`` when already recorded."""

    def __init__(self, status: int, reason: Reason, *, scope_id: str | None = None, audited: bool = False,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(reason.value)
        self.status, self.reason, self.scope_id = status, reason, scope_id
        self.audited, self.headers = audited, headers or {}


def operation(request: web.Request, name: str) -> None:
    """Name the control operation of this request (audit rows and logs use it)."""
    request[OPERATION] = name


def ok(payload: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
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
        raise Refused(400, Reason.BAD_REQUEST) from None


async def parse(request: web.Request, model: type[M]) -> M:
    """Parse the required JSON body into ``model``; missing or malformed is bad_request."""
    body = await parse_optional(request, model)
    if body is None:
        raise Refused(400, Reason.BAD_REQUEST)
    return body


async def load_scope(gov: Governance, scope_id: str) -> Scope:
    """The scope named in the path, or 404 not_found."""
    scope: Scope | None = await gov.store.get_scope(scope_id)
    if scope is None:
        raise Refused(404, Reason.NOT_FOUND)
    return scope
