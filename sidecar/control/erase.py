"""Confirmed whole-scope erasure (forget-all, off) and operator offboarding (SPEC R-6, R-7).

Forget-all and off take two calls: the first answers ``202 {confirm_token, expires_at}``, the
second carries ``{"confirm": token}`` and runs the erasure. A token is stored only as its
SHA-256, expires after :data:`CONFIRM_TTL_S`, works once, and only for the subject, scope and
action it was issued for.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from http import HTTPStatus
from typing import Final

from aiohttp import web

from sidecar.control.auth import require_operator, spend, subject_scope
from sidecar.control.erasures import erasure_answer, evidence_of, location
from sidecar.control.http import ERASURE, ok, operation, parse_optional
from sidecar.control.models import Confirm, ConfirmationIssued, OffboardResult, OffboardScope
from sidecar.control.ports import confirmations
from sidecar.erasure.evidence import iso
from sidecar.erasure.machine import Kind
from sidecar.governance import GOVERNANCE
from sidecar.identity import IdentityError
from sidecar.identity.mxid import parse_mxid
from sidecar.reasons import Reason, Refusal

CONFIRM_TTL_S: Final = 300


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def _confirmed(request: web.Request, kind: Kind) -> web.Response:
    gov = request.app[GOVERNANCE]
    caller, scope = await subject_scope(request)
    body = await parse_optional(request, Confirm)
    now = gov.now()
    if body is None or body.confirm is None:  # no body, or `{}`: no confirmation yet
        # Hex, not URL-safe base64: a token starting with "-" would read as an option on a command line.
        token, expires = secrets.token_hex(32), now + timedelta(seconds=CONFIRM_TTL_S)
        await confirmations(gov).single_use.put_confirmation(
            _hash(token), scope.scope_id, caller.sub, kind.value, expires
        )
        issued = ConfirmationIssued.model_validate(
            {"action": kind.value, "confirm_token": token, "expires_at": iso(expires)}
        )
        return ok(issued, status=HTTPStatus.ACCEPTED)
    if not await confirmations(gov).single_use.take_confirmation(
        _hash(body.confirm), scope.scope_id, caller.sub, kind.value, now
    ):
        raise Refusal(Reason.CONFIRMATION_REQUIRED, scope_id=scope.scope_id)
    await spend(request, caller)  # executing the erasure changes state: the token works once
    erasure = await request.app[ERASURE].erase(scope, kind, "subject")
    return ok(await erasure_answer(gov, erasure), headers=location(erasure))


async def forget_all(request: web.Request) -> web.Response:
    """POST /v1/scopes/{scope_id}/forget-all: erase every entry, keep consent (new generation)."""
    operation(request, "scope.forget_all")
    return await _confirmed(request, Kind.FORGET_ALL)


async def off(request: web.Request) -> web.Response:
    """POST /v1/scopes/{scope_id}/off: disable first, then erase every entry."""
    operation(request, "scope.off")
    return await _confirmed(request, Kind.OFF)


async def offboard(request: web.Request) -> web.Response:
    """POST /v1/principals/{mxid}/offboard: disable every scope of one MXID, then erase and verify each."""
    operation(request, "principal.offboard")
    gov = request.app[GOVERNANCE]
    require_operator(request)
    try:
        mxid = str(parse_mxid(request.match_info["mxid"]))
    except IdentityError:
        raise Refusal(Reason.PRINCIPAL_INVALID) from None
    scopes = await confirmations(gov).scopes.scopes_for_principal(mxid)
    erasures = await request.app[ERASURE].offboard(scopes, "operator")
    agents = {s.scope_id: s.agent for s in scopes}
    results = []
    for erasure in erasures:
        record = await evidence_of(gov, erasure)
        results.append(
            OffboardScope(
                scope_id=erasure.scope_id,
                agent=agents[erasure.scope_id],
                erasure_id=erasure.erasure_id,
                state=erasure.state,
                failure_reason=erasure.failure_reason,
                physical_deletion=record.physical_deletion,
            )
        )
    await confirmations(gov).audit_log.audit(
        "offboard",
        Reason.ALLOWED.value if all(r.state == "verified" for r in results) else Reason.ERASURE_FAILED.value,
        operation="principal.offboard",
        now=gov.now(),
    )
    return ok(OffboardResult(complete=all(r.state == "verified" for r in results), scopes=results))
