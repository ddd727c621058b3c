"""Checks: exact one-entry erase, disable-and-clear, offboarding enumeration (ADR items 11-17 and 37, SPEC R-6, R-7)."""

from __future__ import annotations

from typing import Any

from sidecar.drill.actors import DrillRun, Scope, refusal
from sidecar.drill.checks_consent import CONSENT_REFUSALS
from sidecar.drill.result import Evidence, expect
from sidecar.reasons import Reason
from sidecar.settings import AdapterName


def physical_after_forget(record: dict[str, Any]) -> str:
    """What a forget-one erasure may honestly report (SPEC D4): ``kagent-db`` deletes by id; ``rest`` is exact
    when it rotated the namespace (an embedding provider configured), else pending until the namespace is cleared."""
    if record.get("adapter") == AdapterName.KAGENT_DB or record.get("rotated_by") is not None:
        return "complete"
    return "pending_namespace_clear"


def _record(record: dict[str, Any]) -> dict[str, object]:
    """The evidence form of an erasure record: ids, states, timestamps."""
    return {
        "erasure_id": record.get("erasure_id"),
        "kind": record.get("kind"),
        "state": record.get("state"),
        "adapter": record.get("adapter"),
        "physical_deletion": record.get("physical_deletion"),
        "verification": record.get("verification"),
        "entries": [e.get("entry_id") for e in record.get("entries", [])],
        "steps": [s.get("state") for s in record.get("steps", [])],
    }


async def _gone(run: DrillRun, scope: Scope, stale_key: str, ev: Evidence) -> None:
    """A key of an erased, disabled scope neither writes nor reads, and kagent holds nothing for it."""
    saved = await run.save(stale_key, run.fact("stale"), app=scope.agent.app)
    ev["stale_save"] = saved.brief()
    expect(saved.status == 403 and saved.reason in CONSENT_REFUSALS, "stale_key_save_not_refused")
    found = await run.search(stale_key, app=scope.agent.app)
    ev["stale_search"] = {**found.brief(), "results": len(found.ids())}
    expect(not found.ids() and found.decision.action != "forward", "stale_key_search_not_empty")
    if run.local is not None:
        ev["kagent_rows"] = await run.local.kagent_rows(scope.scope_id)
        expect(ev["kagent_rows"] == 0, "rows_left_in_kagent")


async def exact_one_entry_erase(run: DrillRun, ev: Evidence) -> None:
    """Forgetting one entry erases exactly that entry, verified; the other stays readable."""
    subject = run.subject("c3")
    scope = await run.new_scope(subject)
    facts = await run.remember(scope, 2, "c3")
    ev["scope_id"] = scope.scope_id
    entries = await run.inspect_all(scope)
    by_text = {e["text"]: e["id"] for e in entries}
    expect(len(entries) == 2 and set(by_text) == set(facts), "saved_entries_not_inspectable", entries=len(entries))
    forgotten, kept = by_text[facts[0]], by_text[facts[1]]
    ev["forgotten"], ev["kept"] = forgotten, kept

    control = run.control(subject)
    record = await control.forget(scope.scope_id, forgotten)
    ev["erasure"] = erased = _record(record)
    adapter = record.get("adapter")
    rotation = record.get("rotated_by")
    ev["rotation"] = rotation
    if isinstance(rotation, dict) and rotation.get("failure_reason") == Reason.EMBEDDING_MODEL_UNKNOWN.value:
        ev.note(
            "The rotation knew no embedding model for this agent, and memgov takes it only from its configuration: "
            "declare agents.<namespace/name>.memory.modelConfig in the chart values (with its modelConfigs entry) "
            "as the Agent declares it in kagent, or set embedding_model in the agent's settings."
        )
        expect(False, "embedding_model_not_configured", agent=scope.agent.ref)
    expect(record.get("state") == "verified" and record["verification"]["result"] == "passed", "erasure_not_verified")
    expect(erased["entries"] == [forgotten], "erasure_not_exactly_one_entry")
    if rotation is not None:
        # The deployment rotates namespaces: a rotation that did not finish is a failure, with its reason shown.
        expect(rotation.get("state") == "verified", "rotation_not_verified")
    expect(record.get("physical_deletion") == physical_after_forget(record), "physical_deletion_misreported")
    if adapter == AdapterName.REST and rotation is not None:
        ev.note(
            "REST adapter with an embedding provider: the scope's namespace was rotated (the other entry "
            "re-saved under a fresh storage key, the old namespace deleted whole and read back empty), so "
            "the forgotten row is physically gone."
        )
    elif adapter == AdapterName.REST:
        ev.note(
            "REST adapter without an embedding provider: the forgotten entry is tombstoned and unreadable at "
            "once; kagent keeps the row until the whole namespace is cleared, as the evidence record states."
        )

    after = await run.inspect_all(scope)
    ev["inspect_after"] = [e["id"] for e in after]
    # A rotation re-saves the kept entry under a new id; its text is what must be exactly left.
    expect(len(after) == 1 and after[0]["text"] == facts[1], "kept_entry_not_exactly_left")
    kept = after[0]["id"] if after else kept
    found = await run.search(run.key(scope), app=scope.agent.app, owner=True)
    ev["search_after"] = {**found.brief(), "ids": found.ids()}
    expect(found.decision.action == "forward", "search_not_forwarded")
    expect(forgotten not in found.ids() and kept in found.ids(), "forgotten_entry_readable")

    fetched = await control.erasure(record["erasure_id"])
    ev["evidence_format"] = fetched.get("format")
    expect(
        fetched.get("state") == "verified" and fetched.get("format") == "memgov.erasure.v1",
        "evidence_record_unavailable",
    )
    ev["forget_again"] = refused = await refusal(control.forget(scope.scope_id, forgotten))
    expect(refused["reason"] == "not_found", "forgotten_entry_still_known")


async def disable_and_clear(run: DrillRun, ev: Evidence) -> None:
    """Off needs a confirmation, disables the scope, clears every entry, and refuses the old key."""
    subject = run.subject("c4")
    scope = await run.new_scope(subject)
    await run.remember(scope, 2, "c4")
    stale_key = run.key(scope)
    ev["scope_id"] = scope.scope_id
    control = run.control(subject)

    issued = await control.confirmed(scope.scope_id, "off")
    ev["confirmation"] = {"issued": bool(issued.get("confirm_token")), "expires_at": issued.get("expires_at")}
    ev["wrong_confirmation"] = refused = await refusal(
        control.confirmed(scope.scope_id, "off", "memgov-drill-wrong-token")
    )
    expect(refused["reason"] == "confirmation_required", "off_without_valid_confirmation_ran")
    unchanged = await run.status(scope)
    expect(unchanged["enabled"] and unchanged["entries"]["live"] == 2, "scope_changed_before_confirmation")

    record = await control.confirmed(scope.scope_id, "off", issued["confirm_token"])
    ev["erasure"] = _record(record)
    expect(record.get("kind") == "off" and record.get("state") == "verified", "off_not_verified")
    status = await run.status(scope)
    ev["status"] = {"enabled": status["enabled"], "generation": status["generation"], **status["entries"]}
    expect(
        not status["enabled"]
        and status["entries"]["live"] == 0
        and status["entries"]["pending_physical_deletion"] == 0,
        "scope_not_disabled_and_cleared",
    )

    invoked = await run.invoke(scope.agent, run.context(subject, scope.agent, scope.room), user=subject)
    ev["invoke_after"] = invoked.decision.brief()
    expect(invoked.decision.action == "rewrite_disabled", "invoke_after_off_not_rewritten")
    await _gone(run, scope, stale_key, ev)


async def offboarding_enumeration(run: DrillRun, ev: Evidence) -> None:
    """An operator offboards a subject: every scope is found, disabled, cleared and verified."""
    subject = run.subject("c11")
    agents = run.target.agents
    scopes = [await run.new_scope(subject, agents[0]), await run.new_scope(subject, agents[-1])]
    for scope in scopes:
        await run.remember(scope, 1, "c11")
    keys = {s.scope_id: run.key(s) for s in scopes}
    ev["created"] = sorted(keys)

    ev["subject_offboard"] = refused = await refusal(run.control(subject).offboard(subject))
    expect(refused["reason"] == "route_denied", "subject_may_offboard")
    result = await run.control(operator=True).offboard(subject)
    per_scope = {s["scope_id"]: s for s in result.get("scopes", [])}
    ev["complete"] = result.get("complete")
    ev["scopes"] = [
        {k: s.get(k) for k in ("scope_id", "agent", "erasure_id", "state", "physical_deletion")}
        for s in result.get("scopes", [])
    ]
    expect(set(keys) <= set(per_scope), "scope_not_enumerated")
    expect(
        result.get("complete") is True and all(s["state"] == "verified" for s in per_scope.values()),
        "offboarding_not_verified",
    )
    for scope in scopes:
        status = await run.status(scope)
        expect(
            not status["enabled"] and status["entries"]["live"] == 0,
            "offboarded_scope_not_cleared",
            scope_id=scope.scope_id,
        )
        await _gone(run, scope, keys[scope.scope_id], Evidence())
    ev["stale_keys_refused"] = len(keys)
