"""Governed memory calls from agent runtimes: save, batch save, search (SPEC D1–D3, R-9–R-11).

The runtime presents the session key as ``user_id``. The gateway verifies it, checks the scope
is enabled at that generation and the agent name is the scope's, reserves budgets, asks the
policy, and only then forwards with ``user_id`` rewritten to the scope's storage key. Saves are
recorded in the ledger with an immutable hard expiry; searches come back filtered by it.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from aiohttp import web

from sidecar import metrics, tracing
from sidecar.enforce.facts import KeyFacts, agent_of, is_vector, parse_object, principal_of, scope_of, utf8_len
from sidecar.enforce.respond import decide, error, gov_of, json_answer, record, refuse
from sidecar.enforce.runtime import Governance
from sidecar.erasure.adapters import AdapterError
from sidecar.identity.keys import storage_key
from sidecar.policy.model import Budget, Decision, Entries, Operation, RequestFacts
from sidecar.proxy import CONTROLLER, read_body
from sidecar.reasons import Reason
from sidecar.routes import RouteMatch
from sidecar.state.types import BudgetClaim, CapReached, Fenced, Scope
from sidecar.upstream import Upstream, filter_headers

SAVE_PATH = "/api/memories/sessions"
SEARCH_PATH = "/api/memories/search"


def _fact_ok(item: object) -> bool:
    return (isinstance(item, dict) and isinstance(item.get("content", ""), str)
            and isinstance(item.get("agent_name"), str) and isinstance(item.get("user_id"), str)
            and is_vector(item.get("vector")))


def _rate_claim(gov: Governance, scope: Scope) -> BudgetClaim:
    lim = gov.limits
    return BudgetClaim(kind="bucket", key=f"rate:{scope.principal_mxid}:{scope.agent}", limit=lim.rate_burst,
                       refill_per_s=lim.rate_per_minute / 60.0, reason=Reason.RATE_LIMITED.value)


def _hour_claim(gov: Governance, scope: Scope, cost: int) -> BudgetClaim:
    return BudgetClaim(kind="window", key=f"hour:{scope.scope_id}", limit=gov.limits.hourly_operations, cost=cost,
                       window_s=3600, reason=Reason.HOURLY_BUDGET_EXHAUSTED.value)


def _budget(failed: str | None) -> Budget:
    return Budget(rate_ok=failed != Reason.RATE_LIMITED, hourly_ok=failed != Reason.HOURLY_BUDGET_EXHAUSTED,
                  prefetch_ok=failed != Reason.PREFETCH_LIMIT, embedding_ok=True)


@tracing.traced("memgov.identify")
async def _identify(request: web.Request, user_id: object, agent_name: object) -> tuple[KeyFacts, Scope | None, bool]:
    """Verify the key and load its scope; the bool says whether the scope is live at that generation."""
    gov = gov_of(request)
    kf = KeyFacts(gov.keys, user_id, request.headers.get("X-User-Id"), agent_name, request.headers.get("X-Agent-Name"))
    scope = await gov.store.get_scope(kf.scope_id) if kf.key_valid and kf.scope_id else None
    live = scope is not None and scope.enabled and scope.generation == kf.generation and kf.user_id_matches
    return kf, scope, live


async def _decide(request: web.Request, op: Operation, kf: KeyFacts, scope: Scope | None, *, budget: Budget,
                  entries: Entries | None = None, **facts: Any) -> Decision:
    gov = gov_of(request)
    rf = RequestFacts(presented_generation=kf.generation, key_valid=kf.key_valid, user_id_matches=kf.user_id_matches,
                      caller_agent_name=kf.agent_name, header_agent_name=kf.header_agent,
                      agent_name_matches=scope is not None and kf.agent_matches(scope.agent, gov.agent_refs), **facts)
    decision = await decide(
        request, op, agent_ref=scope.agent if scope else None,
        principal=principal_of(scope.principal_mxid, scope.origin) if scope else None,
        agent=agent_of(scope.agent, gov.app_name(scope.agent), gov.is_memory_agent(scope.agent)) if scope else None,
        scope=scope_of(scope) if scope else None, request=rf, budget=budget, entries=entries,
    )
    await record(request, op, decision, scope_id=scope.scope_id if scope else None)
    return decision


def _upstream_headers(request: web.Request, key: str) -> dict[str, str]:
    headers = dict(filter_headers(request.headers, drop=("Host", "Content-Length", "Content-Type", "X-User-Id")))
    headers.update({"Content-Type": "application/json", "X-User-Id": key})
    return headers


async def _post(upstream: Upstream, path: str, headers: dict[str, str], payload: object) -> tuple[int, Any]:
    """POST JSON to kagent; returns (status, parsed body or None). Error bodies are never kept."""
    from multidict import CIMultiDict

    data = json.dumps(payload, separators=(",", ":")).encode()
    async with (tracing.span("memgov.forward", upstream=upstream.name),
                upstream.request("POST", path, headers=CIMultiDict(headers), data=data) as resp):
        raw = await resp.read()
        if resp.status >= 400:
            return resp.status, None
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return 502, None


def _ttl(requested: object, decision: Decision, max_days: int) -> int:
    ceiling = min(decision.obligations.ttl_days or max_days, max_days)
    if isinstance(requested, int) and not isinstance(requested, bool) and 0 < requested < ceiling:
        return requested
    return ceiling  # kagent treats a missing or non-positive ttl as 15 days: always send the ceiling


async def _write(request: web.Request, op: Operation, kf: KeyFacts, scope: Scope, decision: Decision,
                 facts: list[dict[str, Any]]) -> web.StreamResponse:
    """Reserve ledger slots, fence, forward each fact as a single save, record or roll back."""
    gov = gov_of(request)
    gen = kf.generation or 0
    now = gov.now()
    try:
        slots = await gov.store.reserve_entries(scope.scope_id, gen, len(facts), gov.limits.max_entries, now)
    except CapReached:
        return error(request, 403, await refuse(request, op, Reason.ENTRY_CAP_REACHED, scope_id=scope.scope_id))
    except Fenced as fenced:  # withdrawn between the decision and the reservation
        return error(request, 403, await refuse(request, op, fenced.reason, scope_id=scope.scope_id))
    try:
        op_id = await gov.store.begin_write(scope.scope_id, gen, gov.settings.enforce.write_lease_s, now)
    except Fenced as fenced:
        await gov.store.release_entries(slots)
        return error(request, 403, await refuse(request, op, fenced.reason, scope_id=scope.scope_id))
    key = storage_key(scope.scope_id, gen)
    app = gov.app_name(scope.agent)
    headers = _upstream_headers(request, key)
    ttl = _ttl(facts[0].get("ttl_days"), decision, gov.limits.max_days)
    created: list[str] = []
    try:
        for fact in facts:
            body = {"agent_name": fact["agent_name"], "user_id": key, "content": fact.get("content", ""),
                    "vector": fact["vector"], "ttl_days": ttl}
            status, answer = await _post(request.app[CONTROLLER], SAVE_PATH, headers, body)
            entry_id = answer.get("id") if isinstance(answer, dict) else None
            if status != 201 or not isinstance(entry_id, str):
                await _roll_back(gov, scope, gen, app, key, created, slots[len(created):])
                reason = await refuse(request, op, Reason.UPSTREAM_ERROR, scope_id=scope.scope_id)
                return error(request, status if status >= 400 else 502, reason)
            created.append(entry_id)
            at = gov.now()
            await gov.store.fill_entry(slots[len(created) - 1], entry_id, at, at + timedelta(days=gov.limits.max_days))
        current = await gov.store.get_scope(scope.scope_id)
        if current is None or not current.enabled or current.generation != gen:
            # SECURITY: consent was withdrawn while this write was in flight; undo it at once.
            await _roll_back(gov, scope, gen, app, key, created, [], dead_namespace=True)
            return error(request, 403, await refuse(request, op, Reason.STALE_GENERATION, scope_id=scope.scope_id))
    except BaseException:
        await _roll_back(gov, scope, gen, app, key, created, slots[len(created):])
        raise
    finally:
        await gov.store.end_write(op_id)
    metrics.MEMORY_OPERATIONS.labels("save").inc(len(created))
    if op is Operation.MEMORY_SAVE_BATCH:
        metrics.MEMORY_OPERATIONS.labels("summarization").inc()
        return json_answer(201, {"count": len(created)}, decision)
    return json_answer(201, {"id": created[0]}, decision)


async def _roll_back(gov: Governance, scope: Scope, gen: int, app: str, key: str, created: list[str],
                     unused_slots: list[str], *, dead_namespace: bool = False) -> None:
    """Make created entries unreadable now, and physically gone where the adapter can."""
    if unused_slots:
        await gov.store.release_entries(unused_slots)
    if not created:
        return
    now = gov.now()
    await gov.store.tombstone(scope.scope_id, created, now)
    try:
        if dead_namespace:
            await gov.eraser.delete_namespace(app, key)  # the old generation's namespace is never read again
        elif gov.eraser.exact:
            await gov.eraser.delete_entries(app, key, created)
        else:
            return  # rest adapter: tombstoned, physical deletion pending until the namespace is cleared
        await gov.store.mark_physically_deleted(created, gov.now())
    except AdapterError:
        pass  # tombstoned already; the sweepers retry the physical deletion


async def handle_save(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    op = Operation.MEMORY_SAVE
    payload = parse_object(await read_body(request))
    if payload is None or not _fact_ok(payload):
        return error(request, 400, await refuse(request, op, Reason.BAD_REQUEST))
    gov = gov_of(request)
    kf, scope, live = await _identify(request, payload["user_id"], payload["agent_name"])
    budget, entries = Budget(), None
    if live and scope is not None:
        budget = _budget(await gov.store.reserve_budget([_rate_claim(gov, scope), _hour_claim(gov, scope, 2)],
                                                        gov.now()))
        entries = Entries(count=await gov.store.live_count(scope.scope_id, gov.now()), cap=gov.limits.max_entries)
    decision = await _decide(request, op, kf, scope, budget=budget, entries=entries, item_count=1,
                             max_item_bytes=utf8_len(payload.get("content", "")),
                             ttl_days=_int(payload.get("ttl_days")))
    if not decision.allowed or scope is None:
        return error(request, 403, decision)
    return await _write(request, op, kf, scope, decision, [payload])


async def handle_save_batch(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    op = Operation.MEMORY_SAVE_BATCH
    payload = parse_object(await read_body(request))
    items = payload.get("items") if payload is not None else None
    if not isinstance(items, list) or not items or not all(_fact_ok(i) for i in items):
        return error(request, 400, await refuse(request, op, Reason.BAD_REQUEST))
    first = items[0]
    if any(i["user_id"] != first["user_id"] or i["agent_name"] != first["agent_name"] for i in items):
        return error(request, 403, await refuse(request, op, Reason.KEY_INVALID))
    gov = gov_of(request)
    kf, scope, live = await _identify(request, first["user_id"], first["agent_name"])
    budget, entries = Budget(), None
    if live and scope is not None:
        # One summarization plus, per fact, one save and one embedding item (SPEC R-11).
        cost = 1 + 2 * len(items)
        budget = _budget(await gov.store.reserve_budget([_hour_claim(gov, scope, cost)], gov.now()))
        entries = Entries(count=await gov.store.live_count(scope.scope_id, gov.now()), cap=gov.limits.max_entries)
    decision = await _decide(request, op, kf, scope, budget=budget, entries=entries, item_count=len(items),
                             max_item_bytes=max(utf8_len(i.get("content", "")) for i in items),
                             ttl_days=_int(first.get("ttl_days")))
    if not decision.allowed or scope is None:
        return error(request, 403, decision)
    return await _write(request, op, kf, scope, decision, items)


async def handle_search(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    op = Operation.MEMORY_SEARCH
    payload = parse_object(await read_body(request))
    if payload is None or not is_vector(payload.get("vector")):
        return json_answer(200, [], await refuse(request, op, Reason.BAD_REQUEST))
    gov = gov_of(request)
    kf, scope, live = await _identify(request, payload.get("user_id"), payload.get("agent_name"))
    budget, prefetch = Budget(), False
    if live and scope is not None:
        window = await gov.store.prefetch_window(scope.scope_id, gov.now())
        prefetch = window is not None
        first = (BudgetClaim(kind="counter", key=f"prefetch:{window}", limit=gov.limits.prefetch_searches,
                             ttl_s=gov.settings.enforce.prefetch_window_s, reason=Reason.PREFETCH_LIMIT.value)
                 if prefetch else _rate_claim(gov, scope))
        budget = _budget(await gov.store.reserve_budget([first, _hour_claim(gov, scope, 2)], gov.now()))
    limit = _int(payload.get("limit"))
    decision = await _decide(request, op, kf, scope, budget=budget, limit=limit, is_prefetch=prefetch)
    if not decision.allowed or scope is None:
        return json_answer(200, [], decision)
    gen = kf.generation or 0
    ceiling = decision.obligations.max_limit or gov.limits.search_max_limit
    body = {"agent_name": payload["agent_name"], "user_id": storage_key(scope.scope_id, gen),
            "vector": payload["vector"], "limit": min(limit if limit and limit > 0 else 5, ceiling),
            "min_score": payload.get("min_score", 0)}
    status, rows = await _post(request.app[CONTROLLER], SEARCH_PATH,
                               _upstream_headers(request, storage_key(scope.scope_id, gen)), body)
    if status >= 400 or not isinstance(rows, list):
        return error(request, status if status >= 400 else 502,
                     await refuse(request, op, Reason.UPSTREAM_ERROR, scope_id=scope.scope_id))
    ids = [r["id"] for r in rows if isinstance(r, dict) and isinstance(r.get("id"), str)]
    keep = await gov.store.filter_live(scope.scope_id, gen, ids, gov.now())
    metrics.MEMORY_OPERATIONS.labels("retrieval").inc()
    return json_answer(200, [r for r in rows if isinstance(r, dict) and r.get("id") in keep], decision)


async def handle_list_or_delete(request: web.Request, match: RouteMatch) -> web.StreamResponse:
    """Whole-namespace list and delete are control-plane work: the data plane refuses them."""
    op = Operation(match.cls.value)
    return error(request, 403, await refuse(request, op, Reason.ROUTE_DENIED))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
