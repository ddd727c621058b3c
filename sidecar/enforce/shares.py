"""kagent v0.10's share links (``session.share``): creating, listing, revoking and using them.

A share token (``X-Share-Token``) makes kagent act as the shared session's *owner* on that
session's routes and on A2A calls naming it. A memory agent's conversation is owned by one of
memgov's session keys and its events hold recalled memory, so a link to it would hand that
memory to whoever opens it, outside its room's audience. The flow::

    share route, or a token on a session route / another agent's A2A call naming a session
      → GET /api/sessions/{id} upstream, as the caller (with the token when one is used)
      → owner: session_key | user | unknown
      → the pack and the floor decide session.share (the floor refuses all but "user")
      → forwarded with the token put back; every other request loses the token (upstream.py)

A2A calls of a memory-enabled agent never carry a token (``enforce/invoke.py`` refuses them).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import aiohttp
from aiohttp import web

from sidecar.decide.decider import Facts
from sidecar.decide.respond import decision_headers
from sidecar.enforce.pipeline import Admitted, Call, RouteSpec, Stages
from sidecar.identity.keys import is_session_key_shaped
from sidecar.policy.model import Decision, Operation, RequestFacts, ShareFacts, ShareOwner, ShareVerb
from sidecar.reasons import Reason, Refusal
from sidecar.relay import ClassHandler, forward, read_body
from sidecar.routes import SESSION_PATH, RouteMatch
from sidecar.upstream import SHARE_HEADER, Upstream, filter_headers
from sidecar.wire import BadBody, StrictJSON

#: The fields of an A2A call kagent reads a session from, for the strict parse (case-folded spellings refused).
_A2A: Final = StrictJSON(("params", "message", "contextId"))
#: The session of a call that names several, or one memgov cannot name exactly: its owner is unknown.
UNREADABLE: Final = ""
#: Most bytes of kagent's answer about a session read to find its owner (one event is asked for).
_OWNER_READ_MAX: Final = 1 << 20
_NOT_SENT: Final = ("Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding")


@dataclass(frozen=True, slots=True)
class ShareParts:
    """What a share decision uses: the controller it asks about the session and forwards to."""

    controller: Upstream


@dataclass(frozen=True, slots=True)
class ShareCall:
    """The session a share concerns, what the request does with it, and the token it carries."""

    session: str
    verb: ShareVerb
    token: str | None


def _owner(answer: object) -> ShareOwner:
    """The owner kagent named in ``{"data": {"session": {"user_id": …}}}``; unknown for any other shape."""
    data = answer.get("data") if isinstance(answer, dict) else None
    session = data.get("session") if isinstance(data, dict) else None
    user = session.get("user_id") if isinstance(session, dict) else None
    if not isinstance(user, str) or not user:
        return "unknown"
    # SECURITY: anything shaped like a session key counts as one, whether or not its MAC verifies.
    return "session_key" if is_session_key_shaped(user) else "user"


async def owner_of(controller: Upstream, request: web.Request, share: ShareCall) -> ShareOwner:
    """Ask kagent, as the caller (with the token when one is used), whose session this is."""
    headers = filter_headers(request.headers, drop=("Host", *_NOT_SENT))
    if share.token is not None:
        headers[SHARE_HEADER] = share.token
    try:
        async with controller.request("GET", f"/api/sessions/{share.session}?limit=1", headers=headers) as resp:
            if resp.status != 200:
                return "unknown"
            raw = await resp.content.read(_OWNER_READ_MAX + 1)
    except (aiohttp.ClientError, OSError, TimeoutError):
        return "unknown"
    if len(raw) > _OWNER_READ_MAX:
        return "unknown"
    try:
        return _owner(json.loads(raw))
    except ValueError:
        return "unknown"


def _context_id(body: bytes) -> str | None:
    """The one session an A2A JSON-RPC call names (``params.contextId``, ``params.message.contextId``);
    None when it names none, ``UNREADABLE`` when it names several or one memgov cannot name exactly."""
    try:
        payload = _A2A.parse(body)
    except BadBody:
        # SECURITY: a body kagent's decoder could read otherwise (a duplicate or case-folded key).
        raise Refusal(Reason.BAD_REQUEST) from None
    params = payload.get("params") if isinstance(payload, dict) else None
    message = params.get("message") if isinstance(params, dict) else None
    named = [
        holder.get("contextId") for holder in (params, message) if isinstance(holder, dict) and "contextId" in holder
    ]
    found = {value for value in named if value not in (None, "")}
    if not found:
        return None
    (session,) = found if len(found) == 1 else (None,)
    if not isinstance(session, str) or SESSION_PATH.fullmatch(f"/api/sessions/{session}") is None:
        # SECURITY: two sessions, or one memgov cannot name exactly, in one call: kagent may act as the
        # owner of one the decision never saw (decided with an unknown owner: refused).
        return UNREADABLE
    return session


class Shares(Stages[ShareParts]):
    """The stages of a share decision, over one :class:`ShareParts`."""

    async def parse(self, call: Call) -> ShareCall:
        """The session and verb from the route (a share route) or the request that uses a token."""
        token = call.request.headers.get(SHARE_HEADER)
        params = call.match.params
        if call.match.cls is Operation.SESSION_SHARE:
            verb: ShareVerb = params["verb"]  # type: ignore[assignment]  # routes._SHARE_VERBS are its values
            return ShareCall(params["session"], verb, token)
        return ShareCall(params["session"], "use", token)

    async def admit(self, call: Call, share: ShareCall) -> Admitted[ShareCall]:
        """Whose session it is, as kagent answers the caller."""
        owner = "unknown" if share.session == UNREADABLE else await owner_of(self._p.controller, call.request, share)
        facts = RequestFacts(share=ShareFacts(verb=share.verb, owner=owner))
        return Admitted(Facts(request=facts), share)

    async def forward(self, call: Call, share: ShareCall, decision: Decision) -> web.StreamResponse:
        """The request as it came, the token put back: kagent acts as the owner the decision saw."""
        headers = {SHARE_HEADER: share.token} if share.token is not None else None
        return await forward(
            call.request, self._p.controller, headers=headers, response_headers=decision_headers(decision)
        )

    def spec(self) -> RouteSpec[ShareCall, ShareCall]:
        """A share of a session: decided by the pack and the floor, forwarded as it came."""
        return RouteSpec(Operation.SESSION_SHARE, self.parse, self.admit, self.forward)


@dataclass(frozen=True, slots=True)
class TokenRoutes:
    """Where a request carrying a share token goes: a session route or another agent's A2A call that
    names a session is decided as a use; anywhere else the token is dropped (``upstream.py``)."""

    #: The decided share handler (``pipeline.run`` over :meth:`Shares.spec`).
    decided: ClassHandler
    #: The passthrough relay and the A2A handler a request without a token goes to.
    passthrough: ClassHandler
    a2a: ClassHandler
    #: Whether an A2A route is a memory-enabled agent's (its own handler refuses any token).
    memory_agent: Callable[[RouteMatch], bool]

    def _use(self, request: web.Request, session: str) -> Awaitable[web.StreamResponse]:
        return self.decided(
            request, RouteMatch(Operation.SESSION_SHARE, "/api/sessions/{id}", {"session": session, "verb": "use"})
        )

    async def on_passthrough(self, request: web.Request, match: RouteMatch) -> web.StreamResponse:
        """A session's own routes under a token are a use of the share; other routes lose the token."""
        found = SESSION_PATH.fullmatch(request.raw_path.partition("?")[0])
        if SHARE_HEADER in request.headers and found is not None:
            return await self._use(request, found["session"])
        return await self.passthrough(request, match)

    async def on_a2a(self, request: web.Request, match: RouteMatch) -> web.StreamResponse:
        """Another agent's A2A call under a token is a use of the session it names (contextId); one that
        names none loses the token, so kagent acts as the caller."""
        if SHARE_HEADER in request.headers and not self.memory_agent(match):
            session = _context_id(await read_body(request))
            if session is not None:
                return await self._use(request, session)
        return await self.a2a(request, match)
