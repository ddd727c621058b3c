"""What the erasure machine, rotation, read-back and the sweepers need of the state store.

Like the handlers' ports: each consumer reaches the store through its protocol
(``tests/test_ports.py``), and mypy checks the store against each one, so the surface each part
depends on is written down and cannot grow unnoticed. A port names the store's facets it reaches,
each through a protocol of the calls it makes; the shared fence and ledger marks are written once
and each consumer's facet protocol extends them with its own calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from sidecar.governance import Governance
from sidecar.state.history import Compaction
from sidecar.state.rotations import Move, SwitchOutcome
from sidecar.state.types import Audited, Erasure, LedgerEntry, Namespace, Receipt, Scope

# --- the fence: a scope, its namespaces by id, and the saves still in flight in it ---------------


class _FenceScopes(Protocol):
    async def get_scope(self, scope_id: str) -> Scope | None: ...

    async def inflight_count(
        self,
        scope_id: str,
        now: datetime,
        *,
        ns_id: str | None = None,
        except_ns: str | None = None,
        running: bool = False,
    ) -> int: ...


class _FenceNamespaces(Protocol):
    async def namespaces_by_id(self, scope_id: str, ns_ids: list[str]) -> list[Namespace]: ...


class ScopeFence(Protocol):
    """A scope, its namespaces by id, and the saves still in flight in it (who must wait for whom)."""

    @property
    def scopes(self) -> _FenceScopes: ...

    @property
    def namespaces(self) -> _FenceNamespaces: ...


# --- read-back marks: what is still unswept, and what kagent no longer holds ----------------------


class _MarkNamespaces(Protocol):
    async def mark_cleared(self, ns_ids: list[str], now: datetime) -> None: ...


class _MarkLedger(Protocol):
    async def mark_physically_deleted(self, entry_ids: list[str], now: datetime) -> None: ...

    async def mark_verified(self, entry_ids: list[str], now: datetime) -> None: ...

    async def tombstone(self, scope_id: str, entry_ids: list[str], now: datetime) -> int: ...


class _MarkErasures(Protocol):
    async def record_readback(self, erasure_id: str, ns_id: str, remaining: int, what: str, now: datetime) -> None: ...


class _MarkHistory(Protocol):
    async def unswept_entries(self, scope_id: str, ns_ids: list[str] | None = None) -> list[LedgerEntry]: ...


class LedgerMarks(Protocol):
    """Read-back marks on the ledger and namespaces: what is still unswept, and what kagent no longer holds."""

    @property
    def namespaces(self) -> _MarkNamespaces: ...

    @property
    def ledger(self) -> _MarkLedger: ...

    @property
    def erasures(self) -> _MarkErasures: ...

    @property
    def history(self) -> _MarkHistory: ...


class _FencedNamespaces(_FenceNamespaces, _MarkNamespaces, Protocol):
    """Namespaces as a port with both the fence and the marks sees them."""


# --- the erasure state machine -------------------------------------------------------------------


class _MachineScopes(_FenceScopes, Protocol):
    async def advance_generation(self, scope_id: str, now: datetime) -> Scope: ...

    async def disable(self, scope_id: str, now: datetime) -> Scope: ...

    async def withdraw(self, scope_id: str, now: datetime) -> tuple[Scope, Receipt]: ...


class _MachineNamespaces(_FencedNamespaces, Protocol):
    async def namespaces_of_scope(self, scope_id: str) -> list[Namespace]: ...


class _MachineLedger(_MarkLedger, Protocol):
    async def filter_live(self, scope_id: str, ns_id: str, entry_ids: list[str], now: datetime) -> set[str]: ...


class _MachineErasures(_MarkErasures, Protocol):
    async def advance_erasure(
        self, erasure_id: str, state: str, now: datetime, failure_reason: str | None = None
    ) -> Erasure: ...

    async def claim_erasure(self, erasure_id: str, runner: str, until: datetime, now: datetime) -> bool: ...

    async def create_erasure(
        self, scope_id: str, kind: str, entry_ids: list[str], adapter: str, requested_by_kind: str, now: datetime
    ) -> Erasure: ...

    async def defer_erasure(self, erasure_id: str, until: datetime | None) -> None: ...

    async def erasures_of_scope(
        self, scope_id: str, limit: int = 100, *, kind: str | None = None, not_kind: str | None = None
    ) -> list[Erasure]: ...

    async def get_erasure(self, erasure_id: str) -> Erasure | None: ...

    async def release_erasure(self, erasure_id: str, runner: str) -> None: ...

    async def renew_erasure(self, erasure_id: str, runner: str, until: datetime) -> bool: ...

    async def unfinished_erasures(self) -> list[Erasure]: ...


class _MachineHistory(_MarkHistory, Protocol):
    async def entries_by_id(self, scope_id: str, entry_ids: list[str]) -> list[LedgerEntry]: ...


class _MachineRotations(Protocol):
    async def release_rotation(self, erasure_id: str, now: datetime) -> None: ...

    async def tombstone_forgotten(
        self, scope_id: str, erasure_id: str, entry_ids: list[str], now: datetime
    ) -> list[str]: ...


class ErasureRecords(ScopeFence, LedgerMarks, Audited, Protocol):
    """The erasure state machine: an erasure's rows, its scope's fence and its ledger marks."""

    @property
    def scopes(self) -> _MachineScopes: ...

    @property
    def namespaces(self) -> _MachineNamespaces: ...

    @property
    def ledger(self) -> _MachineLedger: ...

    @property
    def erasures(self) -> _MachineErasures: ...

    @property
    def history(self) -> _MachineHistory: ...

    @property
    def rotations(self) -> _MachineRotations: ...


class ReadbackRecords(LedgerMarks, Audited, Protocol):
    """Read-back after a physical delete: the marks, and an audit row when it fails."""


# --- namespace rotation --------------------------------------------------------------------------


class _RotationScopes(_FenceScopes, Protocol):
    async def end_write(self, op_id: str) -> None: ...

    async def write_outcome_unknown(self, op_id: str, until: datetime) -> None: ...


class _RotationNamespaces(_FencedNamespaces, Protocol):
    async def open_namespaces(self, scope_id: str) -> list[Namespace]: ...


class _RotationSteps(Protocol):
    async def begin_copy(self, erasure_id: str, ns_id: str, lease_s: float, now: datetime) -> tuple[str, Namespace]: ...

    async def freeze_namespace(self, scope_id: str, erasure_id: str) -> Namespace | None: ...

    async def record_moves(self, erasure_id: str, ns_id: str, moves: Iterable[Move]) -> None: ...

    async def release_rotation(self, erasure_id: str, now: datetime) -> None: ...

    async def rotation_namespaces(self, erasure_id: str) -> list[Namespace]: ...

    async def stage_namespace(self, scope_id: str, erasure_id: str, now: datetime) -> Namespace: ...

    async def switch_rotation(self, erasure_id: str, ns_id: str, now: datetime) -> SwitchOutcome: ...

    async def touch_erasure(self, erasure_id: str, now: datetime) -> None: ...


class RotationRecords(ScopeFence, LedgerMarks, Protocol):
    """Namespace rotation: staging, the copy's write fence, the moves and the switch."""

    @property
    def scopes(self) -> _RotationScopes: ...

    @property
    def namespaces(self) -> _RotationNamespaces: ...

    @property
    def rotations(self) -> _RotationSteps: ...


# --- the sweepers --------------------------------------------------------------------------------


class _SweepNamespaces(_FencedNamespaces, Protocol):
    async def sweepable_namespaces(self, now: datetime, limit: int) -> list[Namespace]: ...


class _SweepLedger(_MarkLedger, Protocol):
    async def expired_unswept(self, now: datetime, limit: int) -> list[LedgerEntry]: ...


class _SweepHistory(_MarkHistory, Protocol):
    async def compact_history(self, now: datetime, older_than: datetime, limit: int = 500) -> Compaction: ...


class _SweepAudit(Protocol):
    async def purge_audit(self, older_than: datetime) -> int: ...


class _SweepRotations(Protocol):
    async def purge_erasures(self, older_than: datetime) -> int: ...

    async def rotation_candidates(self, now: datetime, expired_before: datetime, limit: int) -> list[str]: ...


class SweepRecords(ScopeFence, LedgerMarks, Protocol):
    """The sweepers: what expired or was left behind, and the purges of what evidence no longer needs."""

    @property
    def namespaces(self) -> _SweepNamespaces: ...

    @property
    def ledger(self) -> _SweepLedger: ...

    @property
    def history(self) -> _SweepHistory: ...

    @property
    def audit_log(self) -> _SweepAudit: ...

    @property
    def rotations(self) -> _SweepRotations: ...

    async def purge_expired(self, now: datetime) -> dict[str, int]: ...


def erasure_records(gov: Governance) -> ErasureRecords:
    return gov.store


def readback_records(gov: Governance) -> ReadbackRecords:
    return gov.store


def rotation_records(gov: Governance) -> RotationRecords:
    return gov.store


def sweep_records(gov: Governance) -> SweepRecords:
    return gov.store
