"""The control API application (``:8081``): routes, the content-free error middleware, lifecycle.

``control_plane(gov)`` is what ``memgov serve`` enters: it resumes every unfinished erasure
before the listener opens (so a restarted gateway finishes what a killed one started), builds
the app, and runs the sweepers until the gateway stops.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from sidecar.contentstore.adapters import AdapterError
from sidecar.control.entries import forget_one, inspect
from sidecar.control.erase import forget_all, off, offboard
from sidecar.control.erasures import get_erasure
from sidecar.control.http import ERASURE, MAX_BODY_BYTES, OPERATION, OPERATORS, SWEEPERS
from sidecar.control.openapi import openapi
from sidecar.control.scopes import create_scope, grant_consent, scope_status, withdraw_consent
from sidecar.decide.ports import decision_log
from sidecar.erasure.machine import ErasureEngine
from sidecar.erasure.sweeper import Sweepers
from sidecar.governance import GOVERNANCE, Governance
from sidecar.identity.tokens import load_verifier
from sidecar.logs import get_logger
from sidecar.reasons import Reason, Refusal, new_decision_id
from sidecar.relay import DECISION_ID, refusal_answer
from sidecar.state.codec import InvalidValue
from sidecar.state.types import StateError

log = get_logger("control")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

#: (method, path, handler) — the whole control API (SPEC §5); docs/openapi.json describes each.
ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/v1/openapi.json", openapi),
    ("POST", "/v1/scopes", create_scope),
    ("GET", "/v1/scopes/{scope_id}", scope_status),
    ("PUT", "/v1/scopes/{scope_id}/consent", grant_consent),
    ("DELETE", "/v1/scopes/{scope_id}/consent", withdraw_consent),
    ("GET", "/v1/scopes/{scope_id}/entries", inspect),
    ("DELETE", "/v1/scopes/{scope_id}/entries/{entry_id}", forget_one),
    ("POST", "/v1/scopes/{scope_id}/forget-all", forget_all),
    ("POST", "/v1/scopes/{scope_id}/off", off),
    ("POST", "/v1/principals/{mxid}/offboard", offboard),
    ("GET", "/v1/erasures/{erasure_id}", get_erasure),
)


#: The reason code of each answer aiohttp's router gives by itself.
_ROUTER: Final = {
    HTTPStatus.NOT_FOUND: Reason.NOT_FOUND,
    HTTPStatus.METHOD_NOT_ALLOWED: Reason.ROUTE_DENIED,
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: Reason.BODY_TOO_LARGE,
}


async def _refusal(request: web.Request, refusal: Refusal) -> web.Response:
    """The one way a control request is refused: audit (or count) it unless already recorded, then answer."""
    if not refusal.recorded:
        gov = request.app[GOVERNANCE]
        try:
            if refusal.reason is Reason.AUTH_REQUIRED:
                # No valid credential: counted per hour, not one row each.
                await decision_log(gov).audit_log.count_refusal(
                    request.get(OPERATION) or "control", refusal.reason.value, gov.now()
                )
            else:
                await decision_log(gov).audit_log.audit(
                    "control",
                    refusal.reason.value,
                    decision_id=request[DECISION_ID],
                    scope_id=refusal.scope_id,
                    operation=request.get(OPERATION),
                    now=gov.now(),
                )
        except StateError:
            log.error("audit.failed", decision_id=request[DECISION_ID], reason=refusal.reason.value)
    return refusal_answer(request, refusal)


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Refusal as refusal:
        return await _refusal(request, refusal)
    except web.HTTPException as exc:
        # The router's own answers (no such route or method, body over the limit), in the one error shape.
        status = HTTPStatus(exc.status)
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return refusal_answer(request, Refusal(_ROUTER.get(status, Reason.BAD_REQUEST), status=status, headers=allow))
    except AdapterError as exc:
        # The content store did not do its part: a bad gateway whatever the code.
        return await _refusal(request, Refusal(exc.reason, status=HTTPStatus.BAD_GATEWAY))
    except StateError as exc:
        if exc.reason is Reason.STATE_UNAVAILABLE:
            # Counted, never a row of its own: whether the caller's credential held may be what the
            # store could not tell. While the store is down the count waits in its spool.
            gov = request.app[GOVERNANCE]
            await decision_log(gov).audit_log.count_refusal(
                request.get(OPERATION) or "control", exc.reason.value, gov.now()
            )
            return refusal_answer(request, Refusal(exc.reason))
        # A missing row; anything else is ours.
        return refusal_answer(
            request, Refusal(Reason.NOT_FOUND if exc.reason is Reason.NOT_FOUND else Reason.INTERNAL_ERROR)
        )
    except InvalidValue:
        # The state codec refuses a value by shape or length; the value itself is never kept.
        return await _refusal(request, Refusal(Reason.BAD_REQUEST))


@web.middleware
async def observe_control(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Decision id, content-free errors, no caching, one sanitized log line per request."""
    started = time.perf_counter()
    request[DECISION_ID] = new_decision_id()
    try:
        resp = await _answer(request, handler)
    except Exception as exc:  # noqa: BLE001 - SECURITY: never let an exception text reach the client
        log.error("control.failed", error_type=type(exc).__name__, decision_id=request[DECISION_ID])
        resp = refusal_answer(request, Refusal(Reason.INTERNAL_ERROR))
    # Answers carry personal data (inspect pages, evidence); nothing in between may keep them.
    resp.headers["Cache-Control"] = "no-store"
    info = request.match_info.route.resource
    log.info(
        "control.request",
        method=request.method if request.method in _METHODS else "OTHER",
        route=info.canonical if info is not None else None,
        operation=request.get(OPERATION),
        status=resp.status,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
        decision_id=request[DECISION_ID],
    )
    return resp


def create_control_app(gov: Governance, engine: ErasureEngine) -> web.Application:
    """Build the control API around one governance runtime and erasure engine."""
    app = web.Application(middlewares=[observe_control], client_max_size=MAX_BODY_BYTES)
    app[GOVERNANCE] = gov
    app[ERASURE] = engine
    if gov.settings.trust.operator_key_file is not None:
        app[OPERATORS] = load_verifier(gov.settings.trust.operator_key_file, setting="trust.operator_key_file")
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    return app


@asynccontextmanager
async def control_plane(gov: Governance, *, resume: bool = True) -> AsyncIterator[web.Application]:
    """Resume unfinished erasures (unless ``resume`` is False), then yield the control app while the sweepers run."""
    engine = ErasureEngine(gov)
    if resume:
        await engine.resume_all()
    app = create_control_app(gov, engine)
    sweepers = app[SWEEPERS] = Sweepers(gov, engine)
    sweepers.start()
    try:
        yield app
    finally:
        await sweepers.stop()
