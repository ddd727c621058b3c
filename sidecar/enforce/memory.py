"""Governed memory calls from agent runtimes: save, batch save, search (SPEC D1–D4, R-9–R-11, R-18).

The runtime presents the session key as ``user_id``. The gateway parses the body once, strictly
(``sidecar.wire``), verifies the key, checks the scope is enabled at that generation and the
agent name is the scope's, reserves budgets, asks the policy, and only then forwards a body it
serialized itself: ``user_id`` is the scope's live storage key and ``agent_name`` the scope's one
canonical ``app_name``, whatever spelling the runtime used. Saves are recorded in the ledger
with an immutable hard expiry; searches come back filtered by it. A save whose upstream outcome
is unknown (timeout, reset) keeps its in-flight record and marks its namespace possibly written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from http import HTTPStatus
from typing import Final, Generic, TypeVar

from aiohttp import web

from sidecar import metrics, tracing
from sidecar.contentstore.kagent import Created, KagentMemory, Refused, Row, Unknown
from sidecar.decide.facts import KeyFacts, agent_of, principal_of, scope_of, utf8_len
from sidecar.decide.respond import Denied, Facts, json_answer
from sidecar.enforce import budgets
from sidecar.enforce.pipeline import Admitted, Call, RouteSpec
from sidecar.enforce.ports import write_path
from sidecar.enforce.saga import WriteSaga
from sidecar.governance import Governance
from sidecar.policy.model import Budget, Decision, Entries, Operation, RequestFacts
from sidecar.reasons import Reason, Refusal
from sidecar.relay import MEMORY_API, read_body
from sidecar.state.types import Admission, BudgetClaim, Claims, Namespace, Scope, WriteAsk
from sidecar.upstream import filter_headers
from sidecar.wire import BadBody, StrictJSON, is_int64, is_number, is_vector

#: Fields kagent v0.9.11 reads from a save and from a search (its Go request structs).
_SAVE_FIELDS: Final = ("agent_name", "user_id", "content", "vector", "metadata", "ttl_days")
_SEARCH_FIELDS: Final = ("agent_name", "user_id", "vector", "limit", "min_score")
_SAVE = StrictJSON(_SAVE_FIELDS)
_BATCH = StrictJSON(("items", *_SAVE_FIELDS))
_SEARCH = StrictJSON(_SEARCH_FIELDS)
B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class Held(Generic[B]):
    """What a memory call's forward stage needs: its admission and its checked body."""

    admission: Admission
    body: B


@dataclass(frozen=True, slots=True)
class Fact:
    """One save item as checked: exactly the values memgov forwards (and the carriers it verifies)."""

    user_id: str
    agent_name: str
    content: str
    vector: list[float]
    ttl_days: int | None


def _fact(item: object) -> Fact | None:
    """A save item kagent would accept, with every field memgov forwards of the right type; else None."""
    if not isinstance(item, dict):
        return None
    content, user_id, agent_name, vector = (
        item.get("content", ""),
        item.get("user_id"),
        item.get("agent_name"),
        item.get("vector"),
    )
    ttl = item.get("ttl_days")
    if not (
        isinstance(content, str) and isinstance(agent_name, str) and isinstance(user_id, str) and is_vector(vector)
    ):
        return None
    if "ttl_days" in item and not is_int64(ttl):
        return None
    return Fact(user_id, agent_name, content, vector, ttl if is_int64(ttl) else None)


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


def _budget(failed: str | None, hourly_used: int) -> Budget:
    return Budget(
        rate_ok=failed != Reason.RATE_LIMITED,
        hourly_ok=failed != Reason.HOURLY_BUDGET_EXHAUSTED,
        prefetch_ok=failed != Reason.PREFETCH_LIMIT,
        embedding_ok=True,
        hourly_operations_used=hourly_used,
    )


@tracing.traced("memgov.identify")
async def _admit(
    call: Call,
    user_id: object,
    agent_name: object,
    claims: Claims,
    *,
    window: bool = False,
    write: WriteAsk | None = None,
) -> tuple[KeyFacts, Admission]:
    """Verify the key, then read its scope and reserve the call's cost in one state transaction."""
    gov, headers = call.gov, call.request.headers
    kf = KeyFacts(gov.keys, user_id, headers.get("X-User-Id"), agent_name, headers.get("X-Agent-Name"))
    if not (kf.key_valid and kf.scope_id and kf.user_id_matches):
        # Nothing to reserve for a caller that proved no scope; the decision still sees the scope.
        return kf, Admission(
            await write_path(gov).scopes.get_scope(kf.scope_id) if kf.key_valid and kf.scope_id else None
        )
    return kf, await write_path(gov).admission.admit(
        kf.scope_id, kf.generation, claims, gov.now(), window=window, write=write
    )


def _save_claims(gov: Governance, cost: int) -> Claims:
    def claims(scope: Scope, _window: str | None) -> list[BudgetClaim]:
        lim = gov.limits
        rate = budgets.sender_rate(lim, scope.principal_mxid, scope.agent)
        return [rate, budgets.scope_hour(lim, scope.scope_id, cost)]

    return claims


def _lease_s(gov: Governance, n: int) -> float:
    # The in-flight lease covers every single save of the call, each bounded by the memory timeout.
    return gov.settings.enforce.write_lease_s + n * gov.settings.upstream.memory_timeout_s


def _memory_facts(
    call: Call,
    kf: KeyFacts,
    adm: Admission,
    body: B,
    *,
    item_count: int = 0,
    max_item_bytes: int = 0,
    ttl_days: int | None = None,
    limit: int | None = None,
    is_prefetch: bool = False,
) -> Admitted[Held[B]]:
    """A memory call's decision facts, from its key check, its admission and what its body asks;
    what forward needs is the admission and the checked body."""
    gov = call.gov
    scope = adm.scope
    # The scope's hourly count after this call's reservation (against the global value): the policy
    # holds it to the agent's own cap from limits.yaml's agent_limits.
    hourly_used = adm.levels.get(budgets.scope_hour_key(scope.scope_id), 0) if scope is not None else 0
    budget = _budget(adm.refused, hourly_used) if adm.live else Budget()
    saving = call.operation is not Operation.MEMORY_SEARCH
    entries = Entries(count=adm.live_count, cap=gov.limits.max_entries) if adm.live and saving else None
    rf = RequestFacts(
        presented_generation=kf.generation,
        key_valid=kf.key_valid,
        user_id_matches=kf.user_id_matches,
        caller_agent_name=kf.agent_name,
        header_agent_name=kf.header_agent,
        agent_name_matches=scope is not None and kf.agent_matches(scope.agent, gov.agent_names),
        item_count=item_count,
        max_item_bytes=max_item_bytes,
        ttl_days=ttl_days,
        limit=limit,
        is_prefetch=is_prefetch,
    )
    facts = Facts(
        agent_ref=scope.agent if scope else None,
        principal=principal_of(scope.principal_mxid, scope.origin) if scope else None,
        agent=agent_of(scope.agent, gov.app_name(scope.agent), gov.is_memory_agent(scope.agent)) if scope else None,
        scope=scope_of(scope) if scope else None,
        request=rf,
        budget=budget,
        entries=entries,
    )
    release = None
    if adm.op_id is not None:
        store = write_path(gov)

        async def release() -> None:
            # A refused save gives back its entry slots and its in-flight record at once.
            await store.admission.release_write(adm)

    scope_id = scope.scope_id if scope else None
    return Admitted(facts, Held(adm, body), scope_id=scope_id, credentialed=kf.key_valid, release=release)


def _ttl(requested: object, decision: Decision, max_days: int) -> int:
    ceiling = min(decision.obligations.ttl_days or max_days, max_days)
    if is_int64(requested) and 0 < requested < ceiling:
        return requested
    return ceiling  # kagent treats a missing or non-positive ttl as 15 days: always send the ceiling


async def _forward_save(call: Call, held: Held[list[Fact]], decision: Decision) -> web.StreamResponse:
    """Forward each fact of an admitted save as a single save (its slots and in-flight record are held)."""
    gov, adm, facts = call.gov, held.admission, held.body
    scope, op_id = adm.scope, adm.op_id
    if scope is None:
        raise Denied(decision)  # the policy allows no save without a scope; nothing was reserved for it
    if op_id is None:
        # Allowed, but the admission found the cap full of pending slots or a rotation copying the
        # namespace (the checks reserve_entries and begin_write make).
        raise Refusal(adm.blocked or Reason.STALE_GENERATION, scope_id=scope.scope_id, credentialed=True)
    ns = scope.namespace
    assert ns is not None  # admitted: its slots and in-flight record are in the live namespace
    app = gov.app_name(scope.agent)
    kagent: KagentMemory = call.request.app[MEMORY_API]
    # The agent's own headers (its bearer, its trace); kagent's identity names are set by the client.
    headers = filter_headers(call.request.headers)
    ttl = _ttl(facts[0].ttl_days, decision, gov.limits.max_days)
    lifetime = timedelta(days=gov.limits.max_days)
    refusal: Refusal | None = None  # raised once the write is settled
    async with WriteSaga(gov, scope, ns, op_id, adm.slots) as saga:
        for index, fact in enumerate(facts):
            saga.sending()
            # SECURITY: the client builds the body from the checked values: one canonical agent
            # name and the namespace's storage key, nothing else the caller sent.
            saved = await kagent.save(app, ns.storage_key, fact.content, fact.vector, ttl, headers=headers)
            if isinstance(saved, Unknown):
                if not saved.sent:
                    saga.answered()  # a connection that never opened wrote nothing
                raise saved.refusal()
            saga.answered()
            if not isinstance(saved, Created):
                await saga.undo()
                status = saved.status
                refusal = Refusal(
                    Reason.UPSTREAM_ERROR, scope_id=scope.scope_id, credentialed=True, upstream_status=status
                )
                break
            if not await saga.landed(saved.id, lifetime, last=index == len(facts) - 1):
                # SECURITY: consent was withdrawn (or the namespace retired) while this write was in
                # flight; undo it at once.
                await saga.undo(dead_namespace=True)
                refusal = Refusal(Reason.STALE_GENERATION, scope_id=scope.scope_id, credentialed=True)
    if refusal is not None:
        raise refusal
    created = saga.created
    metrics.MEMORY_OPERATIONS.labels("save").inc(len(created))
    if call.operation is Operation.MEMORY_SAVE_BATCH:
        metrics.MEMORY_OPERATIONS.labels("summarization").inc()
        return json_answer(HTTPStatus.CREATED, {"count": len(created)}, decision)
    return json_answer(HTTPStatus.CREATED, {"id": created[0]}, decision)


async def _parse(call: Call, parser: StrictJSON) -> dict[str, object]:
    """The strictly parsed body; anything else is refused bad_request (counted, no audit row)."""
    request = call.request
    if request.headers.get("Content-Encoding", "identity").lower() != "identity":
        raise Refusal(Reason.BAD_REQUEST)
    try:
        return parser.parse_object(await read_body(request))
    except BadBody:
        raise Refusal(Reason.BAD_REQUEST) from None


async def _parse_save(call: Call) -> list[Fact]:
    """A save's one fact or a batch's facts, each of a shape kagent accepts, all of one key and agent."""
    batch = call.operation is Operation.MEMORY_SAVE_BATCH
    payload = await _parse(call, _BATCH if batch else _SAVE)
    given = payload.get("items") if batch else [payload]
    items = [_fact(i) for i in given] if isinstance(given, list) else []
    checked = [i for i in items if i is not None]
    if not checked or len(checked) != len(items):
        raise Refusal(Reason.BAD_REQUEST)
    first = checked[0]
    if any(i.user_id != first.user_id or i.agent_name != first.agent_name for i in checked):
        raise Refusal(Reason.KEY_INVALID)
    return checked


async def _admit_save(call: Call, items: list[Fact]) -> Admitted[Held[list[Fact]]]:
    gov, first = call.gov, items[0]
    # A save costs one save and one embedding item for the hour; a batch is a save like any other
    # for the sender's rate (limits.yaml), plus one summarization and, per fact, one save and one
    # embedding item for the hour.
    cost = 1 + 2 * len(items) if call.operation is Operation.MEMORY_SAVE_BATCH else 2
    write = WriteAsk(len(items), gov.limits.max_entries, _lease_s(gov, len(items)))
    kf, adm = await _admit(call, first.user_id, first.agent_name, _save_claims(gov, cost), write=write)
    return _memory_facts(
        call,
        kf,
        adm,
        items,
        item_count=len(items),
        max_item_bytes=max(utf8_len(i.content) for i in items),
        ttl_days=first.ttl_days,
    )


def save_spec(operation: Operation) -> RouteSpec[list[Fact], Held[list[Fact]]]:
    """A save or a batch save: one fact or several of one key and agent, checked, budgeted and written alike."""
    return RouteSpec(operation, _parse_save, _admit_save, _forward_save)


async def _parse_search(call: Call) -> SearchAsk:
    ask = _search_ask(await _parse(call, _SEARCH))
    if ask is None:
        raise Refusal(Reason.BAD_REQUEST)
    return ask


async def _admit_search(call: Call, ask: SearchAsk) -> Admitted[Held[SearchAsk]]:
    gov = call.gov

    def claims(scope: Scope, window: str | None) -> list[BudgetClaim]:
        lim = gov.limits
        first = (
            budgets.prefetch(lim, window, gov.settings.enforce.prefetch_window_s)
            if window is not None
            else budgets.sender_rate(lim, scope.principal_mxid, scope.agent)
        )
        return [first, budgets.scope_hour(lim, scope.scope_id, 2)]

    kf, adm = await _admit(call, ask.user_id, ask.agent_name, claims, window=True)
    return _memory_facts(call, kf, adm, ask, limit=ask.limit, is_prefetch=adm.window is not None)


async def _forward_search(call: Call, held: Held[SearchAsk], decision: Decision) -> web.StreamResponse:
    """Search the scope's live namespace and answer only what the ledger still holds live."""
    gov, scope, ask = call.gov, held.admission.scope, held.body
    if scope is None or scope.namespace is None:
        return json_answer(HTTPStatus.OK, [], decision)
    ns: Namespace | None = scope.namespace
    limit = ask.limit
    ceiling = decision.obligations.max_limit or gov.limits.search_max_limit
    app = gov.app_name(scope.agent)
    kagent: KagentMemory = call.request.app[MEMORY_API]
    headers = filter_headers(call.request.headers)
    found: list[Row] = []
    # At most twice: a rotation may switch the scope to a fresh namespace while a search is under way.
    for _ in range(2):
        if ns is None:
            break
        searched = await kagent.search(
            app,
            ns.storage_key,
            ask.vector,
            min(limit if limit and limit > 0 else 5, ceiling),
            ask.min_score,
            headers=headers,
        )
        if isinstance(searched, Unknown):
            raise searched.refusal()
        if isinstance(searched, Refused):
            raise Refusal(
                Reason.UPSTREAM_ERROR, scope_id=scope.scope_id, credentialed=True, upstream_status=searched.status
            )
        ids = searched.ids
        keep = await write_path(gov).ledger.filter_live(scope.scope_id, ns.ns_id, ids, gov.now())
        found = [r for i, r in zip(ids, searched.rows, strict=True) if i in keep]
        if ids and len(keep) == len(ids):
            break
        ns = await _switched(gov, scope, ns)
    metrics.MEMORY_OPERATIONS.labels("retrieval").inc()
    return json_answer(HTTPStatus.OK, found, decision)


SEARCH: Final = RouteSpec(Operation.MEMORY_SEARCH, _parse_search, _admit_search, _forward_search)


async def _switched(gov: Governance, scope: Scope, ns: Namespace) -> Namespace | None:
    """The scope's new live namespace when a rotation switched it since ``ns`` was read, else None."""
    now = await write_path(gov).scopes.get_scope(scope.scope_id)
    if (
        now is None
        or not now.enabled
        or now.generation != scope.generation
        or now.namespace is None
        or now.namespace.ns_id == ns.ns_id
    ):
        return None
    return now.namespace
