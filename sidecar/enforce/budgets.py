"""The budgets a governed call reserves, by name (R-11).

Each function builds one claim from the live pack's limits: its key (the stored budget row, so
the spelling is part of the state format), its window and the reason reported when it is refused.
Handlers say which budgets a call spends and at what cost; nothing else writes a window length.
"""

from __future__ import annotations

from typing import Final

from sidecar.policy.model import Limits
from sidecar.reasons import Reason
from sidecar.state.types import BudgetClaim

#: The hourly windows: a scope's operations, an agent's embedding items, a source's share of them.
HOUR_S: Final = 3600


def sender_rate(limits: Limits, principal: str, agent: str) -> BudgetClaim:
    """Explicit loads and saves per sender and agent: a token bucket of ``rate_burst`` refilled per minute."""
    return BudgetClaim(
        kind="bucket",
        key=f"rate:{principal}:{agent}",
        limit=limits.rate_burst,
        refill_per_s=limits.rate_per_minute / 60.0,
        reason=Reason.RATE_LIMITED.value,
    )


def scope_hour_key(scope_id: str) -> str:
    """The stored name of a scope's hourly operations budget."""
    return f"hour:{scope_id}"


def scope_hour(limits: Limits, scope_id: str, cost: int, *, headroom: int = 0) -> BudgetClaim:
    """Memory operations of one scope in the hour; ``headroom`` reserves that many below the limit
    (a reservation of nothing with headroom 1 only asks whether one operation is left)."""
    return BudgetClaim(
        kind="window",
        key=scope_hour_key(scope_id),
        limit=limits.hourly_operations - headroom,
        cost=cost,
        window_s=HOUR_S,
        reason=Reason.HOURLY_BUDGET_EXHAUSTED.value,
    )


def prefetch(limits: Limits, window: str, ttl_s: int) -> BudgetClaim:
    """Prefetch searches of one new conversation (counted until ``ttl_s`` after the first)."""
    return BudgetClaim(
        kind="counter",
        key=f"prefetch:{window}",
        limit=limits.prefetch_searches,
        ttl_s=ttl_s,
        reason=Reason.PREFETCH_LIMIT.value,
    )


def embedding_items(limits: Limits, agent: str, source: str, cost: int) -> list[BudgetClaim]:
    """An agent's embedding items in the hour, and one source address's share of them."""
    return [
        BudgetClaim(
            kind="window",
            key=f"embed-src:{agent}:{source}",
            cost=cost,
            limit=limits.embedding_items_per_source_hour,
            window_s=HOUR_S,
            reason=Reason.HOURLY_BUDGET_EXHAUSTED.value,
        ),
        BudgetClaim(
            kind="window",
            key=f"embed:{agent}",
            limit=limits.embedding_items_per_agent_hour,
            cost=cost,
            window_s=HOUR_S,
            reason=Reason.HOURLY_BUDGET_EXHAUSTED.value,
        ),
    ]
