"""Governed agent invocations (``a2a.invoke`` to a memory-enabled agent, SPEC D1 and D6).

Allowed: forwarded to the same agent with every kagent identity carrier set to the session key
``mg1.<scope>.<generation>.<mac>``; the delegation context is stripped on every route. Anything else: forwarded
to the agent's memory-disabled variant with the caller's own identity, so chat keeps working.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

from sidecar.clock import Clock
from sidecar.decide.context import Contexts
from sidecar.decide.decider import Facts
from sidecar.decide.facts import agent_of, audience_of, principal_of, room_of, scope_of
from sidecar.decide.respond import Denied, decision_headers
from sidecar.enforce import budgets
from sidecar.enforce.pipeline import Admitted, Call, RouteSpec, Stages
from sidecar.identity import IdentityError
from sidecar.identity.appname import Agents
from sidecar.identity.keys import SessionKeys
from sidecar.identity.mxid import check_principal
from sidecar.policy.model import Budget, ContextScope, Decision, Limits, Operation, RequestFacts, ScopeRecord
from sidecar.reasons import Reason, Refusal
from sidecar.relay import forward, read_body
from sidecar.routes import RouteMatch
from sidecar.upstream import SHARE_HEADER, KagentBearer, Upstream
from sidecar.wire import BadBody, StrictJSON

if TYPE_CHECKING:
    from sidecar.state.budgets import BudgetOps
    from sidecar.state.prefetch import PrefetchOps
    from sidecar.state.scopes import ScopeOps

#: The A2A fields memgov reads from an invocation; an agent's A2A server (a Go one matches keys
#: case-insensitively) must read the same ones.
_INVOKE = StrictJSON(("params", "message", "contextId"))


def _is_new_conversation(payload: dict[str, object]) -> bool:
    """A message without a contextId starts a conversation (kagent's prefetch runs on its first turn)."""
    params = payload.get("params")
    message = params.get("message") if isinstance(params, dict) else None
    return not (isinstance(message, dict) and message.get("contextId"))


def _without_query_user(raw_path: str) -> str:
    """Drop every ``user_id`` query parameter of an invocation.

    kagent reads it before ``X-User-Id`` in unsecure mode, and logs it on every request: memgov
    sets ``X-User-Id`` instead (the session key, or the caller's own identity on a rewrite), which
    kagent honours and does not log.
    """
    path, sep, query = raw_path.partition("?")
    if not sep:
        return raw_path
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "user_id"]
    return f"{path}?{urlencode(pairs)}" if pairs else path


@dataclass(frozen=True, slots=True)
class InvokeParts:
    """What a governed invocation uses: the conversation's scope, its budget peek and prefetch window,
    the delegation contexts, the keys a session key is minted with, and the controller it goes to."""

    scopes: ScopeOps
    budgets: BudgetOps
    prefetch: PrefetchOps
    contexts: Contexts
    keys: SessionKeys
    bearer: KagentBearer
    agents: Agents
    limits: Callable[[], Limits]
    clock: Clock
    controller: Upstream
    server_name: str
    prefetch_window_s: int


@dataclass(frozen=True, slots=True)
class _Invocation:
    """An invocation's checked body, and the scope a verified context named (None: none found)."""

    body: bytes
    payload: dict[str, object]
    scope: ScopeRecord | None = None


def _ref(call: Call) -> str:
    return f"{call.match.params['ns']}/{call.match.params['name']}"


async def _parse(call: Call) -> _Invocation:
    if SHARE_HEADER in call.request.headers:
        # SECURITY: a share token would make kagent answer as another conversation's owner (a session
        # key): a memory agent is never invoked under one, not even as its memory-free variant.
        raise Refusal(Reason.SHARE_REFUSED)
    body = await read_body(call.request)
    try:
        return _Invocation(body, _INVOKE.parse_object(body))
    except BadBody:
        # SECURITY: an invocation memgov cannot read unambiguously goes to the agent without memory.
        raise Refusal(Reason.BAD_REQUEST) from None


class Invocations(Stages[InvokeParts]):
    """The stages of a governed A2A invocation, over one :class:`InvokeParts`."""

    def governs_route(self, match: RouteMatch) -> bool:
        """Only A2A invocations of a memory-enabled agent are governed; any other is relayed as it came."""
        params = match.params
        return params["kind"] == "a2a" and self._p.agents.has_memory(f"{params['ns']}/{params['name']}")

    def governs(self, call: Call) -> bool:
        """:meth:`governs_route` of the call's route."""
        return self.governs_route(call.match)

    async def admit(self, call: Call, inv: _Invocation) -> Admitted[_Invocation]:
        """The context's principal, room and audience, its scope, and whether it has an operation left this hour."""
        p, ref = self._p, _ref(call)
        try:
            seen = await p.contexts.seen(call.request)
        finally:
            call.credentialed = p.contexts.verified(call.request)
        facts, ctx = seen.facts, seen.claims
        principal = scope = room = audience = None
        budget = Budget()
        if ctx is not None:
            try:
                check_principal(ctx.sub, ctx.origin, p.server_name)
                principal = principal_of(ctx.sub, ctx.origin)
            except IdentityError:
                principal = None
            found = await p.scopes.find_scope(ctx.sub, ctx.origin.value, ref, ctx.scope.kind.value, ctx.scope.room_id)
            scope = scope_of(found) if found is not None else None
            room, audience = room_of(ctx.room), audience_of(ctx.audience)
            if found is not None and found.enabled:
                # Peek: a reservation of nothing against one less than the limit succeeds only while
                # at least one operation is left this hour, so an exhausted scope chats without memory.
                failed, levels = await p.budgets.reserve_counted(
                    [budgets.scope_hour(p.limits(), found.scope_id, 0, headroom=1)], p.clock()
                )
                # With the one operation it needs, against the agent's own cap in the policy.
                budget = Budget(hourly_ok=failed is None, hourly_operations_used=levels[0] + 1 if failed is None else 0)
        request_facts = RequestFacts(
            context=facts,
            context_scope=ContextScope(kind=ctx.scope.kind.value, room_id=ctx.scope.room_id) if ctx else None,
            context_agent=ctx.agent if ctx else None,
        )
        asked = Facts(
            agent_ref=ref,
            principal=principal,
            agent=agent_of(ref, p.agents.app_name(ref), True),
            scope=scope,
            request=request_facts,
            room=room,
            audience=audience,
            budget=budget,
        )
        return Admitted(
            asked,
            _Invocation(inv.body, inv.payload, scope),
            scope_id=scope.scope_id if scope else None,
            credentialed=ctx is not None,
        )

    async def forward(self, call: Call, inv: _Invocation, decision: Decision) -> web.StreamResponse:
        """The same agent, every kagent identity carrier set to the scope's session key."""
        p, scope, request = self._p, inv.scope, call.request
        if scope is None:
            raise Denied(decision)  # the policy allows no memory without a scope: the memory-free variant answers
        key = p.keys.session_key(scope.scope_id, scope.generation)
        now = p.clock()
        headers = {"X-User-Id": key, **p.bearer.headers(key, int(now.timestamp()))}
        if _is_new_conversation(inv.payload):
            until = now + timedelta(seconds=p.prefetch_window_s)
            await p.prefetch.open_prefetch_window(scope.scope_id, now, until)
        return await forward(
            request,
            p.controller,
            path=_without_query_user(request.raw_path),
            headers=headers,
            body=inv.body,
            response_headers=decision_headers(decision),
        )

    async def rewrite_disabled(self, call: Call, decision: Decision) -> web.StreamResponse:
        """Send the invocation to the agent's memory-disabled variant with the caller's own identity."""
        # SECURITY: a refused invocation still answers, but from an agent that has no memory at all.
        request, match = call.request, call.match
        variant = self._p.agents.variant(_ref(call))
        prefix = f"/api/a2a/{match.params['ns']}/{match.params['name']}"
        path = _without_query_user(f"/api/a2a/{match.params['ns']}/{variant}" + request.raw_path[len(prefix) :])
        body = await read_body(request)
        return await forward(
            request, self._p.controller, path=path, body=body, response_headers=decision_headers(decision)
        )

    def spec(self) -> RouteSpec[_Invocation, _Invocation]:
        """An A2A invocation: governed for memory-enabled agents; a refusal is answered by the memory-free variant."""
        return RouteSpec(
            Operation.A2A_INVOKE, _parse, self.admit, self.forward, governs=self.governs, degrade=self.rewrite_disabled
        )
