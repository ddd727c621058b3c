"""Governed searches (SPEC D3, R-9, R-11): the scope's live namespace, answered through the ledger's live filter.

Only ledger-known, non-tombstoned ids whose hard expiry lies ahead come back, whatever kagent
returns (expired rows included, which kagent keeps searchable).
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

from aiohttp import web

from sidecar import metrics
from sidecar.contentstore.kagent import Rejected, Row, Unknown
from sidecar.decide.facts import current_namespace
from sidecar.decide.respond import json_answer
from sidecar.enforce import budgets
from sidecar.enforce.memory import Held, MemoryParts, admit_key, memory_facts, parse_json
from sidecar.enforce.pipeline import Admitted, Call, RouteSpec, Stages
from sidecar.policy.model import Decision, Operation
from sidecar.reasons import Reason, Refusal
from sidecar.state.types import BudgetClaim, Namespace, Scope
from sidecar.upstream import filter_headers
from sidecar.wire import StrictJSON, is_int64, is_number, is_vector

#: Fields kagent v0.9.11 reads from a search (its Go request struct).
_SEARCH = StrictJSON(("agent_name", "user_id", "vector", "limit", "min_score"))


@dataclass(frozen=True, slots=True)
class SearchAsk:
    """A search as checked; the carriers stay unchecked values until the key check reads them."""

    user_id: object
    agent_name: object
    vector: list[float]
    limit: int | None
    min_score: float


def _search_ask(payload: dict[str, object]) -> SearchAsk | None:
    vector, limit, min_score = payload.get("vector"), payload.get("limit"), payload.get("min_score", 0)
    if not is_vector(vector) or not is_number(min_score):
        return None
    if "limit" in payload and not is_int64(limit):
        return None
    return SearchAsk(
        payload.get("user_id"), payload.get("agent_name"), vector, limit if is_int64(limit) else None, min_score
    )


async def _parse_search(call: Call) -> SearchAsk:
    ask = _search_ask(await parse_json(call, _SEARCH))
    if ask is None:
        raise Refusal(Reason.BAD_REQUEST)
    return ask


class Searches(Stages[MemoryParts]):
    """The admit and forward stages of governed searches, over one :class:`MemoryParts`."""

    async def admit(self, call: Call, ask: SearchAsk) -> Admitted[Held[SearchAsk]]:
        p = self._p

        def claims(scope: Scope, window: str | None) -> list[BudgetClaim]:
            lim = p.limits()
            first = (
                budgets.prefetch(lim, window, p.prefetch_window_s)
                if window is not None
                else budgets.sender_rate(lim, scope.principal_mxid, scope.agent)
            )
            return [first, budgets.scope_hour(lim, scope.scope_id, 2)]

        kf, adm = await admit_key(p, call, ask.user_id, ask.agent_name, claims, window=True)
        return memory_facts(p, call, kf, adm, ask, limit=ask.limit, is_prefetch=adm.window is not None)

    async def forward(self, call: Call, held: Held[SearchAsk], decision: Decision) -> web.StreamResponse:
        """Search the scope's live namespace and answer only what the ledger still holds live."""
        p, scope, ask = self._p, held.admission.scope, held.body
        if scope is None or scope.namespace is None:
            return json_answer(HTTPStatus.OK, [], decision)
        ns: Namespace | None = scope.namespace
        limit = ask.limit
        ceiling = decision.obligations.max_limit or p.limits().search_max_limit
        app = p.agents.app_name(scope.agent)
        headers = filter_headers(call.request.headers)
        found: list[Row] = []
        # At most twice: a rotation may switch the scope to a fresh namespace while a search is under way.
        for _ in range(2):
            if ns is None:
                break
            searched = await p.kagent.search(
                app,
                ns.storage_key,
                ask.vector,
                min(limit if limit and limit > 0 else 5, ceiling),
                ask.min_score,
                headers=headers,
            )
            if isinstance(searched, Unknown):
                raise searched.refusal()
            if isinstance(searched, Rejected):
                raise Refusal(
                    Reason.UPSTREAM_ERROR, scope_id=scope.scope_id, credentialed=True, upstream_status=searched.status
                )
            ids = searched.ids
            keep = await p.ledger.filter_live(scope.scope_id, ns.ns_id, ids, p.clock())
            found = [r for i, r in zip(ids, searched.rows, strict=True) if i in keep]
            if ids and len(keep) == len(ids):
                break
            # A rotation switched the scope to a fresh namespace since it was read: search that one.
            current = current_namespace(scope, await p.scopes.get_scope(scope.scope_id))
            ns = current if current is not None and current.ns_id != ns.ns_id else None
        metrics.MEMORY_OPERATIONS.labels("retrieval").inc()
        return json_answer(HTTPStatus.OK, found, decision)

    def spec(self) -> RouteSpec[SearchAsk, Held[SearchAsk]]:
        return RouteSpec(Operation.MEMORY_SEARCH, _parse_search, self.admit, self.forward)
