"""Checks: no collection before consent, and private inspect (ADR items 7-9 and 13-20, SPEC R-1, R-5, R-6)."""

from __future__ import annotations

from sidecar.drill.actors import DrillRun, refusal
from sidecar.drill.result import Evidence, expect
from sidecar.drill.sentinels import find_leaks
from sidecar.drill.wire import Recorder

#: What a memory call under a scope without current consent may be refused with.
CONSENT_REFUSALS = frozenset({"consent_missing", "consent_disabled", "stale_generation"})


async def no_collection_before_consent(run: DrillRun, ev: Evidence) -> None:
    """Before consent: invocations lose memory, saves are refused, searches are empty, nothing is recorded."""
    subject = run.subject("c1")
    scope = await run.new_scope(subject, consent=False)
    agent = scope.agent
    ev["scope_id"], ev["generation"] = scope.scope_id, scope.generation

    invoked = await run.invoke(agent, run.context(subject, agent, scope.room), user=subject)
    ev["invoke"] = invoked.decision.brief()
    expect(invoked.decision.action == "rewrite_disabled", "invoke_not_rewritten")

    key = run.key(scope)  # what a runtime would present if it guessed the never-issued key
    saved = await run.save(key, run.fact("c1save"), app=agent.app)
    ev["save"] = saved.brief()
    expect(saved.status == 403 and saved.reason in CONSENT_REFUSALS, "save_not_refused")
    batch = await run.save_batch(key, [run.fact("c1batch")], app=agent.app)
    ev["save_batch"] = batch.brief()
    expect(batch.status == 403 and batch.reason in CONSENT_REFUSALS, "batch_not_refused")
    found = await run.search(key, app=agent.app)
    ev["search"] = {**found.brief(), "results": len(found.ids())}
    expect(found.status == 200 and not found.ids() and found.decision.action != "forward", "search_not_empty")

    status = await run.status(scope)
    counts = status["entries"]
    ev["status"] = {
        "enabled": status["enabled"],
        "consented_at": status["consented_at"],
        "live": counts["live"],
        "pending_physical_deletion": counts["pending_physical_deletion"],
    }
    expect(
        not status["enabled"] and counts["live"] == 0 and counts["pending_physical_deletion"] == 0,
        "entries_recorded_without_consent",
    )
    if run.local is not None:
        ev["kagent_rows"] = await run.local.kagent_rows(scope.scope_id)
        expect(ev["kagent_rows"] == 0, "rows_stored_without_consent")


async def private_inspect(run: DrillRun, ev: Evidence) -> None:
    """Only the exact subject, with a fresh attested control-room context, sees its entries."""
    subject, peer = run.subject("c2"), run.subject("c2-peer")
    scope = await run.new_scope(subject)
    agent = scope.agent
    facts = await run.remember(scope, 1, "c2")
    sentinel = run.sentinels[-1]  # the one inside facts[0]
    ev["scope_id"] = scope.scope_id

    entries = await run.inspect_all(scope)
    ev["subject_inspect"] = {
        "entries": len(entries),
        "entry_ids": [e["id"] for e in entries],
        "expires_at": [e["expires_at"] for e in entries],
    }
    expect(len(entries) == 1 and entries[0]["text"] == facts[0], "subject_cannot_see_own_entry")
    entry_id = entries[0]["id"]

    since = len(run.recorder.exchanges)
    peer_control, operator = run.control(peer), run.control(operator=True)
    attempts = {
        "peer_inspect": peer_control.inspect(scope.scope_id, run.context(peer, agent, scope.room)),
        "peer_status": peer_control.status(scope.scope_id),
        "peer_forget": peer_control.forget(scope.scope_id, entry_id),
        "operator_inspect": operator.inspect(scope.scope_id, run.context(subject, agent, scope.room)),
        "operator_forget": operator.forget(scope.scope_id, entry_id),
    }
    for name, pending in attempts.items():
        ev[name] = refused = await refusal(pending)
        expect(refused["reason"] == "not_subject", f"{name}_not_refused")

    control = run.control(subject)
    ev["missing_context"] = refused = await refusal(control.call("GET", f"/v1/scopes/{scope.scope_id}/entries"))
    expect(refused["reason"] == "context_missing", "inspect_without_context_not_refused")
    intruder = run.subject("c2-intruder")
    drifted = run.context(subject, agent, scope.room, members=[subject, run.target.bridge_bot, agent.ghost, intruder])
    ev["room_drift"] = refused = await refusal(control.inspect(scope.scope_id, drifted))
    expect(refused["reason"] == "room_state_invalid", "inspect_in_drifted_room_not_refused")
    replayed = run.context(subject, agent, scope.room)
    with Recorder.content_channel():
        await control.inspect(scope.scope_id, replayed)
    ev["replayed_context"] = refused = await refusal(control.inspect(scope.scope_id, replayed))
    expect(refused["reason"] == "context_replayed", "replayed_context_not_refused")

    leaked = find_leaks(sentinel, run.recorder.texts(since))
    ev["refusals_carrying_content"] = len(leaked)
    expect(not leaked, "refusal_carried_content")
