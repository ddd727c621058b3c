"""Delegation contexts: verified once, spent wherever they are seen, never forwarded (SPEC §5).

A context (``X-Memgov-Context``) is a statement from the bridge about one delegation. It is not
a credential for anything else, so memgov strips it from every request it forwards (see
``upstream.filter_headers``) and records its ``jti`` on every route where it shows up: a context
that reached an agent pod, a tool or kagent can never be presented again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from aiohttp import web
from aiohttp.typedefs import Handler

from sidecar import tracing
from sidecar.clock import Clock
from sidecar.identity import IdentityError
from sidecar.identity.tokens import DelegationContext, Verifier, verify_context
from sidecar.logs import get_logger
from sidecar.policy.model import ContextFacts
from sidecar.reasons import Reason
from sidecar.state.types import StateError
from sidecar.upstream import CONTEXT_HEADER

if TYPE_CHECKING:
    from sidecar.state.single_use import SingleUseOps

log = get_logger("enforce")


@dataclass(frozen=True, slots=True)
class SeenContext:
    """What a request's context proved: the decision facts, and the claims when it verified."""

    facts: ContextFacts
    claims: DelegationContext | None


NO_CONTEXT: Final = SeenContext(ContextFacts(present=False), None)
_SEEN: Final = web.RequestKey("seen_context", SeenContext)
#: The request's context verified (whether or not it could then be spent).
_VERIFIED: Final = web.RequestKey("context_verified", bool)


class Contexts:
    """The bridge's verifier and the spent-context ledger: every context is verified and spent once."""

    __slots__ = ("_bridge", "_clock", "_max_age_s", "_spent")

    def __init__(self, bridge: Verifier | None, spent: SingleUseOps, clock: Clock, *, max_age_s: int) -> None:
        self._bridge, self._spent, self._clock, self._max_age_s = bridge, spent, clock, max_age_s

    @tracing.traced("memgov.identify")
    async def _verify_and_spend(self, request: web.Request, token: str) -> SeenContext:
        if self._bridge is None:
            return SeenContext(ContextFacts(present=True), None)  # no trust key configured: every context is invalid
        now = self._clock()
        try:
            ctx = verify_context(token, self._bridge, now=int(now.timestamp()), max_age_s=self._max_age_s)
        except IdentityError as exc:
            return SeenContext(ContextFacts(present=True, expired=exc.reason is Reason.CONTEXT_EXPIRED), None)
        request[_VERIFIED] = True
        fresh = await self._spent.remember_jti(ctx.jti, datetime.fromtimestamp(ctx.exp, UTC), now)
        return SeenContext(ContextFacts(present=True, valid=True, replayed=not fresh, expires_at=ctx.exp), ctx)

    async def seen(self, request: web.Request) -> SeenContext:
        """The request's context, verified and spent once per request (the first call does the work).

        Raises StateError when the context verified but could not be spent: it is then used nowhere.
        """
        if _SEEN in request:
            return request[_SEEN]
        token = request.headers.get(CONTEXT_HEADER)
        seen = NO_CONTEXT if token is None else await self._verify_and_spend(request, token)
        request[_SEEN] = seen
        return seen

    @staticmethod
    def verified(request: web.Request) -> bool:
        """Whether the request's context verified, even if the store could not spend it (a refusal is then
        audited as a credentialed one)."""
        return bool(request.get(_VERIFIED, False))

    @web.middleware
    async def spend(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Spend a context on whatever route it arrives, before the request goes anywhere."""
        if CONTEXT_HEADER in request.headers:
            try:
                await self.seen(request)
            except StateError:
                # SECURITY: not spent, so not usable: a handler that needs it asks again and fails
                # closed on the same error; everywhere else the header is stripped anyway.
                log.warning("context.spend_failed", reason=Reason.STATE_UNAVAILABLE.value)
        return await handler(request)
