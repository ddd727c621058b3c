"""Checks: hard expiry and entry-cap refusal (ADR items 27 and 41, SPEC R-9, R-10)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sidecar.drill.actors import DrillRun
from sidecar.drill.result import Evidence, NotProvable, expect

#: A requested lifetime far above any sane maximum: the gateway must clamp it.
LONG_TTL_DAYS = 365
#: Batch refusals that mean the budget, not the cap, stopped the fill.
_BUDGET_REFUSALS = frozenset({"hourly_budget_exhausted", "batch_too_large", "rate_limited"})


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def hard_expiry(run: DrillRun, ev: Evidence) -> None:
    """An entry's hard expiry is created_at + max_days whatever ttl was asked; past it, nothing reads it."""
    subject = run.subject("c5")
    scope = await run.new_scope(subject)
    max_days = int((await run.status(scope))["hard_expiry_days"])
    ev["scope_id"], ev["max_days"], ev["requested_ttl_days"] = scope.scope_id, max_days, LONG_TTL_DAYS
    saved = await run.save(run.key(scope), run.fact("c5"), app=scope.agent.app, ttl_days=LONG_TTL_DAYS)
    ev["save"] = saved.brief()
    expect(saved.status == 201 and isinstance(saved.body, dict) and "id" in saved.body, "consented_save_refused")
    assert isinstance(saved.body, dict)
    entry_id = str(saved.body["id"])
    entry = next((e for e in await run.inspect_all(scope) if e["id"] == entry_id), None)
    expect(entry is not None, "saved_entry_not_inspectable")
    assert entry is not None
    ev["entry"] = {"id": entry_id, "created_at": entry["created_at"], "expires_at": entry["expires_at"]}
    expect(
        _ts(entry["expires_at"]) - _ts(entry["created_at"]) == timedelta(days=max_days),
        "hard_expiry_not_created_plus_max_days",
    )

    if run.local is None:
        ev["expiry_observed"] = False
        ev.note(
            "Against a deployment the drill does not wait max_days: it proves the recorded hard expiry is "
            "created_at + max_days although a longer ttl_days was requested. The wall-clock expiry itself "
            "and the ttl_days kagent received are not observed here; the devstack drill observes both."
        )
        return
    ttl = await run.local.kagent_ttl_days(entry_id)
    ev["forwarded_ttl_days"] = None if ttl is None else round(ttl, 6)
    expect(ttl is not None and ttl <= max_days + 1e-6, "forwarded_ttl_not_clamped")
    run.local.advance(max_days * 86400 + 1)
    ev["clock_advanced_s"] = max_days * 86400 + 1
    ev["expiry_observed"] = True
    after = await run.inspect_all(scope)
    ev["inspect_after"] = len(after)
    expect(entry_id not in {e["id"] for e in after}, "expired_entry_inspectable")
    found = await run.search(run.key(scope), app=scope.agent.app, owner=True)
    ev["search_after"] = {**found.brief(), "results": len(found.ids())}
    expect(found.decision.action == "forward", "search_not_forwarded")
    expect(entry_id not in found.ids(), "expired_entry_searchable")
    live = (await run.status(scope))["entries"]["live"]
    ev["live_after"] = live
    expect(live == 0, "expired_entry_counted_live")


async def cap_refusal(run: DrillRun, ev: Evidence) -> None:
    """A scope filled to its entry cap refuses the next write and keeps what it has (no eviction)."""
    subject = run.subject("c6")
    scope = await run.new_scope(subject)
    cap = int((await run.status(scope))["entries"]["cap"])
    limits = run.target.limits
    per_batch = limits.max_batch_facts
    # Each batch costs one summarization plus a save and an embedding item per fact (SPEC R-11);
    # the refused write at the end costs one batch of one.
    needed = math.ceil(cap / per_batch) + 2 * cap + 3
    ev.data.update(
        scope_id=scope.scope_id,
        cap=cap,
        max_batch_facts=per_batch,
        hourly_operations=limits.hourly_operations,
        needed_operations=needed,
    )
    if needed > limits.hourly_operations:
        ev.note(
            "Filling one scope to its cap needs more memory operations than its hourly budget allows, so "
            "the refusal at the cap cannot be reached here. Run the devstack drill, or a drill deployment "
            "whose pack has a smaller max_entries."
        )
        raise NotProvable("hourly_budget_below_cap_fill")

    stored = 0
    while stored < cap:
        count = min(per_batch, cap - stored)
        answer = await run.save_batch(
            run.key(scope), [run.fact(f"c6n{stored + i}") for i in range(count)], app=scope.agent.app
        )
        if answer.status == 403 and answer.reason in _BUDGET_REFUSALS:
            ev["fill_refused"] = answer.brief()
            ev.note("The budget ran out before the cap: the deployment's limits differ from --policy-dir.")
            raise NotProvable("budget_exhausted_before_cap")
        expect(answer.status == 201, "consented_save_refused", save=answer.brief())
        stored += count
    live = (await run.status(scope))["entries"]["live"]
    ev["live_at_cap"] = live
    expect(live == cap, "fill_not_counted")

    over = await run.save_batch(run.key(scope), [run.fact("c6over")], app=scope.agent.app)
    ev["over_cap"] = over.brief()
    expect(over.status == 403 and over.reason == "entry_cap_reached", "write_over_cap_not_refused")
    live = (await run.status(scope))["entries"]["live"]
    ev["live_after_refusal"] = live
    expect(live == cap, "refused_write_changed_entries")
    if run.local is not None:
        ev["kagent_rows"] = await run.local.kagent_rows(scope.scope_id)
        expect(ev["kagent_rows"] == cap, "kagent_rows_differ_from_cap")
