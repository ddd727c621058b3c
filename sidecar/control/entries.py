"""Private inspect and exact forget-one (SPEC R-5, R-6).

Inspect is the only control call that returns memory text. Every page needs the subject's token
and a fresh ``X-Memgov-Context`` attesting the control room; the attested state goes through
the policy runtime (engine + floor) as a ``control.inspect`` decision and anything but
``forward`` refuses the page with its reason code and no content. Text is fetched from kagent
for the scope's live namespace, listed with the spelling that reaches every stored agent name,
and kept only for the ledger-live ids of that namespace: exactly what the agent can recall.
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from sidecar.contentstore.adapters import AdapterError, listed
from sidecar.contentstore.kagent import contents
from sidecar.control.auth import spend, subject_scope
from sidecar.control.erasures import erasure_answer
from sidecar.control.http import ERASURE, ok, operation
from sidecar.control.models import EntryOut, InspectPage, SourceScope
from sidecar.control.ports import entry_reads
from sidecar.decide.context import seen_context
from sidecar.decide.facts import agent_of, audience_of, principal_of, room_of, scope_of
from sidecar.decide.respond import Denied, Facts, decide_and_record, stamp
from sidecar.erasure.evidence import iso
from sidecar.erasure.machine import Kind
from sidecar.governance import GOVERNANCE, Governance
from sidecar.policy.model import ContextScope, Decision, Entries, Operation, RequestFacts
from sidecar.reasons import Reason, Refusal
from sidecar.state import codec
from sidecar.state.types import Scope

DEFAULT_LIMIT = 20
MAX_LIMIT = 50


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise Refusal(Reason.BAD_REQUEST)
    return int(raw)


def _entry_id(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return codec.check_id(raw, "cursor")
    except ValueError:
        raise Refusal(Reason.BAD_REQUEST) from None


async def attest(request: web.Request, scope: Scope, live: int) -> Decision:
    """Decide ``control.inspect`` on the attested room state; the decision is logged and audited."""
    gov = request.app[GOVERNANCE]
    seen = await seen_context(request)
    facts, ctx = seen.facts, seen.claims
    # The principal is the one the bridge attests; the policy compares it with the scope's.
    principal = principal_of(ctx.sub, ctx.origin) if ctx else principal_of(scope.principal_mxid, scope.origin)
    asked = Facts(
        agent_ref=scope.agent,
        principal=principal,
        agent=agent_of(scope.agent, gov.app_name(scope.agent), gov.is_memory_agent(scope.agent)),
        scope=scope_of(scope),
        request=RequestFacts(
            context=facts,
            context_scope=ContextScope(kind=ctx.scope.kind.value, room_id=ctx.scope.room_id) if ctx else None,
            context_agent=ctx.agent if ctx else None,
        ),
        room=room_of(ctx.room) if ctx else None,
        audience=audience_of(ctx.audience) if ctx else None,
        entries=Entries(count=live, cap=gov.limits.max_entries),
    )
    return await decide_and_record(
        request, Operation.CONTROL_INSPECT, asked, scope_id=scope.scope_id, credentialed=True
    )


async def inspect(request: web.Request) -> web.StreamResponse:
    """GET /v1/scopes/{scope_id}/entries?cursor&limit: one bounded page of the subject's memory."""
    operation(request, "scope.inspect")
    gov = request.app[GOVERNANCE]
    _, scope = await subject_scope(request)
    limit, cursor = _limit(request.query.get("limit")), _entry_id(request.query.get("cursor"))
    now = gov.now()
    decision = await attest(request, scope, await entry_reads(gov).ledger.live_count(scope.scope_id, now))
    if not decision.allowed:
        # SECURITY: drift in the room, audience, context or consent suppresses the whole page.
        raise Denied(decision)
    page = await entry_reads(gov).ledger.live_entries(scope.scope_id, now, cursor, limit)
    live_ns = scope.namespace
    current = [e for e in page if live_ns is not None and e.ns_id == live_ns.ns_id]
    texts: dict[str, str] = {}
    if current and live_ns is not None:
        try:
            texts = contents(listed(await gov.kagent.list(gov.query_name(scope.agent), live_ns.storage_key)))
        except AdapterError as exc:
            raise Refusal(exc.reason, status=HTTPStatus.BAD_GATEWAY, scope_id=scope.scope_id) from None
    after = await entry_reads(gov).scopes.get_scope(scope.scope_id)
    if (
        after is None
        or not after.enabled
        or after.generation != scope.generation
        or after.namespace is None
        or live_ns is None
        or after.namespace.ns_id != live_ns.ns_id
    ):
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


async def forgettable(gov: Governance, scope: Scope, entry_id: str) -> list[str]:
    """The entry and every copy a rotation made of it that the ledger still holds, current copy last;
    not_found unless that copy is live."""
    # An id shown before a rotation re-saved the entry still names it: follow it to the current copy,
    # and erase every copy (the evidence then covers them all). A copy whose row was compacted was
    # erased and verified long ago, with its own evidence; it is no part of this erasure.
    chain = await entry_reads(gov).rotations.lineage(scope.scope_id, entry_id)
    held = {e.entry_id: e for e in await entry_reads(gov).history.entries_by_id(scope.scope_id, chain)}
    entry = held.get(chain[-1])
    if entry is None or entry.tombstoned_at is not None or entry.physically_deleted_at is not None:
        raise Refusal(Reason.NOT_FOUND, scope_id=scope.scope_id)
    return [e for e in chain if e in held]


async def forget_one(request: web.Request) -> web.Response:
    """DELETE /v1/scopes/{scope_id}/entries/{entry_id}: erase exactly one ledger entry, with evidence."""
    operation(request, "scope.forget_one")
    gov = request.app[GOVERNANCE]
    caller, scope = await subject_scope(request)
    chain = await forgettable(gov, scope, request.match_info["entry_id"])
    await spend(request, caller)
    erasure = await request.app[ERASURE].erase(scope, Kind.FORGET_ONE, "subject", chain)
    return ok(await erasure_answer(gov, erasure))
