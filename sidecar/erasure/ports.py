"""What the erasure machine, rotation, read-back and the sweepers need of the state store.

Like the handlers' ports: each consumer reaches the store through its protocol
(``tests/test_ports.py``), and mypy checks the store against each one, so the surface each part
depends on is written down and cannot grow unnoticed.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from sidecar.governance import Governance
from sidecar.state.history import Compaction
from sidecar.state.rotations import Move, SwitchOutcome
from sidecar.state.types import Erasure, LedgerEntry, Namespace, Receipt, Scope


class _ScopeFenceScopes(Protocol):
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


class _ScopeFenceNamespaces(Protocol):
    async def namespaces_by_id(self, scope_id: str, ns_ids: list[str]) -> list[Namespace]: ...


class ScopeFence(Protocol):
    """A scope, its namespaces by id, and the saves still in flight in it (who must wait for whom)."""

    @property
    def scopes(self) -> _ScopeFenceScopes: ...

    @property
    def namespaces(self) -> _ScopeFenceNamespaces: ...


class _LedgerMarksNamespaces(Protocol):
    async def mark_cleared(self, ns_ids: list[str], now: datetime) -> None: ...


class _LedgerMarksLedger(Protocol):
    async def mark_physically_deleted(self, entry_ids: list[str], now: datetime) -> None: ...

    async def mark_verified(self, entry_ids: list[str], now: datetime) -> None: ...

    async def tombstone(self, scope_id: str, entry_ids: list[str], now: datetime) -> int: ...


class _LedgerMarksErasures(Protocol):
    async def record_readback(self, erasure_id: str, ns_id: str, remaining: int, what: str, now: datetime) -> None: ...


class _LedgerMarksHistory(Protocol):
    async def unswept_entries(self, scope_id: str, ns_ids: list[str] | None = None) -> list[LedgerEntry]: ...


class LedgerMarks(Protocol):
    """Read-back marks on the ledger and namespaces: what is still unswept, and what kagent no longer holds."""

    @property
    def namespaces(self) -> _LedgerMarksNamespaces: ...

    @property
    def ledger(self) -> _LedgerMarksLedger: ...

    @property
    def erasures(self) -> _LedgerMarksErasures: ...

    @property
    def history(self) -> _LedgerMarksHistory: ...


class _ErasureRecordsErasures(Protocol):
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

    async def record_readback(self, erasure_id: str, ns_id: str, remaining: int, what: str, now: datetime) -> None: ...

    async def release_erasure(self, erasure_id: str, runner: str) -> None: ...

    async def renew_erasure(self, erasure_id: str, runner: str, until: datetime) -> bool: ...

    async def unfinished_erasures(self) -> list[Erasure]: ...


class _ErasureRecordsScopes(Protocol):
    async def advance_generation(self, scope_id: str, now: datetime) -> Scope: ...

    async def disable(self, scope_id: str, now: datetime) -> Scope: ...

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

    async def withdraw(self, scope_id: str, now: datetime) -> tuple[Scope, Receipt]: ...


class _ErasureRecordsAuditLog(Protocol):
    async def audit(
        self,
        kind: str,
        reason: str,
        *,
        decision_id: str | None = None,
        scope_id: str | None = None,
        entry_id: str | None = None,
        erasure_id: str | None = None,
        operation: str | None = None,
        policy_revision: str | None = None,
        now: datetime,
    ) -> None: ...


class _ErasureRecordsHistory(Protocol):
    async def entries_by_id(self, scope_id: str, entry_ids: list[str]) -> list[LedgerEntry]: ...

    async def unswept_entries(self, scope_id: str, ns_ids: list[str] | None = None) -> list[LedgerEntry]: ...


class _ErasureRecordsLedger(Protocol):
    async def filter_live(self, scope_id: str, ns_id: str, entry_ids: list[str], now: datetime) -> set[str]: ...

    async def mark_physically_deleted(self, entry_ids: list[str], now: datetime) -> None: ...

    async def mark_verified(self, entry_ids: list[str], now: datetime) -> None: ...

    async def tombstone(self, scope_id: str, entry_ids: list[str], now: datetime) -> int: ...


class _ErasureRecordsNamespaces(Protocol):
    async def mark_cleared(self, ns_ids: list[str], now: datetime) -> None: ...

    async def namespaces_by_id(self, scope_id: str, ns_ids: list[str]) -> list[Namespace]: ...

    async def namespaces_of_scope(self, scope_id: str) -> list[Namespace]: ...


class _ErasureRecordsRotations(Protocol):
    async def release_rotation(self, erasure_id: str, now: datetime) -> None: ...

    async def tombstone_forgotten(
        self, scope_id: str, erasure_id: str, entry_ids: list[str], now: datetime
    ) -> list[str]: ...


class ErasureRecords(Protocol):
    """The erasure state machine: an erasure's rows, its scope's fence and its ledger marks."""

    @property
    def erasures(self) -> _ErasureRecordsErasures: ...

    @property
    def scopes(self) -> _ErasureRecordsScopes: ...

    @property
    def audit_log(self) -> _ErasureRecordsAuditLog: ...

    @property
    def history(self) -> _ErasureRecordsHistory: ...

    @property
    def ledger(self) -> _ErasureRecordsLedger: ...

    @property
    def namespaces(self) -> _ErasureRecordsNamespaces: ...

    @property
    def rotations(self) -> _ErasureRecordsRotations: ...


class _ReadbackRecordsAuditLog(Protocol):
    async def audit(
        self,
        kind: str,
        reason: str,
        *,
        decision_id: str | None = None,
        scope_id: str | None = None,
        entry_id: str | None = None,
        erasure_id: str | None = None,
        operation: str | None = None,
        policy_revision: str | None = None,
        now: datetime,
    ) -> None: ...


class _ReadbackRecordsNamespaces(Protocol):
    async def mark_cleared(self, ns_ids: list[str], now: datetime) -> None: ...


class _ReadbackRecordsLedger(Protocol):
    async def mark_physically_deleted(self, entry_ids: list[str], now: datetime) -> None: ...

    async def mark_verified(self, entry_ids: list[str], now: datetime) -> None: ...

    async def tombstone(self, scope_id: str, entry_ids: list[str], now: datetime) -> int: ...


class _ReadbackRecordsErasures(Protocol):
    async def record_readback(self, erasure_id: str, ns_id: str, remaining: int, what: str, now: datetime) -> None: ...


class _ReadbackRecordsHistory(Protocol):
    async def unswept_entries(self, scope_id: str, ns_ids: list[str] | None = None) -> list[LedgerEntry]: ...


class ReadbackRecords(Protocol):
    """Read-back after a physical delete: the marks, and an audit row when it fails."""

    @property
    def audit_log(self) -> _ReadbackRecordsAuditLog: ...

    @property
    def namespaces(self) -> _ReadbackRecordsNamespaces: ...

    @property
    def ledger(self) -> _ReadbackRecordsLedger: ...

    @property
    def erasures(self) -> _ReadbackRecordsErasures: ...

    @property
    def history(self) -> _ReadbackRecordsHistory: ...


class _RotationRecordsRotations(Protocol):
    async def begin_copy(self, erasure_id: str, ns_id: str, lease_s: float, now: datetime) -> tuple[str, Namespace]: ...

    async def freeze_namespace(self, scope_id: str, erasure_id: str) -> Namespace | None: ...

    async def record_moves(self, erasure_id: str, ns_id: str, moves: Iterable[Move]) -> None: ...

    async def release_rotation(self, erasure_id: str, now: datetime) -> None: ...

    async def rotation_namespaces(self, erasure_id: str) -> list[Namespace]: ...

    async def stage_namespace(self, scope_id: str, erasure_id: str, now: datetime) -> Namespace: ...

    async def switch_rotation(self, erasure_id: str, ns_id: str, now: datetime) -> SwitchOutcome: ...

    async def touch_erasure(self, erasure_id: str, now: datetime) -> None: ...


class _RotationRecordsScopes(Protocol):
    async def end_write(self, op_id: str) -> None: ...

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

    async def write_outcome_unknown(self, op_id: str, until: datetime) -> None: ...


class _RotationRecordsNamespaces(Protocol):
    async def mark_cleared(self, ns_ids: list[str], now: datetime) -> None: ...

    async def namespaces_by_id(self, scope_id: str, ns_ids: list[str]) -> list[Namespace]: ...

    async def open_namespaces(self, scope_id: str) -> list[Namespace]: ...


class _RotationRecordsLedger(Protocol):
    async def mark_physically_deleted(self, entry_ids: list[str], now: datetime) -> None: ...

    async def mark_verified(self, entry_ids: list[str], now: datetime) -> None: ...

    async def tombstone(self, scope_id: str, entry_ids: list[str], now: datetime) -> int: ...


class _RotationRecordsErasures(Protocol):
    async def record_readback(self, erasure_id: str, ns_id: str, remaining: int, what: str, now: datetime) -> None: ...


class _RotationRecordsHistory(Protocol):
    async def unswept_entries(self, scope_id: str, ns_ids: list[str] | None = None) -> list[LedgerEntry]: ...


class RotationRecords(Protocol):
    """Namespace rotation: staging, the copy's write fence, the moves and the switch."""

    @property
    def rotations(self) -> _RotationRecordsRotations: ...

    @property
    def scopes(self) -> _RotationRecordsScopes: ...

    @property
    def namespaces(self) -> _RotationRecordsNamespaces: ...

    @property
    def ledger(self) -> _RotationRecordsLedger: ...

    @property
    def erasures(self) -> _RotationRecordsErasures: ...

    @property
    def history(self) -> _RotationRecordsHistory: ...


class _SweepRecordsHistory(Protocol):
    async def compact_history(self, now: datetime, older_than: datetime, limit: int = 500) -> Compaction: ...

    async def unswept_entries(self, scope_id: str, ns_ids: list[str] | None = None) -> list[LedgerEntry]: ...


class _SweepRecordsLedger(Protocol):
    async def expired_unswept(self, now: datetime, limit: int) -> list[LedgerEntry]: ...

    async def mark_physically_deleted(self, entry_ids: list[str], now: datetime) -> None: ...

    async def mark_verified(self, entry_ids: list[str], now: datetime) -> None: ...

    async def tombstone(self, scope_id: str, entry_ids: list[str], now: datetime) -> int: ...


class _SweepRecordsScopes(Protocol):
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


class _SweepRecordsNamespaces(Protocol):
    async def mark_cleared(self, ns_ids: list[str], now: datetime) -> None: ...

    async def namespaces_by_id(self, scope_id: str, ns_ids: list[str]) -> list[Namespace]: ...

    async def sweepable_namespaces(self, now: datetime, limit: int) -> list[Namespace]: ...


class _SweepRecordsAuditLog(Protocol):
    async def purge_audit(self, older_than: datetime) -> int: ...


class _SweepRecordsRotations(Protocol):
    async def purge_erasures(self, older_than: datetime) -> int: ...

    async def rotation_candidates(self, now: datetime, expired_before: datetime, limit: int) -> list[str]: ...


class _SweepRecordsErasures(Protocol):
    async def record_readback(self, erasure_id: str, ns_id: str, remaining: int, what: str, now: datetime) -> None: ...


class SweepRecords(Protocol):
    """The sweepers: what expired or was left behind, and the purges of what evidence no longer needs."""

    @property
    def history(self) -> _SweepRecordsHistory: ...

    @property
    def ledger(self) -> _SweepRecordsLedger: ...

    @property
    def scopes(self) -> _SweepRecordsScopes: ...

    @property
    def namespaces(self) -> _SweepRecordsNamespaces: ...

    @property
    def audit_log(self) -> _SweepRecordsAuditLog: ...

    @property
    def rotations(self) -> _SweepRecordsRotations: ...

    async def purge_expired(self, now: datetime) -> dict[str, int]: ...

    @property
    def erasures(self) -> _SweepRecordsErasures: ...


def erasure_records(gov: Governance) -> ErasureRecords:
    return gov.store


def readback_records(gov: Governance) -> ReadbackRecords:
    return gov.store


def rotation_records(gov: Governance) -> RotationRecords:
    return gov.store


def sweep_records(gov: Governance) -> SweepRecords:
    return gov.store
