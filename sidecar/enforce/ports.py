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


class WritePath(Protocol):
    """A governed save or search: admission, the live filter, and a save's finish or undo."""

    async def get_scope(self, scope_id: str) -> Scope | None: ...

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

    async def release_write(self, admission: Admission) -> None: ...

    async def filter_live(self, scope_id: str, ns_id: str, entry_ids: list[str], now: datetime) -> set[str]: ...

    async def fill_entry(self, slot_id: str, entry_id: str, created_at: datetime, expires_at: datetime) -> None: ...

    async def finish_write(
        self, op_id: str, scope_id: str, ns_id: str, fills: list[tuple[str, str, datetime, datetime]]
    ) -> bool: ...

    async def write_outcome_unknown(self, op_id: str, until: datetime) -> None: ...

    async def end_write(self, op_id: str) -> None: ...

    async def release_entries(self, slot_ids: list[str]) -> None: ...

    async def tombstone(self, scope_id: str, entry_ids: list[str], now: datetime) -> int: ...

    async def mark_physically_deleted(self, entry_ids: list[str], now: datetime) -> None: ...


class InvokeState(Protocol):
    """An invocation: the conversation's scope, its budget claims and the prefetch window."""

    async def find_scope(self, mxid: str, origin: str, agent: str, kind: str, room_id: str) -> Scope | None: ...

    async def reserve_counted(self, claims: list[BudgetClaim], now: datetime) -> tuple[str | None, list[int]]: ...

    async def open_prefetch_window(self, scope_id: str, now: datetime, until: datetime) -> None: ...


class EmbeddingState(Protocol):
    """The embedding route: whether an agent has any consented scope, and its item budget."""

    async def has_enabled_scope(self, agent: str) -> bool: ...

    async def reserve_counted(self, claims: list[BudgetClaim], now: datetime) -> tuple[str | None, list[int]]: ...


def write_path(gov: Governance) -> WritePath:
    return gov.store


def invoke_state(gov: Governance) -> InvokeState:
    return gov.store


def embedding_state(gov: Governance) -> EmbeddingState:
    return gov.store
