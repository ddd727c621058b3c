"""Governed saves and batch saves (SPEC D3, D4, R-10, R-11): checked, budgeted, written item by item.

A batch is forwarded as single saves (kagent's batch answers no ids). Each item is recorded in the
ledger with an immutable hard expiry; a save whose upstream outcome is unknown (timeout, reset)
keeps its in-flight record and marks its namespace possibly written (``saga.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from http import HTTPStatus
from typing import Final

from aiohttp import web

from sidecar import metrics
from sidecar.contentstore.kagent import Created, Unknown
from sidecar.decide.facts import utf8_len
from sidecar.decide.respond import Denied, json_answer
from sidecar.enforce import budgets
from sidecar.enforce.memory import Held, MemoryParts, admit_key, memory_facts, parse_json
from sidecar.enforce.pipeline import Admitted, Call, RouteSpec, Stages
from sidecar.enforce.saga import WriteSaga
from sidecar.policy.model import Decision, Operation
from sidecar.reasons import Reason, Refusal
from sidecar.state.types import BudgetClaim, Claims, Scope, WriteAsk
from sidecar.upstream import filter_headers
from sidecar.wire import StrictJSON, is_int64, is_vector

#: Fields kagent v0.9.11 reads from a save (its Go request struct).
_FIELDS: Final = ("agent_name", "user_id", "content", "vector", "metadata", "ttl_days")
_SAVE = StrictJSON(_FIELDS)
_BATCH = StrictJSON(("items", *_FIELDS))


@dataclass(frozen=True, slots=True)
class SaveItem:
    """One save item as checked: exactly the values memgov forwards (and the carriers it verifies)."""

    user_id: str
    agent_name: str
    content: str
    vector: list[float]
    ttl_days: int | None


def _item(item: object) -> SaveItem | None:
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
    return SaveItem(user_id, agent_name, content, vector, ttl if is_int64(ttl) else None)


def _ttl(requested: object, decision: Decision, max_days: int) -> int:
    ceiling = min(decision.obligations.ttl_days or max_days, max_days)
    if is_int64(requested) and 0 < requested < ceiling:
        return requested
    return ceiling  # kagent treats a missing or non-positive ttl as 15 days: always send the ceiling


async def _parse_save(call: Call) -> list[SaveItem]:
    """A save's one item or a batch's items, each of a shape kagent accepts, all of one key and agent."""
    batch = call.operation is Operation.MEMORY_SAVE_BATCH
    payload = await parse_json(call, _BATCH if batch else _SAVE)
    given = payload.get("items") if batch else [payload]
    items = [_item(i) for i in given] if isinstance(given, list) else []
    checked = [i for i in items if i is not None]
    if not checked or len(checked) != len(items):
        raise Refusal(Reason.BAD_REQUEST)
    first = checked[0]
    if any(i.user_id != first.user_id or i.agent_name != first.agent_name for i in checked):
        raise Refusal(Reason.KEY_INVALID)
    return checked


class Saves(Stages[MemoryParts]):
    """The admit and forward stages of governed saves, over one :class:`MemoryParts`."""

    def _claims(self, cost: int) -> Claims:
        limits = self._p.limits

        def claims(scope: Scope, _window: str | None) -> list[BudgetClaim]:
            lim = limits()
            rate = budgets.sender_rate(lim, scope.principal_mxid, scope.agent)
            return [rate, budgets.scope_hour(lim, scope.scope_id, cost)]

        return claims

    async def admit(self, call: Call, items: list[SaveItem]) -> Admitted[Held[list[SaveItem]]]:
        p, first = self._p, items[0]
        # A save costs one save and one embedding item for the hour; a batch is a save like any other
        # for the sender's rate (limits.yaml), plus one summarization and, per item, one save and one
        # embedding item for the hour.
        cost = 1 + 2 * len(items) if call.operation is Operation.MEMORY_SAVE_BATCH else 2
        # The in-flight lease covers every single save of the call, each bounded by the memory timeout.
        lease_s = p.write_lease_s + len(items) * p.memory_timeout_s
        write = WriteAsk(len(items), p.limits().max_entries, lease_s)
        kf, adm = await admit_key(p, call, first.user_id, first.agent_name, self._claims(cost), write=write)
        return memory_facts(
            p,
            call,
            kf,
            adm,
            items,
            item_count=len(items),
            max_item_bytes=max(utf8_len(i.content) for i in items),
            ttl_days=first.ttl_days,
        )

    async def forward(self, call: Call, held: Held[list[SaveItem]], decision: Decision) -> web.StreamResponse:
        """Forward each item of an admitted save as a single save (its slots and in-flight record are held)."""
        p, adm, items = self._p, held.admission, held.body
        scope, op_id = adm.scope, adm.op_id
        if scope is None:
            raise Denied(decision)  # the policy allows no save without a scope; nothing was reserved for it
        if op_id is None:
            # Allowed, but the admission found the cap full of pending slots or a rotation copying the
            # namespace (the checks reserve_entries and begin_write make).
            raise Refusal(adm.blocked or Reason.STALE_GENERATION, scope_id=scope.scope_id, credentialed=True)
        ns = scope.namespace
        assert ns is not None  # admitted: its slots and in-flight record are in the live namespace
        app = p.agents.app_name(scope.agent)
        # The agent's own headers (its bearer, its trace); kagent's identity names are set by the client.
        headers = filter_headers(call.request.headers)
        max_days = p.limits().max_days
        ttl = _ttl(items[0].ttl_days, decision, max_days)
        lifetime = timedelta(days=max_days)
        refusal: Refusal | None = None  # raised once the write is settled
        async with WriteSaga(p, scope, ns, op_id, adm.slots) as saga:
            for index, item in enumerate(items):
                saga.sending()
                # SECURITY: the client builds the body from the checked values: one canonical agent
                # name and the namespace's storage key, nothing else the caller sent.
                saved = await p.kagent.save(app, ns.storage_key, item.content, item.vector, ttl, headers=headers)
                if isinstance(saved, Unknown):
                    if not saved.sent:
                        saga.answered()  # a connection that never opened wrote nothing
                    raise saved.refusal()
                saga.answered()
                if not isinstance(saved, Created):
                    await saga.undo()
                    refusal = Refusal(
                        Reason.UPSTREAM_ERROR, scope_id=scope.scope_id, credentialed=True, upstream_status=saved.status
                    )
                    break
                if not await saga.landed(saved.id, lifetime, last=index == len(items) - 1):
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

    def spec(self, operation: Operation) -> RouteSpec[list[SaveItem], Held[list[SaveItem]]]:
        """A save or a batch save: one item or several of one key and agent, checked, budgeted and written alike."""
        return RouteSpec(operation, _parse_save, self.admit, self.forward)
