"""The control API application (``:8081``): routes, the content-free error middleware, lifecycle.

``control_plane(gov)`` is what ``memgov serve`` enters: it resumes every unfinished erasure
before the listener opens (so a restarted gateway finishes what a killed one started), builds
the app, and runs the sweepers until the gateway stops.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from sidecar.control.entries import forget_one, inspect
from sidecar.control.erase import forget_all, off, offboard
from sidecar.control.evidence import get_erasure
from sidecar.control.http import ENGINE, KAGENT, MAX_BODY_BYTES, OPERATION, OPERATORS, SWEEPERS, Refused
from sidecar.control.openapi import openapi
from sidecar.control.scopes import create_scope, grant_consent, scope_status, withdraw_consent
from sidecar.enforce.runtime import GOVERNANCE, Governance
from sidecar.erasure.adapters import AdapterError
from sidecar.erasure.engine import ErasureEngine
from sidecar.erasure.sweeper import Sweepers
from sidecar.identity.tokens import load_verifier
from sidecar.logs import get_logger
from sidecar.proxy import DECISION_ID, json_error
from sidecar.reasons import Reason, new_decision_id
from sidecar.state.types import StateError

log = get_logger("control")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_KAGENT_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=5)

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


async def _refusal(request: web.Request, refused: Refused) -> web.Response:
    if not refused.audited:
        gov = request.app[GOVERNANCE]
        try:
            if refused.reason is Reason.AUTH_REQUIRED:
                # No valid credential: counted per hour, not one row each.
                await gov.store.count_refusal(request.get(OPERATION) or "control", refused.reason.value, gov.now())
            else:
                await gov.store.audit("control", refused.reason.value, decision_id=request[DECISION_ID],
                                      scope_id=refused.scope_id, operation=request.get(OPERATION), now=gov.now())
        except StateError:
            log.error("audit.failed", decision_id=request[DECISION_ID], reason=refused.reason.value)
    return json_error(request, refused.status, refused.reason, headers=refused.headers)


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Refused as refused:
        return await _refusal(request, refused)
    except web.HTTPException as exc:
        reason = {404: Reason.NOT_FOUND, 405: Reason.ROUTE_DENIED, 413: Reason.BODY_TOO_LARGE}.get(
            exc.status, Reason.BAD_REQUEST)
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return json_error(request, exc.status, reason, headers=allow)
    except AdapterError as exc:
        return await _refusal(request, Refused(502, exc.reason))
    except StateError as exc:
        status = {Reason.NOT_FOUND: 404, Reason.STATE_UNAVAILABLE: 503}.get(exc.reason, 500)
        return json_error(request, status, exc.reason if status != 500 else Reason.INTERNAL_ERROR)
    except ValueError:
        # The state codec refuses a value by shape or length; the value itself is never kept.
        return await _refusal(request, Refused(400, Reason.BAD_REQUEST))


@web.middleware
async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Decision id, content-free errors, no caching, one sanitized log line per request."""
    started = time.perf_counter()
    request[DECISION_ID] = new_decision_id()
    try:
        resp = await _answer(request, handler)
    except Exception as exc:  # noqa: BLE001 - SECURITY: never let an exception text reach the client
        log.error("control.failed", error_type=type(exc).__name__, decision_id=request[DECISION_ID])
        resp = json_error(request, 500, Reason.INTERNAL_ERROR)
    # Answers carry personal data (inspect pages, evidence); nothing in between may keep them.
    resp.headers["Cache-Control"] = "no-store"
    info = request.match_info.route.resource
    log.info("control.request", method=request.method if request.method in _METHODS else "OTHER",
             route=info.canonical if info is not None else None, operation=request.get(OPERATION),
             status=resp.status, duration_ms=round((time.perf_counter() - started) * 1000, 3),
             decision_id=request[DECISION_ID])
    return resp


async def _kagent_session(app: web.Application) -> AsyncIterator[None]:
    async with aiohttp.ClientSession(timeout=_KAGENT_TIMEOUT) as session:
        app[KAGENT] = session
        yield


def create_control_app(gov: Governance, engine: ErasureEngine) -> web.Application:
    """Build the control API around one governance runtime and erasure engine."""
    app = web.Application(middlewares=[observe], client_max_size=MAX_BODY_BYTES)
    app[GOVERNANCE] = gov
    app[ENGINE] = engine
    if gov.settings.trust.operator_key_file is not None:
        app[OPERATORS] = load_verifier(gov.settings.trust.operator_key_file, setting="trust.operator_key_file")
    app.cleanup_ctx.append(_kagent_session)
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
