"""Cost admission shared by all replicas: every claim of a request is reserved or none is.

Each claim is one ``INSERT … ON CONFLICT DO UPDATE … WHERE <admits>`` statement: the database
locks the budget row, re-reads it, and updates it only when the claim fits, so concurrent
reservers can never over-admit. A claim that returns no row does not fit; the transaction is
rolled back and that claim's reason is returned. On PostgreSQL the statement itself declines
(``memgov_decline``), which rolls back the claims before it even outside an explicit transaction,
so a reservation needs no BEGIN and COMMIT round trips. Claims run in a fixed (kind, key) order so two
multi-claim reservations cannot deadlock on PostgreSQL.

Rows: ``level`` is the bucket's tokens left, or the count used in the current window/period;
``mark`` is the end of that window/period (unused for buckets); ``expires_us`` is when the row
equals a fresh one and can be purged.
"""

from __future__ import annotations

import math
from datetime import datetime

from sidecar.state import codec
from sidecar.state.codec import NEVER_US, to_us
from sidecar.state.db import Declined, Facet, Param, Script, fetchmany
from sidecar.state.types import BudgetClaim

_KINDS = frozenset({"bucket", "window", "counter"})

# One statement for every kind, so a request's claims go to the database together (``fetchmany``:
# on PostgreSQL one round trip for all of them, each still its own statement, in order).
# Parameters: $1 kind, $2 key, $3 the level of a fresh row, $4 cost, $5 limit, $6 now, $7 expiry,
# $8 mark, $9 refill per microsecond (buckets), $10 the claim's position (answered back).
#
# bucket: refill by elapsed time (never negative if replica clocks disagree), cap at the limit,
#   take the cost; the tiny tolerance keeps e.g. 6/min (0.1/s) exact despite binary floating point.
# window, counter: a count that starts over once its mark has passed.
# Every right-hand side reads the row as it was before this update.
_ELAPSED = "(CASE WHEN excluded.at_us > b.at_us THEN excluded.at_us - b.at_us ELSE 0 END)"
_REFILLED = f"b.level + {_ELAPSED} * CAST($9 AS DOUBLE PRECISION)"
_LIMIT = "CAST($5 AS DOUBLE PRECISION)"
_COST = "CAST($4 AS DOUBLE PRECISION)"
_CLAIM = f"""
INSERT INTO budgets AS b (kind, bkey, level, mark, at_us, expires_us)
VALUES ($1, $2, CAST($3 AS DOUBLE PRECISION), $8, $6, $7)
ON CONFLICT (kind, bkey) DO UPDATE SET
  level = CASE WHEN b.kind = 'bucket'
               THEN (CASE WHEN {_REFILLED} >= {_LIMIT} THEN {_LIMIT} ELSE {_REFILLED} END) - {_COST}
               WHEN b.mark <= excluded.at_us THEN excluded.level
               ELSE b.level + excluded.level END,
  mark = CASE WHEN b.kind <> 'bucket' AND b.mark <= excluded.at_us THEN excluded.mark ELSE b.mark END,
  at_us = CASE WHEN b.kind = 'bucket' AND excluded.at_us <= b.at_us THEN b.at_us ELSE excluded.at_us END,
  expires_us = CASE WHEN b.kind = 'bucket'
                    THEN (CASE WHEN excluded.expires_us > b.expires_us THEN excluded.expires_us ELSE b.expires_us END)
                    WHEN b.mark <= excluded.at_us THEN excluded.mark
                    ELSE b.mark END
WHERE CASE WHEN b.kind = 'bucket'
           THEN {_REFILLED} >= {_COST} - 0.000000001
           ELSE b.mark <= excluded.at_us OR b.level + excluded.level <= {_LIMIT} END
RETURNING level, CAST($10 AS INTEGER) AS pos
"""
#: PostgreSQL: the claim, or ``memgov_decline(position)`` when it does not fit, which rolls back
#: the claims before it in the same (implicit or explicit) transaction.
_CLAIM_OR_DECLINE = (
    f"WITH c AS ({_CLAIM}) SELECT level, pos FROM c"
    " UNION ALL SELECT memgov_decline(CAST($10 AS INTEGER)), CAST($10 AS INTEGER) WHERE NOT EXISTS (SELECT 1 FROM c)"
)


class ClaimRefused(Exception):
    """A claim did not fit; raised inside a transaction so it rolls back every claim before it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _check(claim: BudgetClaim) -> None:
    if claim.kind not in _KINDS:
        raise ValueError("budget claim kind is invalid")
    codec.check_reason(claim.reason, "claim reason")
    if claim.cost < 0 or claim.limit < 0 or claim.refill_per_s < 0 or not math.isfinite(claim.refill_per_s):
        raise ValueError("budget claim numbers must be non-negative")
    if (claim.kind == "window" and claim.window_s <= 0) or (claim.kind == "counter" and claim.ttl_s <= 0):
        raise ValueError("budget claim period must be positive")


def _claim(claim: BudgetClaim, key: str, now_us: int, position: int) -> tuple[Param, ...]:
    """The parameters of ``_CLAIM`` for one claim."""
    cost, limit = float(claim.cost), float(claim.limit)
    if claim.kind == "bucket":
        rate = claim.refill_per_s / 1_000_000
        # A bucket untouched for limit/rate seconds is full again, i.e. equal to a missing row.
        expires = now_us + math.ceil(claim.limit / rate) if rate > 0 else NEVER_US
        return ("bucket", key, limit - cost, cost, limit, now_us, expires, 0, rate, position)
    if claim.kind == "window":
        period = claim.window_s * 1_000_000
        mark = (now_us // period + 1) * period
    else:
        mark = now_us + claim.ttl_s * 1_000_000
    return (claim.kind, key, cost, cost, limit, now_us, mark, mark, 0.0, position)


def reserve(claims: list[BudgetClaim], now_us: int, *, declining: bool = False) -> Script[list[float]]:
    """Script part: reserve every claim, or raise :class:`ClaimRefused` (the caller's transaction rolls back).

    Returns each claim's level after it, in the order of ``claims``: a bucket's tokens left, a
    window's or counter's count used, this claim's cost included. ``declining`` (PostgreSQL): a
    claim that does not fit ends the statements with :class:`Declined`, which rolls back the claims
    before it on its own, so the script may run outside a transaction (``single``).
    """
    for claim in claims:
        _check(claim)
    # A cost above the limit can never fit, and the insert path would not notice it.
    for claim in claims:
        if claim.cost > claim.limit:
            raise ClaimRefused(claim.reason)
    ordered = sorted(((c.kind, codec.digest(c.key), i, c) for i, c in enumerate(claims)), key=lambda t: (t[0], t[1]))
    if not ordered:
        return []
    params = [_claim(claim, key, now_us, index) for _, key, index, claim in ordered]
    try:
        rows = yield fetchmany(_CLAIM_OR_DECLINE if declining else _CLAIM, params)
    except Declined as declined:
        # memgov_decline names the refused claim's position in ``claims``.
        if not 0 <= declined.detail < len(claims):
            raise
        raise ClaimRefused(claims[declined.detail].reason) from None
    reached: dict[int, float] = {int(row[1]): float(row[0]) for row in rows}
    for _, _, index, claim in ordered:
        if index not in reached:
            # The first claim in (kind, key) order that did not fit names the refusal.
            raise ClaimRefused(claim.reason)
    return [reached[i] for i in range(len(claims))]


class BudgetOps(Facet):
    """All-or-nothing reservation of budget claims."""

    async def reserve_budget(self, claims: list[BudgetClaim], now: datetime) -> str | None:
        """Reserve every claim or none; return None when admitted, else the first refusing claim's reason."""
        failed, _ = await self.reserve_counted(claims, now)
        return failed

    async def reserve_counted(self, claims: list[BudgetClaim], now: datetime) -> tuple[str | None, list[int]]:
        """Like :meth:`reserve_budget`, with each claim's level after it (rounded down; empty when refused)."""
        pg = self._db.dialect == "postgresql"
        try:
            now_us = to_us(now)
            # PostgreSQL: the claims roll themselves back, so no BEGIN and COMMIT round trips.
            levels = await self._db.run(lambda: reserve(claims, now_us, declining=pg), "single" if pg else "write")
        except ClaimRefused as refused:
            return refused.reason, []
        return None, [math.floor(level) for level in levels]
