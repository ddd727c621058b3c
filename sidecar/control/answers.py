"""The control API's JSON answers as the client reads them: TypedDicts of :mod:`sidecar.control.models`.

A client keeps the answer it received (``--json`` prints it, an erasure record is exported as is),
so it is a plain dict, typed once :func:`conforms` has checked it against one of these shapes.
Each mirrors the response model of the same name (a test keeps their fields equal); a key the
model leaves out may be present, as a newer server may add one.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Literal, TypeGuard, TypeVar

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

State = Literal["requested", "fenced", "quiesced", "deleted", "verified", "failed"]


class ScopeCreated(TypedDict):
    scope_id: str
    enabled: bool
    generation: int


class PrincipalIn(TypedDict):
    mxid: str
    origin: str


class ScopeIn(TypedDict):
    kind: Literal["control_room", "cross_room"]
    room_id: str


class ReceiptOut(TypedDict):
    receipt_id: str
    action: Literal["grant", "withdraw"]
    purpose: str
    policy_version: str
    generation_after: int
    at: str


class LastErasure(TypedDict):
    erasure_id: str
    kind: str
    state: str
    failure_reason: str | None
    updated_at: str


class EntryCounts(TypedDict):
    live: int
    cap: int
    pending_physical_deletion: int


class ScopeStatus(TypedDict):
    scope_id: str
    principal: PrincipalIn
    agent: str
    scope: ScopeIn
    enabled: bool
    generation: int
    purpose: str | None
    policy_version: str | None
    consented_at: str | None
    hard_expiry_days: int
    entries: EntryCounts
    erasure_adapter: Literal["rest", "kagent-db"]
    last_erasure: LastErasure | None


class SourceScope(TypedDict):
    kind: str
    room_id: str


class EntryOut(TypedDict):
    id: str
    text: str
    source_scope: SourceScope
    created_at: str
    expires_at: str


class InspectPage(TypedDict):
    scope_id: str
    entries: list[EntryOut]
    next_cursor: str | None


class ConfirmationIssued(TypedDict):
    action: Literal["forget_all", "off"]
    confirm_token: str
    expires_at: str


class StepOut(TypedDict):
    state: str
    at: str


class EvidenceEntry(TypedDict):
    entry_id: str
    generation: int | None
    tombstoned_at: str | None
    physically_deleted_at: str | None
    verified_at: str | None


class Verification(TypedDict):
    result: Literal["passed", "failed", "pending"]
    readable_through_memgov: bool | None
    physically_absent: bool | None
    rechecked_after_possible_write: bool


class ReadBackOut(TypedDict):
    namespace_id: str
    generation: int | None
    legacy: bool | None
    check: Literal["namespace", "entries", "moved"]
    at: str
    rows_found: int


class MoveOut(TypedDict):
    from_entry_id: str
    to_entry_id: str


class RotationOut(TypedDict):
    from_namespace: str | None
    to_namespace: str | None
    moved: list[MoveOut]
    not_found_in_kagent: list[str]


class RotationRef(TypedDict):
    erasure_id: str
    state: State
    failure_reason: str | None


class ErasureRecord(TypedDict):
    format: Literal["memgov.erasure.v1"]
    erasure_id: str
    scope_id: str
    kind: Literal["forget_one", "forget_all", "off", "withdraw", "offboard", "rotate"]
    state: State
    adapter: Literal["rest", "kagent-db"]
    requested_by: Literal["subject", "operator", "sweeper"]
    created_at: str
    updated_at: str
    failure_reason: str | None
    not_before: str | None
    steps: list[StepOut]
    entries: list[EvidenceEntry]
    read_back: list[ReadBackOut]
    verification: Verification
    physical_deletion: Literal["complete", "pending_namespace_clear", "in_progress", "incomplete", "unverified"]
    residuals: list[str]
    rotation: RotationOut | None
    rotated_by: RotationRef | None


class _ConsentChanged(TypedDict):
    scope_id: str
    enabled: bool
    generation: int
    receipt: ReceiptOut | None


class ConsentChange(_ConsentChanged, total=False):
    # Not NotRequired[...]: Python 3.11 cannot see it in a postponed annotation.
    erasure: ErasureRecord | None


class OffboardScope(TypedDict):
    scope_id: str
    agent: str
    erasure_id: str
    state: str
    failure_reason: str | None
    physical_deletion: str


class OffboardResult(TypedDict):
    complete: bool
    scopes: list[OffboardScope]


T = TypeVar("T", bound=Mapping[str, object])


def conforms(value: object, shape: type[T]) -> TypeGuard[T]:
    """Whether a decoded JSON value has ``shape``: every key it requires, each value of its type
    (pydantic's strict validation of the TypedDict; keys the shape does not name are allowed)."""
    try:
        _adapter(shape).validate_python(value, strict=True)
    except ValidationError:
        return False
    return True


@cache
def _adapter(shape: type) -> TypeAdapter[object]:
    return TypeAdapter(shape)
