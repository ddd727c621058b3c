"""The control API application (``:8081``): routes, the content-free error middleware, lifecycle.

Its routes are the table of ``routes.py``; each operation id names the handler a handler group
(``scopes``, ``entries``, ``erase``, ``erasures``) serves it with, built by ``root.py`` with the
parts that group uses. Every refusal is recorded by the same recorder the data plane uses.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from sidecar.contentstore.adapters import AdapterError
from sidecar.control.entries import EntryRoutes
from sidecar.control.erase import EraseRoutes
from sidecar.control.erasures import ErasureAdmin, ErasureEvidence
from sidecar.control.http import CREDENTIALED, MAX_BODY_BYTES, OPERATION
from sidecar.control.openapi import openapi
from sidecar.control.routes import OPS
from sidecar.control.scopes import Scopes
from sidecar.decide.record import AuditRecorder
from sidecar.logs import get_logger
from sidecar.reasons import Reason, Refusal, new_decision_id
from sidecar.relay import DECISION_ID, refusal_answer
from sidecar.state.codec import InvalidValue
from sidecar.state.types import StateError

log = get_logger("control")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

#: The reason code of each answer aiohttp's router gives by itself.
_ROUTER: Final = {
    HTTPStatus.NOT_FOUND: Reason.NOT_FOUND,
    HTTPStatus.METHOD_NOT_ALLOWED: Reason.ROUTE_DENIED,
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE: Reason.BODY_TOO_LARGE,
}


def handlers(
    scopes: Scopes, entries: EntryRoutes, erase: EraseRoutes, evidence: ErasureEvidence, admin: ErasureAdmin
) -> dict[str, Handler]:
    """The handler of each operation id of ``routes.OPS``."""
    return {
        "getOpenApi": openapi,
        "createScope": scopes.create,
        "getScopeStatus": scopes.status,
        "grantConsent": scopes.grant,
        "withdrawConsent": scopes.withdraw,
        "inspectEntries": entries.inspect,
        "forgetEntry": entries.forget_one,
        "forgetAll": erase.forget_all,
        "turnOff": erase.off,
        "offboardPrincipal": erase.offboard,
        "getErasure": evidence.get,
        "listErasures": admin.list,
        "retryErasure": admin.retry,
    }


def observing(recorder: AuditRecorder) -> Middleware:
    """Decision id, content-free errors, no caching, one sanitized log line per request."""

    async def refused(request: web.Request, refusal: Refusal) -> web.Response:
        """The one way a control request is refused: audit (or count) it unless already recorded, then answer."""
        if not refusal.recorded:
            # No valid credential: counted per hour, not one row each.
            await recorder.refusal(
                request.get(OPERATION),
                refusal.reason,
                decision_id=request[DECISION_ID],
                scope_id=refusal.scope_id,
                credentialed=refusal.reason is not Reason.AUTH_REQUIRED,
            )
        return refusal_answer(request, refusal)

    async def answer(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except Refusal as refusal:
            return await refused(request, refusal)
        except web.HTTPException as exc:
            # The router's own answers (no such route or method, body over the limit), in the one error shape.
            status = HTTPStatus(exc.status)
            allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            reason = _ROUTER.get(status, Reason.BAD_REQUEST)
            return refusal_answer(request, Refusal(reason, status=status, headers=allow))
        except AdapterError as exc:
            # The content store did not do its part: a bad gateway whatever the code.
            return await refused(request, Refusal(exc.reason, status=HTTPStatus.BAD_GATEWAY))
        except StateError as exc:
            if exc.reason is Reason.STATE_UNAVAILABLE:
                # A caller whose token verified gets a row of its own, anyone else is counted;
                # while the store is down either waits in its spool, on disk before the answer is sent.
                await recorder.refusal(
                    request.get(OPERATION),
                    exc.reason,
                    decision_id=request[DECISION_ID],
                    scope_id=None,
                    credentialed=request.get(CREDENTIALED, False),
                )
                return refusal_answer(request, Refusal(exc.reason))
            # A missing row; anything else is ours.
            reason = Reason.NOT_FOUND if exc.reason is Reason.NOT_FOUND else Reason.INTERNAL_ERROR
            return refusal_answer(request, Refusal(reason))
        except InvalidValue:
            # The state codec refuses a value by shape or length; the value itself is never kept.
            return await refused(request, Refusal(Reason.BAD_REQUEST))

    @web.middleware
    async def observe_control(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        request[DECISION_ID] = new_decision_id()
        try:
            resp = await answer(request, handler)
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

    return observe_control


def create_control_app(routes: Mapping[str, Handler], recorder: AuditRecorder) -> web.Application:
    """Build the control API: every operation of ``routes.OPS`` served by its handler."""
    declared = {op.operation_id for op in OPS}
    if declared != set(routes):
        raise ValueError(f"control handlers do not match the route table: {sorted(declared ^ set(routes))}")
    app = web.Application(middlewares=[observing(recorder)], client_max_size=MAX_BODY_BYTES)
    for op in OPS:
        app.router.add_route(op.method.upper(), op.path, routes[op.operation_id])
    return app
