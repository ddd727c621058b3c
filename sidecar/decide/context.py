"""Delegation contexts: verified once, spent wherever they are seen, never forwarded (SPEC §5).

A context (``X-Memgov-Context``) is a statement from the bridge about one delegation. It is not
a credential for anything else, so memgov strips it from every request it forwards (see
``upstream.filter_headers``) and records its ``jti`` on every route where it shows up: a context
that reached an agent pod, a tool or kagent can never be presented again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from sidecar import tracing
from sidecar.decide.ports import context_ledger
from sidecar.governance import GOVERNANCE, Governance
from sidecar.identity import IdentityError
from sidecar.identity.tokens import DelegationContext, verify_context
from sidecar.logs import get_logger
from sidecar.policy.model import ContextFacts
from sidecar.reasons import Reason
from sidecar.state.types import StateError
from sidecar.upstream import CONTEXT_HEADER

log = get_logger("enforce")


@dataclass(frozen=True, slots=True)
class SeenContext:
    """What a request's context proved: the decision facts, and the claims when it verified."""

    facts: ContextFacts
    claims: DelegationContext | None


NO_CONTEXT: Final = SeenContext(ContextFacts(present=False), None)
_SEEN: Final = web.RequestKey("seen_context", SeenContext)


@tracing.traced("memgov.identify")
async def _verify_and_spend(gov: Governance, token: str) -> SeenContext:
    if gov.bridge is None:
        return SeenContext(ContextFacts(present=True), None)  # no trust key configured: every context is invalid
    now = gov.now()
    try:
        ctx = verify_context(
            token, gov.bridge, now=int(now.timestamp()), max_age_s=gov.settings.trust.context_max_age_s
        )
    except IdentityError as exc:
        return SeenContext(ContextFacts(present=True, expired=exc.reason is Reason.CONTEXT_EXPIRED), None)
    fresh = await context_ledger(gov).single_use.remember_jti(ctx.jti, datetime.fromtimestamp(ctx.exp, UTC), now)
    return SeenContext(ContextFacts(present=True, valid=True, replayed=not fresh, expires_at=ctx.exp), ctx)


async def seen_context(request: web.Request) -> SeenContext:
    """The request's context, verified and spent once per request (the first call does the work).

    Raises StateError when the context verified but could not be spent: it is then used nowhere.
    """
    if _SEEN in request:
        return request[_SEEN]
    token = request.headers.get(CONTEXT_HEADER)
    seen = NO_CONTEXT if token is None else await _verify_and_spend(request.app[GOVERNANCE], token)
    request[_SEEN] = seen
    return seen


@web.middleware
async def spend_contexts(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Spend a context on whatever route it arrives, before the request goes anywhere."""
    if CONTEXT_HEADER in request.headers:
        try:
            await seen_context(request)
        except StateError:
            # SECURITY: not spent, so not usable: a handler that needs it asks again and fails
            # closed on the same error; everywhere else the header is stripped anyway.
            log.warning("context.spend_failed", reason=Reason.STATE_UNAVAILABLE.value)
    return await handler(request)
