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
from typing import TYPE_CHECKING, Literal

from aiohttp import web

from sidecar.clock import Clock
from sidecar.control.http import CREDENTIALED
from sidecar.identity import IdentityError
from sidecar.identity.tokens import Verifier, bearer, verify_operator_token, verify_subject_token
from sidecar.reasons import Reason, Refusal
from sidecar.state.types import Scope

if TYPE_CHECKING:
    from sidecar.state.scopes import ScopeOps
    from sidecar.state.single_use import SingleUseOps

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="memgov-control"'}


@dataclass(frozen=True, slots=True)
class Caller:
    """A verified caller: a subject (``sub`` is a canonical MXID) or an operator."""

    kind: Literal["subject", "operator"]
    sub: str
    jti: str | None = None
    exp: int = 0


def ensure_subject(caller: Caller, mxid: str, scope_id: str | None = None) -> None:
    """The caller must be exactly ``mxid`` acting for itself; operators get not_subject too."""
    # SECURITY: only the exact subject may see or erase its memory; moderators and
    # operators, however privileged elsewhere, are refused here.
    if caller.kind != "subject" or caller.sub != mxid:
        raise Refusal(Reason.NOT_SUBJECT, scope_id=scope_id)


class Authenticator:
    """Verifies bearer tokens, spends subject tokens on state changes, loads the scope a subject acts on."""

    __slots__ = ("_bridge", "_clock", "_operator_max_age_s", "_operators", "_scopes", "_spent", "_subject_max_age_s")

    def __init__(
        self,
        bridge: Verifier | None,
        operators: Verifier | None,
        spent: SingleUseOps,
        scopes: ScopeOps,
        clock: Clock,
        *,
        subject_max_age_s: int,
        operator_max_age_s: int,
    ) -> None:
        self._bridge, self._operators, self._spent, self._scopes, self._clock = bridge, operators, spent, scopes, clock
        self._subject_max_age_s, self._operator_max_age_s = subject_max_age_s, operator_max_age_s

    def authenticate(self, request: web.Request) -> Caller:
        """Verify the bearer token; raise Refusal(auth_required, 401) when there is no valid one."""
        token = bearer(request.headers.get("Authorization"))
        if token is None:
            raise Refusal(Reason.AUTH_REQUIRED, headers=_CHALLENGE)
        now = int(self._clock().timestamp())
        if self._operators is not None:
            try:
                op = verify_operator_token(token, self._operators, now=now, max_age_s=self._operator_max_age_s)
                request[CREDENTIALED] = True
                return Caller("operator", op.sub)
            except IdentityError:
                pass
        if self._bridge is not None:
            try:
                subject = verify_subject_token(token, self._bridge, now=now, max_age_s=self._subject_max_age_s)
                request[CREDENTIALED] = True
                return Caller("subject", subject.sub, subject.jti, subject.exp)
            except IdentityError:
                pass
        raise Refusal(Reason.AUTH_REQUIRED, headers=_CHALLENGE)

    async def spend(self, caller: Caller) -> None:
        """Spend a subject token on a state-changing call: the same token never changes state twice."""
        if caller.kind != "subject" or caller.jti is None:
            return
        # SECURITY: a replayed token (captured from a log, a proxy or a pod) changes nothing.
        if not await self._spent.remember_jti(
            "subject:" + caller.jti, datetime.fromtimestamp(caller.exp, UTC), self._clock()
        ):
            raise Refusal(Reason.AUTH_REQUIRED, headers=_CHALLENGE)

    async def scope_or_none(self, scope_id: str) -> Scope | None:
        """The scope as stored now (None once it is gone)."""
        return await self._scopes.get_scope(scope_id)

    async def scope(self, scope_id: str) -> Scope:
        """The scope named in the path, or 404 not_found."""
        scope = await self._scopes.get_scope(scope_id)
        if scope is None:
            raise Refusal(Reason.NOT_FOUND)
        return scope

    async def subject_scope(self, request: web.Request, *, changes_state: bool = False) -> tuple[Caller, Scope]:
        """Authenticate first, then load the scope named in the path and require its exact principal.

        ``changes_state`` spends the subject token once everything else checked out.
        """
        caller = self.authenticate(request)
        scope = await self.scope(request.match_info["scope_id"])
        ensure_subject(caller, scope.principal_mxid, scope.scope_id)
        if changes_state:
            await self.spend(caller)
        return caller, scope

    def require_operator(self, request: web.Request) -> Caller:
        """The caller must hold an operator token; a subject token is refused with route_denied."""
        caller = self.authenticate(request)
        if caller.kind != "operator":
            raise Refusal(Reason.ROUTE_DENIED)
        return caller
