"""Private inspect and exact forget-one (SPEC R-5, R-6).

Inspect is the only control call that returns memory text. Every page needs the subject's token
and a fresh ``X-Memgov-Context`` attesting the control room; the attested state goes through
the policy runtime (engine + floor) as a ``control.inspect`` decision and anything but
``forward`` refuses the page with its reason code and no content. Text is fetched from kagent
for the scope's live namespace, listed with the spelling that reaches every stored agent name,
and kept only for the ledger-live ids of that namespace: exactly what the agent can recall.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING

from aiohttp import web

from sidecar.clock import Clock
from sidecar.contentstore.adapters import AdapterError, listed
from sidecar.contentstore.kagent import KagentMemory, contents
from sidecar.control.auth import Authenticator
from sidecar.control.erasures import ErasureEvidence
from sidecar.control.http import ok, operation, page_limit
from sidecar.control.models import EntryOut, InspectPage, SourceScope
from sidecar.decide.context import Contexts
from sidecar.decide.decider import Decider, Facts
from sidecar.decide.facts import agent_of, audience_of, current_namespace, principal_of, room_of, scope_of
from sidecar.decide.respond import Denied, stamp
from sidecar.erasure.evidence import iso
from sidecar.erasure.machine import ErasureEngine
from sidecar.identity.appname import Agents
from sidecar.policy.model import ContextScope, Decision, Entries, Limits, Operation, RequestFacts
from sidecar.reasons import Reason, Refusal
from sidecar.relay import DECISION_ID
from sidecar.state import codec
from sidecar.state.types import ErasureKind, Scope

if TYPE_CHECKING:
    from sidecar.state.history import HistoryOps
    from sidecar.state.ledger import LedgerOps
    from sidecar.state.lineage import LineageOps


def _entry_id(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return codec.check_id(raw, "cursor")
    except ValueError:
        raise Refusal(Reason.BAD_REQUEST) from None


class EntryRoutes:
    """Inspect and forget-one: the live ledger of a scope, kagent's rows of it, an entry's lineage."""

    def __init__(
        self,
        auth: Authenticator,
        decider: Decider,
        contexts: Contexts,
        evidence: ErasureEvidence,
        engine: ErasureEngine,
        ledger: LedgerOps,
        history: HistoryOps,
        lineage: LineageOps,
        kagent: KagentMemory,
        agents: Agents,
        limits: Callable[[], Limits],
        clock: Clock,
    ) -> None:
        self._auth, self._decider, self._contexts, self._evidence, self._engine = (
            auth,
            decider,
            contexts,
            evidence,
            engine,
        )
        self._ledger, self._history, self._lineage, self._kagent = ledger, history, lineage, kagent
        self._agents, self._limits, self._clock = agents, limits, clock

    async def attest(self, request: web.Request, scope: Scope, live: int) -> Decision:
        """Decide ``control.inspect`` on the attested room state; the decision is logged and audited."""
        seen = await self._contexts.seen(request)
        facts, ctx = seen.facts, seen.claims
        # The principal is the one the bridge attests; the policy compares it with the scope's.
        principal = principal_of(ctx.sub, ctx.origin) if ctx else principal_of(scope.principal_mxid, scope.origin)
        agents = self._agents
        asked = Facts(
            agent_ref=scope.agent,
            principal=principal,
            agent=agent_of(scope.agent, agents.app_name(scope.agent), agents.has_memory(scope.agent)),
            scope=scope_of(scope),
            request=RequestFacts(
                context=facts,
                context_scope=ContextScope(kind=ctx.scope.kind.value, room_id=ctx.scope.room_id) if ctx else None,
                context_agent=ctx.agent if ctx else None,
            ),
            room=room_of(ctx.room) if ctx else None,
            audience=audience_of(ctx.audience) if ctx else None,
            entries=Entries(count=live, cap=self._limits().max_entries),
        )
        return await self._decider.decide(
            Operation.CONTROL_INSPECT,
            asked,
            decision_id=request[DECISION_ID],
            scope_id=scope.scope_id,
            credentialed=True,
        )

    async def inspect(self, request: web.Request) -> web.StreamResponse:
        """GET /v1/scopes/{scope_id}/entries?cursor&limit: one bounded page of the subject's memory."""
        operation(request, "scope.inspect")
        _, scope = await self._auth.subject_scope(request)
        limit, cursor = page_limit(request.query.get("limit")), _entry_id(request.query.get("cursor"))
        now = self._clock()
        decision = await self.attest(request, scope, await self._ledger.live_count(scope.scope_id, now))
        if not decision.allowed:
            # SECURITY: drift in the room, audience, context or consent suppresses the whole page.
            raise Denied(decision)
        page = await self._ledger.live_entries(scope.scope_id, now, cursor, limit)
        live_ns = scope.namespace
        current = [e for e in page if live_ns is not None and e.ns_id == live_ns.ns_id]
        texts: dict[str, str] = {}
        if current and live_ns is not None:
            try:
                found = await self._kagent.list(self._agents.query_name(scope.agent), live_ns.storage_key)
                texts = contents(listed(found))
            except AdapterError as exc:
                raise Refusal(exc.reason, status=HTTPStatus.BAD_GATEWAY, scope_id=scope.scope_id) from None
        after = current_namespace(scope, await self._auth.scope_or_none(scope.scope_id))
        if after is None or live_ns is None or after.ns_id != live_ns.ns_id:
            # SECURITY: consent changed while the page was read; nothing read under it goes out.
            raise Refusal(Reason.STALE_GENERATION, scope_id=scope.scope_id)
        source = SourceScope(kind=scope.kind, room_id=scope.room_id)
        body = InspectPage(
            scope_id=scope.scope_id,
            entries=[
                EntryOut(
                    id=e.entry_id,
                    text=texts[e.entry_id],
                    source_scope=source,
                    created_at=iso(e.created_at) or "",
                    expires_at=iso(e.expires_at) or "",
                )
                for e in current
                if e.entry_id in texts
            ],
            next_cursor=page[-1].entry_id if len(page) == limit else None,
        )
        return stamp(ok(body), decision)

    async def forgettable(self, scope: Scope, entry_id: str) -> list[str]:
        """The entry and every copy a rotation made of it that the ledger still holds, current copy last;
        not_found unless that copy is live."""
        # An id shown before a rotation re-saved the entry still names it: follow it to the current copy,
        # and erase every copy (the evidence then covers them all). A copy whose row was compacted was
        # erased and verified long ago, with its own evidence; it is no part of this erasure.
        chain = await self._lineage.lineage(scope.scope_id, entry_id)
        held = {e.entry_id: e for e in await self._history.entries_by_id(scope.scope_id, chain)}
        entry = held.get(chain[-1])
        if entry is None or entry.tombstoned_at is not None or entry.physically_deleted_at is not None:
            raise Refusal(Reason.NOT_FOUND, scope_id=scope.scope_id)
        return [e for e in chain if e in held]

    async def forget_one(self, request: web.Request) -> web.Response:
        """DELETE /v1/scopes/{scope_id}/entries/{entry_id}: erase exactly one ledger entry, with evidence."""
        operation(request, "scope.forget_one")
        caller, scope = await self._auth.subject_scope(request)
        chain = await self.forgettable(scope, request.match_info["entry_id"])
        await self._auth.spend(caller)
        erasure = await self._engine.erase(scope, ErasureKind.FORGET_ONE, "subject", chain)
        return ok(await self._evidence.answer(erasure))
