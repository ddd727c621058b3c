"""What the data plane's handlers need of the state store, one protocol per consumer.

A handler reaches the store only through its protocol (``tests/test_ports.py`` checks that no
other module of ``enforce/`` touches ``gov.store``), and mypy checks that the store satisfies
each one: the write path, the invocation path and the embedding route each see the calls they
make, not the store's whole surface.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sidecar.governance import Governance
from sidecar.state.types import Admission, BudgetClaim, Claims, Scope, WriteAsk


class _Budgets(Protocol):
    """All-or-nothing budget claims, with each claim's level after it."""

    async def reserve_counted(self, claims: list[BudgetClaim], now: datetime) -> tuple[str | None, list[int]]: ...


class _WritePathAdmission(Protocol):
    async def admit(
        self,
        scope_id: str | None,
        generation: int | None,
        claims: Claims,
        now: datetime,
        *,
        window: bool = False,
        write: WriteAsk | None = None,
    ) -> Admission: ...

    async def finish_write(
        self, op_id: str, scope_id: str, ns_id: str, fills: list[tuple[str, str, datetime, datetime]]
    ) -> bool: ...

    async def release_write(self, admission: Admission) -> None: ...


class _WritePathScopes(Protocol):
    async def end_write(self, op_id: str) -> None: ...

    async def get_scope(self, scope_id: str) -> Scope | None: ...

    async def write_outcome_unknown(self, op_id: str, until: datetime) -> None: ...


class _WritePathLedger(Protocol):
    async def fill_entry(self, slot_id: str, entry_id: str, created_at: datetime, expires_at: datetime) -> None: ...

    async def filter_live(self, scope_id: str, ns_id: str, entry_ids: list[str], now: datetime) -> set[str]: ...

    async def mark_physically_deleted(self, entry_ids: list[str], now: datetime) -> None: ...

    async def release_entries(self, slot_ids: list[str]) -> None: ...

    async def tombstone(self, scope_id: str, entry_ids: list[str], now: datetime) -> int: ...


class WritePath(Protocol):
    """A governed save or search: admission, the live filter, and a save's finish or undo."""

    @property
    def admission(self) -> _WritePathAdmission: ...

    @property
    def scopes(self) -> _WritePathScopes: ...

    @property
    def ledger(self) -> _WritePathLedger: ...


class _InvokeStateScopes(Protocol):
    async def find_scope(self, mxid: str, origin: str, agent: str, kind: str, room_id: str) -> Scope | None: ...


class _InvokeStatePrefetch(Protocol):
    async def open_prefetch_window(self, scope_id: str, now: datetime, until: datetime) -> None: ...


class InvokeState(Protocol):
    """An invocation: the conversation's scope, its budget claims and the prefetch window."""

    @property
    def scopes(self) -> _InvokeStateScopes: ...

    @property
    def prefetch(self) -> _InvokeStatePrefetch: ...

    @property
    def budgets(self) -> _Budgets: ...


class _EmbeddingStateScopes(Protocol):
    async def has_enabled_scope(self, agent: str) -> bool: ...


class EmbeddingState(Protocol):
    """The embedding route: whether an agent has any consented scope, and its item budget."""

    @property
    def scopes(self) -> _EmbeddingStateScopes: ...

    @property
    def budgets(self) -> _Budgets: ...


def write_path(gov: Governance) -> WritePath:
    return gov.store


def invoke_state(gov: Governance) -> InvokeState:
    return gov.store


def embedding_state(gov: Governance) -> EmbeddingState:
    return gov.store
