"""Who is calling the control API, and may they act on this scope.

Callers present ``Authorization: Bearer <JWT>``. An operator token (``typ: memgov-operator+jwt``,
``role: operator``, verified with ``trust.operator_key_file``) or a subject token
(``typ: memgov-subject+jwt``, verified with ``trust.bridge_key_file``) whose ``sub`` names the
acting MXID. Each verifier accepts only its own token type, so a delegation context (signed with
the bridge key too) is never a bearer credential. Subject tokens are short-lived and carry a
``jti``; consent changes and erasures spend it, so each one needs a fresh token. Missing, invalid
or replayed → 401 ``auth_required``; a valid caller who is not the scope's exact principal → 403
``not_subject``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from aiohttp import web

from sidecar.control.http import OPERATORS, load_scope
from sidecar.decide.ports import context_ledger
from sidecar.governance import GOVERNANCE
from sidecar.identity import IdentityError
from sidecar.identity.tokens import bearer, verify_operator_token, verify_subject_token
from sidecar.reasons import Reason, Refusal
from sidecar.state.types import Scope

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="memgov-control"'}


@dataclass(frozen=True, slots=True)
class Caller:
    """A verified caller: a subject (``sub`` is a canonical MXID) or an operator."""

    kind: Literal["subject", "operator"]
    sub: str
    jti: str | None = None
    exp: int = 0


def authenticate(request: web.Request) -> Caller:
    """Verify the bearer token; raise Refusal(auth_required, 401) when there is no valid one."""
    gov = request.app[GOVERNANCE]
    token = bearer(request.headers.get("Authorization"))
    if token is None:
        raise Refusal(Reason.AUTH_REQUIRED, headers=_CHALLENGE)
    now, trust = int(gov.now().timestamp()), gov.settings.trust
    operators = request.app.get(OPERATORS)
    if operators is not None:
        try:
            op = verify_operator_token(token, operators, now=now, max_age_s=trust.operator_max_age_s)
            return Caller("operator", op.sub)
        except IdentityError:
            pass
    if gov.bridge is not None:
        try:
            subject = verify_subject_token(token, gov.bridge, now=now, max_age_s=trust.subject_max_age_s)
            return Caller("subject", subject.sub, subject.jti, subject.exp)
        except IdentityError:
            pass
    raise Refusal(Reason.AUTH_REQUIRED, headers=_CHALLENGE)


async def spend(request: web.Request, caller: Caller) -> None:
    """Spend a subject token on a state-changing call: the same token never changes state twice."""
    if caller.kind != "subject" or caller.jti is None:
        return
    gov = request.app[GOVERNANCE]
    # SECURITY: a replayed token (captured from a log, a proxy or a pod) changes nothing.
    if not await context_ledger(gov).single_use.remember_jti(
        "subject:" + caller.jti, datetime.fromtimestamp(caller.exp, UTC), gov.now()
    ):
        raise Refusal(Reason.AUTH_REQUIRED, headers=_CHALLENGE)


def ensure_subject(caller: Caller, mxid: str, scope_id: str | None = None) -> None:
    """The caller must be exactly ``mxid`` acting for itself; operators get not_subject too."""
    # SECURITY: only the exact subject may see or erase its memory; moderators and
    # operators, however privileged elsewhere, are refused here.
    if caller.kind != "subject" or caller.sub != mxid:
        raise Refusal(Reason.NOT_SUBJECT, scope_id=scope_id)


async def subject_scope(request: web.Request, *, changes_state: bool = False) -> tuple[Caller, Scope]:
    """Authenticate first, then load the scope named in the path and require its exact principal.

    ``changes_state`` spends the subject token once everything else checked out.
    """
    caller = authenticate(request)
    scope = await load_scope(request.app[GOVERNANCE], request.match_info["scope_id"])
    ensure_subject(caller, scope.principal_mxid, scope.scope_id)
    if changes_state:
        await spend(request, caller)
    return caller, scope


def require_operator(request: web.Request) -> Caller:
    """The caller must hold an operator token; a subject token is refused with route_denied."""
    caller = authenticate(request)
    if caller.kind != "operator":
        raise Refusal(Reason.ROUTE_DENIED)
    return caller
