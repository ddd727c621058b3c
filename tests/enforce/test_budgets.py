"""The named budgets: each claim's key is a stored row's name, so its spelling is part of the state format.

A renamed key would start every budget afresh after an upgrade (and let an exhausted scope spend
its hour again), so the spellings, windows and refusal codes are pinned here against the
packaged pack's limits.
"""

from __future__ import annotations

from sidecar.enforce import budgets
from sidecar.policy import load_limits
from sidecar.settings import PACKAGED_POLICY_DIR


def test_keys_windows_and_codes() -> None:
    lim = load_limits(PACKAGED_POLICY_DIR)
    rate = budgets.sender_rate(lim, "@alice:example.org", "kagent/helper")
    assert (rate.kind, rate.key, rate.limit, rate.reason) == (
        "bucket",
        "rate:@alice:example.org:kagent/helper",
        lim.rate_burst,
        "rate_limited",
    )
    assert rate.refill_per_s == lim.rate_per_minute / 60.0
    hour = budgets.scope_hour(lim, "s1", 2)
    assert (hour.kind, hour.key, hour.limit, hour.cost, hour.window_s, hour.reason) == (
        "window",
        "hour:s1",
        lim.hourly_operations,
        2,
        3600,
        "hourly_budget_exhausted",
    )
    # Asking whether one operation is left: nothing reserved, one below the limit.
    peek = budgets.scope_hour(lim, "s1", 0, headroom=1)
    assert (peek.key, peek.limit, peek.cost) == ("hour:s1", lim.hourly_operations - 1, 0)
    pre = budgets.prefetch(lim, "w1", 90)
    assert (pre.kind, pre.key, pre.limit, pre.ttl_s, pre.reason) == (
        "counter",
        "prefetch:w1",
        lim.prefetch_searches,
        90,
        "prefetch_limit",
    )
    source, agent = budgets.embedding_items(lim, "kagent/helper", "10.0.0.7", 3)
    assert [(c.key, c.limit, c.cost, c.window_s) for c in (source, agent)] == [
        ("embed-src:kagent/helper:10.0.0.7", lim.embedding_items_per_source_hour, 3, 3600),
        ("embed:kagent/helper", lim.embedding_items_per_agent_hour, 3, 3600),
    ]
