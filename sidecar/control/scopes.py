"""Scope records and consent: create, grant, withdraw, status (SPEC R-1, R-2, R-4, R-6)."""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING

from aiohttp import web

from sidecar.clock import Clock
from sidecar.control.auth import Authenticator, ensure_subject
from sidecar.control.erasures import ErasureEvidence, location
from sidecar.control.http import ok, operation, parse
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
from sidecar.erasure.evidence import iso
from sidecar.erasure.machine import ErasureEngine
from sidecar.identity import IdentityError
from sidecar.identity.appname import Agents, parse_agent_ref
from sidecar.identity.mxid import Origin, check_principal, parse_room_id
from sidecar.logs import get_logger
from sidecar.policy.model import Limits
from sidecar.reasons import Reason, Refusal
from sidecar.state.types import ErasureKind, Receipt, Scope

if TYPE_CHECKING:
    from sidecar.state.audit import AuditOps, ErasureOps
    from sidecar.state.history import HistoryOps
    from sidecar.state.scopes import ScopeOps

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


class Scopes:
    """The scope and consent routes of the control API."""

    def __init__(
        self,
        auth: Authenticator,
        evidence: ErasureEvidence,
        engine: ErasureEngine,
        scopes: ScopeOps,
        history: HistoryOps,
        erasures: ErasureOps,
        audit: AuditOps,
        agents: Agents,
        limits: Callable[[], Limits],
        clock: Clock,
        *,
        revision: Callable[[], str | None],
        server_name: str,
    ) -> None:
        self._auth, self._evidence, self._engine = auth, evidence, engine
        self._scopes, self._history, self._erasures, self._audit = scopes, history, erasures, audit
        self._agents, self._limits, self._clock = agents, limits, clock
        self._revision, self._server = revision, server_name

    async def create(self, request: web.Request) -> web.Response:
        """POST /v1/scopes: validate the typed triple; the same triple again answers the existing scope."""
        operation(request, "scope.create")
        caller = self._auth.authenticate(request)
        body = await parse(request, CreateScope)
        try:
            principal = check_principal(body.principal.mxid, body.principal.origin.value, self._server)
        except IdentityError:
            raise Refusal(Reason.PRINCIPAL_INVALID) from None
        mxid = str(principal.mxid)
        ensure_subject(caller, mxid)
        try:
            parse_agent_ref(body.agent)
            parse_room_id(body.scope.room_id)
        except IdentityError:
            raise Refusal(Reason.BAD_REQUEST) from None
        if not self._agents.has_memory(body.agent):
            raise Refusal(Reason.AGENT_MISMATCH)
        if body.scope.kind != "control_room":
            raise Refusal(Reason.SCOPE_MISMATCH)  # cross_room needs a canonical-person binding (ADR 5)
        scope, created = await self._scopes.create_scope(
            mxid, principal.origin.value, body.agent, body.scope.kind, body.scope.room_id, self._clock()
        )
        if created:
            await self._audit.audit(
                "scope", Reason.ALLOWED.value, scope_id=scope.scope_id, operation="scope.create", now=self._clock()
            )
        return ok(
            ScopeCreated(scope_id=scope.scope_id, enabled=scope.enabled, generation=scope.generation),
            status=HTTPStatus.CREATED if created else HTTPStatus.OK,
        )

    async def grant(self, request: web.Request) -> web.Response:
        """PUT /v1/scopes/{scope_id}/consent: enable, generation+1, receipt."""
        operation(request, "consent.grant")
        _, scope = await self._auth.subject_scope(request, changes_state=True)
        body = await parse(request, GrantConsent)
        if not self._agents.has_memory(scope.agent):
            raise Refusal(Reason.AGENT_MISMATCH, scope_id=scope.scope_id)
        # SECURITY: consent never resumes over an unfinished or failed erasure (ADR 12).
        blocked = await self._engine.blocked(scope.scope_id)
        if blocked is not None:
            raise Refusal(blocked, status=HTTPStatus.CONFLICT, scope_id=scope.scope_id)
        scope, receipt = await self._scopes.grant(scope.scope_id, body.purpose, body.policy_version, self._clock())
        await self._audit.audit(
            "consent",
            Reason.ALLOWED.value,
            scope_id=scope.scope_id,
            operation="consent.grant",
            policy_revision=self._revision(),
            now=self._clock(),
        )
        log.info("consent.granted", scope_id=scope.scope_id, receipt_id=receipt.receipt_id, generation=scope.generation)
        return ok(
            ConsentChange(
                scope_id=scope.scope_id, enabled=scope.enabled, generation=scope.generation, receipt=_receipt(receipt)
            )
        )

    async def withdraw(self, request: web.Request) -> web.Response:
        """DELETE /v1/scopes/{scope_id}/consent: disable + generation+1 (receipt), then erase everything."""
        operation(request, "consent.withdraw")
        _, scope = await self._auth.subject_scope(request, changes_state=True)
        erasure = await self._engine.erase(scope, ErasureKind.WITHDRAW, "subject")
        record = await self._evidence.answer(erasure)
        after = await self._auth.scope(scope.scope_id)
        receipts = [r for r in await self._scopes.receipts(scope.scope_id) if r.at >= erasure.created_at]
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

    async def entry_counts(self, scope: Scope) -> EntryCounts:
        """The status's entry counts: what the scope's live namespace serves, and what awaits physical deletion."""
        live_ns = scope.namespace.ns_id if scope.namespace is not None else None
        live, pending = await self._history.entry_counts(scope.scope_id, live_ns, self._clock())
        return EntryCounts(live=live, cap=self._limits().max_entries, pending_physical_deletion=pending)

    async def last_erasure(self, scope: Scope) -> LastErasure | None:
        """The scope's newest erasure, as status shows it."""
        history = await self._erasures.erasures_of_scope(scope.scope_id, limit=1)
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

    async def status(self, request: web.Request) -> web.Response:
        """GET /v1/scopes/{scope_id}: consent, counts, limits and the last erasure; never memory content."""
        operation(request, "scope.status")
        _, scope = await self._auth.subject_scope(request)
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
                hard_expiry_days=self._limits().max_days,
                entries=await self.entry_counts(scope),
                erasure_adapter=self._engine.adapter,
                last_erasure=await self.last_erasure(scope),
            )
        )
