"""Durable control state: scopes, consent, ledger, budgets, replay cache, audit, erasures.

``open_store(url)`` connects (SQLite embedded default, PostgreSQL for more than one replica),
runs pending migrations and returns a :class:`StateStore`; ``store.pending_store(url)`` returns one
that connects later, in the background (a gateway serves degraded meanwhile). See docs/state.md.
"""

from sidecar.state.store import StateStore, open_store
from sidecar.state.types import (
    BudgetClaim,
    Erasure,
    LedgerEntry,
    Receipt,
    Scope,
    StateError,
)

__all__ = [
    "BudgetClaim",
    "Erasure",
    "LedgerEntry",
    "Receipt",
    "Scope",
    "StateError",
    "StateStore",
    "open_store",
]
