"""Request and response bodies of the control API: the OpenAPI document is generated from them, and the
control client (``client.py``) reads answers with the same models.

A response model ignores keys it does not name, so a client keeps working against a newer
server that adds one; the server builds its answers from these models only, so it sends no key
they do not declare.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from sidecar.identity.mxid import Origin
from sidecar.settings import AdapterName
from sidecar.state.types import ErasureKind, ErasureState

Purpose = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]
PolicyVersion = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")
]
Timestamp = Annotated[str, Field(description="RFC 3339 UTC timestamp.")]
#: Whether kagent still stores what an erasure erased (``complete`` only after a read-back found nothing).
PhysicalDeletion = Literal["complete", "pending_namespace_clear", "in_progress", "incomplete", "unverified"]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Out(BaseModel):
    # The server sends no key a model does not declare (the document says so); a client reading an
    # answer ignores keys a newer server may add.
    model_config = ConfigDict(extra="ignore", frozen=True, json_schema_extra={"additionalProperties": False})


class PrincipalIn(_In):
    """The subject: a complete MXID and its origin kind (SPEC R-2)."""

    mxid: str = Field(..., max_length=255, description="Complete MXID, e.g. @alice:example.org.")
    origin: Origin = Field(..., description="Origin kind of the identity.")


class ScopeIn(_In):
    """Where memory is collected and read: one control room."""

    kind: Literal["control_room", "cross_room"] = Field(..., description="Scope kind; cross_room is reserved.")
    room_id: str = Field(..., max_length=255, description="Matrix room id of the control room.")


class CreateScope(_In):
    """POST /v1/scopes: the typed (principal, agent, scope) triple."""

    principal: PrincipalIn
    agent: str = Field(..., max_length=320, description="Agent reference namespace/name.")
    scope: ScopeIn


class GrantConsent(_In):
    """PUT /v1/scopes/{scope_id}/consent."""

    purpose: Purpose = Field(..., description="What the memory is for, as shown to the subject.")
    policy_version: PolicyVersion = Field(..., description="Version of the policy text the subject agreed to.")


class Confirm(_In):
    """Second call of forget-all or off."""

    confirm: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="The confirm_token of the first call; absent (or an empty object) asks for one.",
    )


class ScopeCreated(_Out):
    """A scope record as created (or found)."""

    scope_id: str
    enabled: bool
    generation: int


class ReceiptOut(_Out):
    """A content-free consent receipt."""

    receipt_id: str
    action: Literal["grant", "withdraw"]
    purpose: str
    policy_version: str
    generation_after: int
    at: Timestamp


class LastErasure(_Out):
    """The newest erasure of a scope."""

    erasure_id: str
    kind: ErasureKind
    state: ErasureState
    failure_reason: str | None
    updated_at: Timestamp


class EntryCounts(_Out):
    """Ledger counts of a scope (no ids, no content)."""

    live: int = Field(..., description="Entries readable now.")
    cap: int = Field(..., description="Most entries the scope may hold.")
    pending_physical_deletion: int = Field(
        ..., description="Erased or expired entries kagent still stores (REST adapter: until the namespace is cleared)."
    )


class ScopeStatus(_Out):
    """GET /v1/scopes/{scope_id}: everything about a scope except its memory."""

    scope_id: str
    principal: PrincipalIn
    agent: str
    scope: ScopeIn
    enabled: bool
    generation: int
    purpose: str | None
    policy_version: str | None
    consented_at: Timestamp | None
    hard_expiry_days: int
    entries: EntryCounts
    erasure_adapter: AdapterName
    last_erasure: LastErasure | None


class SourceScope(_Out):
    """Where an entry was collected."""

    kind: str
    room_id: str


class EntryOut(_Out):
    """One inspected memory entry."""

    id: str = Field(..., description="Opaque entry id (use it to forget this entry).")
    text: str = Field(..., description="The stored memory text.")
    source_scope: SourceScope
    created_at: Timestamp
    expires_at: Timestamp = Field(..., description="Hard expiry; never extended.")


class InspectPage(_Out):
    """GET /v1/scopes/{scope_id}/entries: one bounded page."""

    scope_id: str
    entries: list[EntryOut]
    next_cursor: str | None = Field(..., description="Pass as cursor for the next page; null on the last page.")


class ConfirmationIssued(_Out):
    """First call of forget-all or off."""

    action: Literal["forget_all", "off"]
    confirm_token: str = Field(..., description="Single use, bound to this subject, scope and action.")
    expires_at: Timestamp


class StepOut(_Out):
    """One state an erasure passed, with its time."""

    state: ErasureState
    at: Timestamp


class EvidenceEntry(_Out):
    """Ledger stamps of one erased entry."""

    entry_id: str
    generation: int | None
    tombstoned_at: Timestamp | None
    physically_deleted_at: Timestamp | None
    verified_at: Timestamp | None


class Verification(_Out):
    """Read-after-delete result; every claim comes from a read-back."""

    result: Literal["passed", "failed", "pending"]
    readable_through_memgov: bool | None
    physically_absent: bool | None = Field(
        ..., description="True only when a read-back of every namespace (or forgotten id) found nothing."
    )
    rechecked_after_possible_write: bool = Field(
        ..., description="Verification waited for a write of unknown outcome and cleared and read back again."
    )


class ReadBackOut(_Out):
    """One read-back of one storage namespace during the erasure (what was found, not what was asked)."""

    namespace_id: str
    generation: int | None
    legacy: bool | None = Field(..., description="An unsalted namespace written before storage salts existed.")
    check: Literal["namespace", "entries", "moved"] = Field(
        ...,
        description="namespace: read back whole; entries: the erased ids; moved: a rotation's copies (found,"
        " as meant).",
    )
    at: Timestamp
    rows_found: int


class MoveOut(_Out):
    """One entry a rotation re-saved: its old and its new kagent id (same hard expiry)."""

    from_entry_id: str
    to_entry_id: str


class RotationOut(_Out):
    """A rotation (kind ``rotate``): where the kept entries went; the old namespace was then deleted whole."""

    from_namespace: str | None
    to_namespace: str | None = Field(..., description="Set once the scope was switched to it.")
    moved: list[MoveOut]
    not_found_in_kagent: list[str] = Field(..., description="Ledger entries kagent no longer held (nothing to copy).")


class RotationRef(_Out):
    """For forget-one: the rotation that removed the entry physically, or the latest that tried."""

    erasure_id: str
    state: ErasureState
    failure_reason: str | None


class ErasureRecord(_Out):
    """Content-free erasure evidence (GET /v1/erasures/{erasure_id}); exportable as is."""

    format: Literal["memgov.erasure.v1"]
    erasure_id: str
    scope_id: str
    kind: ErasureKind
    state: ErasureState
    adapter: AdapterName
    requested_by: Literal["subject", "operator", "sweeper"]
    created_at: Timestamp
    updated_at: Timestamp
    failure_reason: str | None
    not_before: Timestamp | None = Field(
        ..., description="Verification waits until then: a write of unknown outcome may still land (SPEC D4)."
    )
    steps: list[StepOut]
    entries: list[EvidenceEntry]
    read_back: list[ReadBackOut]
    verification: Verification
    physical_deletion: PhysicalDeletion
    residuals: list[str] = Field(..., description="What this erasure cannot reach (codes, see docs/control-api.md).")
    rotation: RotationOut | None = Field(..., description="Kind rotate: the namespaces and the re-saved ids.")
    rotated_by: RotationRef | None = Field(
        ..., description="Forget-one under rest with an embedding provider: the rotation that clears its entry."
    )


class ErasureListed(_Out):
    """One erasure in a listing: ids, kind, state, reason code and times; never its entries or evidence."""

    erasure_id: str
    scope_id: str
    kind: ErasureKind
    state: ErasureState
    adapter: AdapterName
    requested_by: Literal["subject", "operator", "sweeper"]
    failure_reason: str | None
    created_at: Timestamp
    updated_at: Timestamp
    retry_of: str | None = Field(..., description="A retry: the failed erasure its chain of retries began with.")
    superseded_by: str | None = Field(
        ...,
        description="A failed erasure: the later verified erasure that covers it (a retry of it, or a whole-scope"
        " erasure); null while nothing does. Only failures with null here are counted as failed by"
        " memgov_erasures and block re-consent.",
    )


class ErasureList(_Out):
    """GET /v1/erasures: one page, newest first."""

    erasures: list[ErasureListed]
    next_cursor: str | None = Field(..., description="Pass as cursor for the next page; null on the last page.")


class ConsentChange(_Out):
    """PUT or DELETE /v1/scopes/{scope_id}/consent."""

    scope_id: str
    enabled: bool
    generation: int
    receipt: ReceiptOut | None
    erasure: ErasureRecord | None = Field(None, description="Withdrawal only: the erasure that followed it.")


class OffboardScope(_Out):
    """Offboarding result of one scope."""

    scope_id: str
    agent: str
    erasure_id: str
    state: ErasureState
    failure_reason: str | None
    physical_deletion: PhysicalDeletion


class OffboardResult(_Out):
    """POST /v1/principals/{mxid}/offboard."""

    complete: bool = Field(..., description="Every scope disabled, erased and verified.")
    scopes: list[OffboardScope]


class ErrorOut(_Out):
    """Every error: a reason code and the decision id (never request or stored text)."""

    error: str
    decision_id: str
