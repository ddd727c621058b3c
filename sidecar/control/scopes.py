"""Scope records and consent: create, grant, withdraw, status (SPEC R-1, R-2, R-4, R-6)."""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from sidecar.control.auth import authenticate, ensure_subject, subject_scope
from sidecar.control.erasures import erasure_answer, location
from sidecar.control.http import ERASURE, load_scope, ok, operation, parse
from sidecar.control.models import (
    ConsentChange,
    CreateScope,
    EntryCounts,
    GrantConsent,
    LastErasure,
    PrincipalIn,
    ReceiptOut,
    ScopeCreated,
    ScopeIn,
    ScopeStatus,
)
from sidecar.control.ports import scope_writes
from sidecar.erasure.evidence import iso
from sidecar.erasure.machine import Kind
from sidecar.governance import GOVERNANCE, Governance
from sidecar.identity import IdentityError
from sidecar.identity.appname import parse_agent_ref
from sidecar.identity.mxid import Origin, check_principal, parse_room_id
from sidecar.logs import get_logger
from sidecar.reasons import Reason, Refusal
from sidecar.state.types import Receipt, Scope

log = get_logger("control")


def _receipt(r: Receipt | None) -> ReceiptOut | None:
    if r is None:
        return None
    return ReceiptOut(
        receipt_id=r.receipt_id,
        action=r.action,
        purpose=r.purpose,
        policy_version=r.policy_version,
        generation_after=r.generation_after,
        at=iso(r.at) or "",
    )


async def create_scope(request: web.Request) -> web.Response:
    """POST /v1/scopes: validate the typed triple; the same triple again answers the existing scope."""
    operation(request, "scope.create")
    gov = request.app[GOVERNANCE]
    caller = authenticate(request)
    body = await parse(request, CreateScope)
    try:
        principal = check_principal(
            body.principal.mxid, body.principal.origin.value, gov.settings.matrix.server_name or ""
        )
    except IdentityError:
        raise Refusal(Reason.PRINCIPAL_INVALID) from None
    mxid = str(principal.mxid)
    ensure_subject(caller, mxid)
    try:
        parse_agent_ref(body.agent)
        parse_room_id(body.scope.room_id)
    except IdentityError:
        raise Refusal(Reason.BAD_REQUEST) from None
    if not gov.is_memory_agent(body.agent):
        raise Refusal(Reason.AGENT_MISMATCH)
    if body.scope.kind != "control_room":
        raise Refusal(Reason.SCOPE_MISMATCH)  # cross_room needs a canonical-person binding (ADR 5)
    scope, created = await scope_writes(gov).scopes.create_scope(
        mxid, principal.origin.value, body.agent, body.scope.kind, body.scope.room_id, gov.now()
    )
    if created:
        await scope_writes(gov).audit_log.audit(
            "scope", Reason.ALLOWED.value, scope_id=scope.scope_id, operation="scope.create", now=gov.now()
        )
    return ok(
        ScopeCreated(scope_id=scope.scope_id, enabled=scope.enabled, generation=scope.generation),
        status=HTTPStatus.CREATED if created else HTTPStatus.OK,
    )


async def grant_consent(request: web.Request) -> web.Response:
    """PUT /v1/scopes/{scope_id}/consent: enable, generation+1, receipt."""
    operation(request, "consent.grant")
    gov = request.app[GOVERNANCE]
    _, scope = await subject_scope(request, changes_state=True)
    body = await parse(request, GrantConsent)
    if not gov.is_memory_agent(scope.agent):
        raise Refusal(Reason.AGENT_MISMATCH, scope_id=scope.scope_id)
    # SECURITY: consent never resumes over an unfinished or failed erasure (ADR 12).
    blocked = await request.app[ERASURE].blocked(scope.scope_id)
    if blocked is not None:
        raise Refusal(blocked, status=HTTPStatus.CONFLICT, scope_id=scope.scope_id)
    scope, receipt = await scope_writes(gov).scopes.grant(scope.scope_id, body.purpose, body.policy_version, gov.now())
    await scope_writes(gov).audit_log.audit(
        "consent",
        Reason.ALLOWED.value,
        scope_id=scope.scope_id,
        operation="consent.grant",
        policy_revision=gov.policy.revision,
        now=gov.now(),
    )
    log.info("consent.granted", scope_id=scope.scope_id, receipt_id=receipt.receipt_id, generation=scope.generation)
    return ok(
        ConsentChange(
            scope_id=scope.scope_id, enabled=scope.enabled, generation=scope.generation, receipt=_receipt(receipt)
        )
    )


async def withdraw_consent(request: web.Request) -> web.Response:
    """DELETE /v1/scopes/{scope_id}/consent: disable + generation+1 (receipt), then erase everything."""
    operation(request, "consent.withdraw")
    gov = request.app[GOVERNANCE]
    _, scope = await subject_scope(request, changes_state=True)
    erasure = await request.app[ERASURE].erase(scope, Kind.WITHDRAW, "subject")
    record = await erasure_answer(gov, erasure)
    after = await load_scope(gov, scope.scope_id)
    receipts = [r for r in await scope_writes(gov).scopes.receipts(scope.scope_id) if r.at >= erasure.created_at]
    return ok(
        ConsentChange(
            scope_id=after.scope_id,
            enabled=after.enabled,
            generation=after.generation,
            receipt=_receipt(receipts[-1] if receipts else None),
            erasure=record,
        ),
        headers=location(erasure),
    )


async def entry_counts(gov: Governance, scope: Scope) -> EntryCounts:
    """The status's entry counts: what the scope's live namespace serves, and what awaits physical deletion."""
    live_ns = scope.namespace.ns_id if scope.namespace is not None else None
    live, pending = await scope_writes(gov).history.entry_counts(scope.scope_id, live_ns, gov.now())
    return EntryCounts(live=live, cap=gov.limits.max_entries, pending_physical_deletion=pending)


async def last_erasure(gov: Governance, scope: Scope) -> LastErasure | None:
    """The scope's newest erasure, as status shows it."""
    history = await scope_writes(gov).erasures.erasures_of_scope(scope.scope_id, limit=1)
    if not history:
        return None
    e = history[0]
    return LastErasure(
        erasure_id=e.erasure_id,
        kind=e.kind,
        state=e.state,
        failure_reason=e.failure_reason,
        updated_at=iso(e.updated_at) or "",
    )


async def scope_status(request: web.Request) -> web.Response:
    """GET /v1/scopes/{scope_id}: consent, counts, limits and the last erasure; never memory content."""
    operation(request, "scope.status")
    gov = request.app[GOVERNANCE]
    _, scope = await subject_scope(request)
    return ok(
        ScopeStatus(
            scope_id=scope.scope_id,
            principal=PrincipalIn(mxid=scope.principal_mxid, origin=Origin(scope.origin)),
            agent=scope.agent,
            scope=ScopeIn(kind=scope.kind, room_id=scope.room_id),  # type: ignore[arg-type]  # a stored kind; pydantic checks it
            enabled=scope.enabled,
            generation=scope.generation,
            purpose=scope.purpose,
            policy_version=scope.policy_version,
            consented_at=iso(scope.consented_at),
            hard_expiry_days=gov.limits.max_days,
            entries=await entry_counts(gov, scope),
            erasure_adapter=gov.eraser.name,  # type: ignore[arg-type]  # an adapter's name; pydantic checks it
            last_erasure=await last_erasure(gov, scope),
        )
    )
