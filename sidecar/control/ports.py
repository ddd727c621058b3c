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


class ScopeReads(Protocol):
    """One scope by id (every route under /v1/scopes/{scope_id})."""

    async def get_scope(self, scope_id: str) -> Scope | None: ...


class EntryReads(ScopeReads, Protocol):
    """Inspect and forget-one: the live ledger of a scope and an entry's rotation lineage."""

    async def live_count(self, scope_id: str, now: datetime) -> int: ...

    async def live_entries(self, scope_id: str, now: datetime, after: str | None, limit: int) -> list[LedgerEntry]: ...

    async def lineage(self, scope_id: str, entry_id: str) -> list[str]: ...

    async def entries_by_id(self, scope_id: str, entry_ids: list[str]) -> list[LedgerEntry]: ...


class EvidenceReads(ScopeReads, Protocol):
    """An erasure's evidence: its entries, the scope's namespaces and the rotations after it."""

    async def get_erasure(self, erasure_id: str) -> Erasure | None: ...

    async def evidence_entries(self, erasure_id: str) -> list[LedgerEntry]: ...

    async def namespaces_of_scope(self, scope_id: str) -> list[Namespace]: ...

    async def rotations_after(self, erasure: Erasure) -> list[Erasure]: ...


class Confirmations(DecisionLog, Protocol):
    """Erasures that need a confirmation token, and offboarding's list of a principal's scopes."""

    async def put_confirmation(
        self, token_hash: str, scope_id: str, subject: str, action: str, expires_at: datetime
    ) -> None: ...

    async def take_confirmation(
        self, token_hash: str, scope_id: str, subject: str, action: str, now: datetime
    ) -> bool: ...

    async def scopes_for_principal(self, mxid: str) -> list[Scope]: ...


class ScopeWrites(DecisionLog, Protocol):
    """Creating a scope, granting consent, and a scope's status."""

    async def create_scope(
        self, mxid: str, origin: str, agent: str, kind: str, room_id: str, now: datetime
    ) -> tuple[Scope, bool]: ...

    async def grant(self, scope_id: str, purpose: str, policy_version: str, now: datetime) -> tuple[Scope, Receipt]: ...

    async def receipts(self, scope_id: str) -> list[Receipt]: ...

    async def entry_counts(self, scope_id: str, live_ns: str | None, now: datetime) -> tuple[int, int]: ...

    async def erasures_of_scope(
        self, scope_id: str, limit: int = 100, *, kind: str | None = None, not_kind: str | None = None
    ) -> list[Erasure]: ...


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
