"""What the control API's handlers need of the state store, one protocol per consumer.

As in ``enforce/ports.py``: a handler module reaches the store only through its protocol
(``tests/test_ports.py``), and mypy checks the store against each one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sidecar.decide.ports import DecisionLog
from sidecar.governance import Governance
from sidecar.state.types import Erasure, LedgerEntry, Namespace, Receipt, Scope


class _ScopeById(Protocol):
    async def get_scope(self, scope_id: str) -> Scope | None: ...


class ScopeReads(Protocol):
    """One scope by id (every route under /v1/scopes/{scope_id})."""

    @property
    def scopes(self) -> _ScopeById: ...


class _EntryHistory(Protocol):
    async def entries_by_id(self, scope_id: str, entry_ids: list[str]) -> list[LedgerEntry]: ...


class _EntryLineage(Protocol):
    async def lineage(self, scope_id: str, entry_id: str) -> list[str]: ...


class _LiveLedger(Protocol):
    async def live_count(self, scope_id: str, now: datetime) -> int: ...

    async def live_entries(self, scope_id: str, now: datetime, after: str | None, limit: int) -> list[LedgerEntry]: ...


class EntryReads(ScopeReads, Protocol):
    """Inspect and forget-one: the live ledger of a scope and an entry's rotation lineage."""

    @property
    def history(self) -> _EntryHistory: ...

    @property
    def rotations(self) -> _EntryLineage: ...

    @property
    def ledger(self) -> _LiveLedger: ...


class _EvidenceHistory(Protocol):
    async def evidence_entries(self, erasure_id: str) -> list[LedgerEntry]: ...


class _EvidenceErasures(Protocol):
    async def get_erasure(self, erasure_id: str) -> Erasure | None: ...

    async def rotations_after(self, erasure: Erasure) -> list[Erasure]: ...


class _ScopeNamespaces(Protocol):
    async def namespaces_of_scope(self, scope_id: str) -> list[Namespace]: ...


class EvidenceReads(ScopeReads, Protocol):
    """An erasure's evidence: its entries, the scope's namespaces and the rotations after it."""

    @property
    def history(self) -> _EvidenceHistory: ...

    @property
    def erasures(self) -> _EvidenceErasures: ...

    @property
    def namespaces(self) -> _ScopeNamespaces: ...


class _ConfirmationTokens(Protocol):
    async def put_confirmation(
        self, token_hash: str, scope_id: str, subject: str, action: str, expires_at: datetime
    ) -> None: ...

    async def take_confirmation(
        self, token_hash: str, scope_id: str, subject: str, action: str, now: datetime
    ) -> bool: ...


class _PrincipalScopes(Protocol):
    async def scopes_for_principal(self, mxid: str) -> list[Scope]: ...


class Confirmations(DecisionLog, Protocol):
    """Erasures that need a confirmation token, and offboarding's list of a principal's scopes."""

    @property
    def single_use(self) -> _ConfirmationTokens: ...

    @property
    def scopes(self) -> _PrincipalScopes: ...


class _ScopeConsent(Protocol):
    async def create_scope(
        self, mxid: str, origin: str, agent: str, kind: str, room_id: str, now: datetime
    ) -> tuple[Scope, bool]: ...

    async def grant(self, scope_id: str, purpose: str, policy_version: str, now: datetime) -> tuple[Scope, Receipt]: ...

    async def receipts(self, scope_id: str) -> list[Receipt]: ...


class _EntryCounts(Protocol):
    async def entry_counts(self, scope_id: str, live_ns: str | None, now: datetime) -> tuple[int, int]: ...


class _ScopeErasures(Protocol):
    async def erasures_of_scope(
        self, scope_id: str, limit: int = 100, *, kind: str | None = None, not_kind: str | None = None
    ) -> list[Erasure]: ...


class ScopeWrites(DecisionLog, Protocol):
    """Creating a scope, granting consent, and a scope's status."""

    @property
    def scopes(self) -> _ScopeConsent: ...

    @property
    def history(self) -> _EntryCounts: ...

    @property
    def erasures(self) -> _ScopeErasures: ...


def scope_reads(gov: Governance) -> ScopeReads:
    return gov.store


def entry_reads(gov: Governance) -> EntryReads:
    return gov.store


def evidence_reads(gov: Governance) -> EvidenceReads:
    return gov.store


def confirmations(gov: Governance) -> Confirmations:
    return gov.store


def scope_writes(gov: Governance) -> ScopeWrites:
    return gov.store
