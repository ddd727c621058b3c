"""Governed embedding calls: ``/embeddings/{ns}/{name}/v1/embeddings`` → the provider (SPEC §2).

An embedding request carries no user, so it is admitted for a memory-enabled agent that has at
least one enabled scope, within per-item size and count limits and the agent's hourly item
budget; the scope pays again on the memory call that follows. Provider error bodies are
replaced; the provider API key passes through untouched and is never logged; kagent's identity
headers stop here (the provider has no use for them).
"""

from __future__ import annotations

from aiohttp import web

from sidecar import metrics
from sidecar.enforce.facts import agent_of, parse_object, utf8_len
from sidecar.enforce.respond import decide, decision_headers, error, gov_of, record, refuse
from sidecar.policy.model import Budget, Operation, RequestFacts
from sidecar.proxy import EMBEDDING, forward_content, read_body
from sidecar.reasons import Reason
from sidecar.routes import RouteMatch
from sidecar.state.types import BudgetClaim

_KAGENT_HEADERS = ("X-User-Id", "X-Agent-Name")


def embedding_inputs(payload: dict[str, object]) -> list[str] | None:
    """The texts of an OpenAI-style request (a string or a list of strings); None otherwise."""
    value = payload.get("input")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)  # type: ignore[arg-type]
    return None


async def handle_embedding(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    op = Operation.EMBEDDING
    gov = gov_of(request)
    ref = f"{match.params['ns']}/{match.params['name']}"
    if EMBEDDING not in request.app:
        return error(request, 404, await refuse(request, op, Reason.ROUTE_DENIED))
    body = await read_body(request)
    payload = parse_object(body)
    inputs = embedding_inputs(payload) if payload is not None else None
    if inputs is None:
        return error(request, 400, await refuse(request, op, Reason.BAD_REQUEST))
    if not gov.is_memory_agent(ref) or not await gov.store.has_enabled_scope(ref):
        # SECURITY: no consented scope for this agent means no memory work at all, embeddings included.
        return error(request, 403, await refuse(request, op, Reason.CONSENT_MISSING))
    failed = await gov.store.reserve_budget(
        [BudgetClaim(kind="window", key=f"embed:{ref}", limit=gov.limits.embedding_items_per_agent_hour,
                     cost=len(inputs), window_s=3600, reason=Reason.HOURLY_BUDGET_EXHAUSTED.value)], gov.now())
    facts = RequestFacts(item_count=len(inputs), max_item_bytes=max(utf8_len(i) for i in inputs))
    decision = await decide(request, op, agent_ref=ref, agent=agent_of(ref, gov.app_name(ref), True),
                            request=facts, budget=Budget(embedding_ok=failed is None))
    await record(request, op, decision, scope_id=None)
    if not decision.allowed:
        return error(request, 403, decision)
    metrics.MEMORY_OPERATIONS.labels("embedding").inc(len(inputs))
    return await forward_content(request, request.app[EMBEDDING], path="/embeddings", body=body,
                                 drop=_KAGENT_HEADERS, response_headers=decision_headers(decision))
