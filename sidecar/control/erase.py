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
from typing import TYPE_CHECKING, Final

from aiohttp import web

from sidecar.clock import Clock
from sidecar.control.auth import Authenticator
from sidecar.control.erasures import ErasureEvidence, location
from sidecar.control.http import ok, operation, parse_optional
from sidecar.control.models import Confirm, ConfirmationIssued, OffboardResult, OffboardScope
from sidecar.erasure.evidence import iso
from sidecar.erasure.machine import ErasureEngine
from sidecar.identity import IdentityError
from sidecar.identity.mxid import parse_mxid
from sidecar.reasons import Reason, Refusal
from sidecar.state.types import ErasureKind, ErasureState

if TYPE_CHECKING:
    from sidecar.state.audit import AuditOps
    from sidecar.state.scopes import ScopeOps
    from sidecar.state.single_use import SingleUseOps

CONFIRM_TTL_S: Final = 300


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class EraseRoutes:
    """Forget-all and off (each confirmed by a single-use token), and offboarding."""

    def __init__(
        self,
        auth: Authenticator,
        evidence: ErasureEvidence,
        engine: ErasureEngine,
        tokens: SingleUseOps,
        scopes: ScopeOps,
        audit: AuditOps,
        clock: Clock,
    ) -> None:
        self._auth, self._evidence, self._engine = auth, evidence, engine
        self._tokens, self._scopes, self._audit, self._clock = tokens, scopes, audit, clock

    async def _confirmed(self, request: web.Request, kind: ErasureKind) -> web.Response:
        caller, scope = await self._auth.subject_scope(request)
        body = await parse_optional(request, Confirm)
        now = self._clock()
        if body is None or body.confirm is None:  # no body, or `{}`: no confirmation yet
            # Hex, not URL-safe base64: a token starting with "-" would read as an option on a command line.
            token, expires = secrets.token_hex(32), now + timedelta(seconds=CONFIRM_TTL_S)
            await self._tokens.put_confirmation(_hash(token), scope.scope_id, caller.sub, kind.value, expires)
            issued = ConfirmationIssued.model_validate(
                {"action": kind.value, "confirm_token": token, "expires_at": iso(expires)}
            )
            return ok(issued, status=HTTPStatus.ACCEPTED)
        if not await self._tokens.take_confirmation(_hash(body.confirm), scope.scope_id, caller.sub, kind.value, now):
            raise Refusal(Reason.CONFIRMATION_REQUIRED, scope_id=scope.scope_id)
        await self._auth.spend(caller)  # executing the erasure changes state: the token works once
        erasure = await self._engine.erase(scope, kind, "subject")
        return ok(await self._evidence.answer(erasure), headers=location(erasure))

    async def forget_all(self, request: web.Request) -> web.Response:
        """POST /v1/scopes/{scope_id}/forget-all: erase every entry, keep consent (new generation)."""
        operation(request, "scope.forget_all")
        return await self._confirmed(request, ErasureKind.FORGET_ALL)

    async def off(self, request: web.Request) -> web.Response:
        """POST /v1/scopes/{scope_id}/off: disable first, then erase every entry."""
        operation(request, "scope.off")
        return await self._confirmed(request, ErasureKind.OFF)

    async def offboard(self, request: web.Request) -> web.Response:
        """POST /v1/principals/{mxid}/offboard: disable every scope of one MXID, then erase and verify each."""
        operation(request, "principal.offboard")
        self._auth.require_operator(request)
        try:
            mxid = str(parse_mxid(request.match_info["mxid"]))
        except IdentityError:
            raise Refusal(Reason.PRINCIPAL_INVALID) from None
        scopes = await self._scopes.scopes_for_principal(mxid)
        erasures = await self._engine.offboard(scopes, "operator")
        agents = {s.scope_id: s.agent for s in scopes}
        results = []
        for erasure in erasures:
            record = await self._evidence.of(erasure)
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
        complete = all(r.state is ErasureState.VERIFIED for r in results)
        await self._audit.audit(
            "offboard",
            Reason.ALLOWED.value if complete else Reason.ERASURE_FAILED.value,
            operation="principal.offboard",
            now=self._clock(),
        )
        return ok(OffboardResult(complete=complete, scopes=results))
