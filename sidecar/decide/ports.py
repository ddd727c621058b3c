"""What deciding and recording need of the state store, and nothing more.

Each consumer of the store names the few calls it makes as a protocol and reaches the store only
through it (``tests/test_ports.py`` checks that no other module of these packages touches
``gov.store``); mypy checks that the store satisfies every protocol. A change to the store that
breaks a consumer shows where, and a consumer cannot quietly start using more of it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from sidecar.governance import Governance
from sidecar.state.types import AuditLog


class RefusalLog(AuditLog, Protocol):
    """Audit rows, and the hourly counts of refusals that proved no credential."""

    async def count_refusal(self, operation: str, reason: str, now: datetime) -> None: ...


class DecisionLog(Protocol):
    """Audit rows of credentialed refusals, and hourly counts of the others (R-15)."""

    @property
    def audit_log(self) -> RefusalLog: ...


class _ContextLedgerSingleUse(Protocol):
    async def remember_jti(self, jti: str, exp: datetime, now: datetime) -> bool: ...


class ContextLedger(Protocol):
    """Spent delegation contexts (single use)."""

    @property
    def single_use(self) -> _ContextLedgerSingleUse: ...


def decision_log(gov: Governance) -> DecisionLog:
    return gov.store


def context_ledger(gov: Governance) -> ContextLedger:
    return gov.store
