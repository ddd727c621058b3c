"""Who is calling the control API, and may they act on this scope.

Callers present ``Authorization: Bearer <JWT>``. An operator token (``role: operator``,
verified with ``trust.operator_key_file``) is recognised first, so it can never pass as a
subject even when both keys are the same; otherwise a subject token (verified with
``trust.bridge_key_file``) names the acting MXID in ``sub``. Missing or invalid → 401
``auth_required``; a valid caller who is not the scope's exact principal → 403 ``not_subject``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from sidecar.control.http import OPERATORS, Refused, load_scope
from sidecar.enforce.runtime import GOVERNANCE
from sidecar.identity import IdentityError
from sidecar.identity.tokens import bearer, verify_operator_token, verify_subject_token
from sidecar.reasons import Reason
from sidecar.state.types import Scope

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="memgov-control"'}


@dataclass(frozen=True, slots=True)
class Caller:
    """A verified caller: a subject (``sub`` is a canonical MXID) or an operator."""

    kind: Literal["subject", "operator"]
    sub: str


def authenticate(request: web.Request) -> Caller:
    """Verify the bearer token; raise Refused(401 auth_required) when there is no valid one."""
    gov = request.app[GOVERNANCE]
    token = bearer(request.headers.get("Authorization"))
    if token is None:
        raise Refused(401, Reason.AUTH_REQUIRED, headers=_CHALLENGE)
    now = int(gov.now().timestamp())
    operators = request.app.get(OPERATORS)
    if operators is not None:
        try:
            return Caller("operator", verify_operator_token(token, operators, now=now).sub)
        except IdentityError:
            pass
    if gov.bridge is not None:
        try:
            return Caller("subject", verify_subject_token(token, gov.bridge, now=now).sub)
        except IdentityError:
            pass
    raise Refused(401, Reason.AUTH_REQUIRED, headers=_CHALLENGE)


def ensure_subject(caller: Caller, mxid: str, scope_id: str | None = None) -> None:
    """The caller must be exactly ``mxid`` acting for itself; operators get not_subject too."""
    # SECURITY: only the exact subject may see or erase its memory; moderators and
    # operators, however privileged elsewhere, are refused here.
    if caller.kind != "subject" or caller.sub != mxid:
        raise Refused(403, Reason.NOT_SUBJECT, scope_id=scope_id)


async def subject_scope(request: web.Request) -> tuple[Caller, Scope]:
    """Authenticate first, then load the scope named in the path and require its exact principal."""
    caller = authenticate(request)
    scope = await load_scope(request.app[GOVERNANCE], request.match_info["scope_id"])
    ensure_subject(caller, scope.principal_mxid, scope.scope_id)
    return caller, scope


def require_operator(request: web.Request) -> Caller:
    """The caller must hold an operator token; a subject token is refused with route_denied."""
    caller = authenticate(request)
    if caller.kind != "operator":
        raise Refused(403, Reason.ROUTE_DENIED)
    return caller
