"""Governed agent invocations (``a2a.invoke`` to a memory-enabled agent, SPEC D1 and D6).

Allowed: forwarded to the same agent with every kagent identity carrier set to the session key
``mg1.<scope>.<generation>.<mac>``; the delegation context is stripped on every route. Anything else: forwarded
to the agent's memory-disabled variant with the caller's own identity, so chat keeps working.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

from sidecar.decide.context import seen_context
from sidecar.decide.facts import agent_of, audience_of, principal_of, room_of, scope_of
from sidecar.decide.respond import Denied, Facts, decide_and_record, decision_headers, gov_of
from sidecar.enforce import budgets
from sidecar.enforce.ports import invoke_state
from sidecar.identity import IdentityError
from sidecar.identity.mxid import check_principal
from sidecar.policy.model import Budget, ContextScope, Decision, Operation, RequestFacts
from sidecar.reasons import Reason, Refusal
from sidecar.relay import CONTROLLER, forward, read_body
from sidecar.routes import RouteMatch
from sidecar.wire import BadBody, StrictJSON

#: The A2A fields memgov reads from an invocation; an agent's A2A server (a Go one matches keys
#: case-insensitively) must read the same ones.
_INVOKE = StrictJSON(("params", "message", "contextId"))


def _is_new_conversation(payload: dict[str, Any]) -> bool:
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


async def handle_invoke(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    gov = gov_of(request)
    ref = f"{match.params['ns']}/{match.params['name']}"
    if match.params["kind"] != "a2a" or not gov.is_memory_agent(ref):
        return await forward(request, request.app[CONTROLLER])
    body = await read_body(request)
    try:
        payload = _INVOKE.parse_object(body)
    except BadBody:
        # SECURITY: an invocation memgov cannot read unambiguously goes to the agent without memory.
        raise Refusal(Reason.BAD_REQUEST) from None
    seen = await seen_context(request)
    facts, ctx = seen.facts, seen.claims
    principal = scope = room = audience = None
    budget = Budget()
    if ctx is not None:
        try:
            check_principal(ctx.sub, ctx.origin, gov.settings.matrix.server_name or "")
            principal = principal_of(ctx.sub, ctx.origin)
        except IdentityError:
            principal = None
        found = await invoke_state(gov).find_scope(
            ctx.sub, ctx.origin.value, ref, ctx.scope.kind.value, ctx.scope.room_id
        )
        scope = scope_of(found) if found is not None else None
        room, audience = room_of(ctx.room), audience_of(ctx.audience)
        if found is not None and found.enabled:
            # Peek: a reservation of nothing against one less than the limit succeeds only while
            # at least one operation is left this hour, so an exhausted scope chats without memory.
            failed, levels = await invoke_state(gov).reserve_counted(
                [budgets.scope_hour(gov.limits, found.scope_id, 0, headroom=1)],
                gov.now(),
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
        agent=agent_of(ref, gov.app_name(ref), True),
        scope=scope,
        request=request_facts,
        room=room,
        audience=audience,
        budget=budget,
    )
    decision = await decide_and_record(
        request, Operation.A2A_INVOKE, asked, scope_id=scope.scope_id if scope else None, credentialed=ctx is not None
    )
    upstream = request.app[CONTROLLER]
    if decision.allowed and scope is not None:
        key = gov.keys.session_key(scope.scope_id, scope.generation)
        headers = {"X-User-Id": key, **gov.kagent_headers(key)}
        if _is_new_conversation(payload):
            now = gov.now()
            await invoke_state(gov).open_prefetch_window(
                scope.scope_id, now, now + timedelta(seconds=gov.settings.enforce.prefetch_window_s)
            )
        return await forward(
            request,
            upstream,
            path=_without_query_user(request.raw_path),
            headers=headers,
            body=body,
            response_headers=decision_headers(decision),
        )
    raise Denied(decision)  # answered by the memory-disabled variant (``rewrite_disabled``)


async def rewrite_disabled(request: web.Request, match: RouteMatch, decision: Decision) -> web.StreamResponse:
    """Send the invocation to the agent's memory-disabled variant with the caller's own identity."""
    # SECURITY: a refused invocation still answers, but from an agent that has no memory at all.
    variant = gov_of(request).settings.agents[f"{match.params['ns']}/{match.params['name']}"].disabled_variant
    prefix = f"/api/a2a/{match.params['ns']}/{match.params['name']}"
    path = _without_query_user(f"/api/a2a/{match.params['ns']}/{variant}" + request.raw_path[len(prefix) :])
    body = await read_body(request)
    return await forward(
        request, request.app[CONTROLLER], path=path, body=body, response_headers=decision_headers(decision)
    )
