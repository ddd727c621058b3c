"""The code floor (SPEC D5): the non-negotiables that hold even under a permit-all pack.

It runs after the engine, reads limits and partners from the loaded pack rather than from the
decision input, and can only narrow: it turns a forward into a denial or adds reasons to a
denial, and clamps obligations to the limits. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.identity.mxid import Origin
from sidecar.policy.model import Decision, DecisionInput, Federation, Limits, Obligations, Operation
from sidecar.policy.outcome import KEYED, SAVES, SEARCHES, deny_action, memory_work, scoped
from sidecar.policy.pack import is_complete
from sidecar.reasons import Action, Reason


def _origin_admitted(inp: DecisionInput, federation: Federation) -> bool:
    if inp.principal is None:
        return inp.scope is None or inp.scope.origin is Origin.NATIVE
    p = inp.principal
    if p.origin is Origin.NATIVE:
        return True
    return any(
        is_complete(rec) and rec.server_name == p.server_name and p.origin in rec.origins for rec in federation.partners
    )


def _consent(inp: DecisionInput) -> set[Reason]:
    if inp.scope is None:
        return {Reason.CONSENT_MISSING}
    found = set() if inp.scope.enabled else {Reason.CONSENT_DISABLED}
    if inp.operation in KEYED:
        # SECURITY: every keyed read and write carries the current generation.
        if inp.request.presented_generation != inp.scope.generation:
            found.add(Reason.STALE_GENERATION)
        if not (inp.request.key_valid and inp.request.user_id_matches):
            found.add(Reason.KEY_INVALID)
    return found


def _sizes(inp: DecisionInput, limits: Limits) -> set[Reason]:
    found: set[Reason] = set()
    req = inp.request
    if inp.operation in SAVES:
        if req.max_item_bytes > limits.max_fact_bytes:
            found.add(Reason.FACT_TOO_LARGE)
        if inp.entries.count + req.item_count > min(inp.entries.cap, limits.max_entries):
            found.add(Reason.ENTRY_CAP_REACHED)
    if inp.operation in (Operation.MEMORY_SAVE_BATCH, Operation.EMBEDDING) and req.item_count > limits.max_batch_facts:
        found.add(Reason.BATCH_TOO_LARGE)
    # Every embedding item may be a prefetch query (its search carries only a vector), so both bounds apply.
    item_bytes = min(limits.embedding_item_bytes, limits.prefetch_query_bytes)
    if inp.operation is Operation.EMBEDDING and req.max_item_bytes > item_bytes:
        found.add(Reason.EMBEDDING_ITEM_TOO_LARGE)
    return found


def _budget(inp: DecisionInput, limits: Limits, org: Mapping[str, list[str]]) -> set[Reason]:
    b = inp.budget
    found: set[Reason] = set()
    if not b.rate_ok:
        found.add(Reason.RATE_LIMITED)
    ref = inp.agent.ref if inp.agent else None
    over = b.hourly_operations_used > limits.agent_cap(
        "hourly_operations", ref, org
    ) or b.embedding_items_used > limits.agent_cap("embedding_items_per_agent_hour", ref, org)
    if not (b.hourly_ok and b.embedding_ok) or over:
        found.add(Reason.HOURLY_BUDGET_EXHAUSTED)
    if not b.prefetch_ok:
        found.add(Reason.PREFETCH_LIMIT)
    return found


def floor_reasons(
    inp: DecisionInput, limits: Limits, federation: Federation, org: Mapping[str, list[str]]
) -> set[Reason]:
    """Reasons the floor refuses this input for, whatever the engine said (``org``: the pack's lists)."""
    if inp.operation is Operation.MEMORY_UNGOVERNED:
        return {Reason.UNGOVERNED_STORE}
    if inp.operation is Operation.CONTROLLER_WRITE:
        write = inp.request.write
        # SECURITY: a definition that claims memgov's identity or boundary (or whose claims were never
        # read) is never relayed, whoever sends it and whatever the pack says (docs/security.md).
        return {Reason.BOUNDARY_CLAIMED} if write is None or write.claims else set()
    if inp.operation is Operation.SESSION_SHARE:
        share = inp.request.share
        # SECURITY: a memory agent's conversation holds recalled memory; a link to it (or a share of
        # a session whose owner kagent did not show) would hand that to whoever opens it.
        return set() if share is not None and share.owner == "user" else {Reason.SHARE_REFUSED}
    found: set[Reason] = set()
    if scoped(inp):
        found |= _consent(inp)
        if not _origin_admitted(inp, federation):
            found.add(Reason.ORIGIN_NOT_ALLOWED)
    if memory_work(inp):
        found |= _budget(inp, limits, org)
    found |= _sizes(inp, limits)
    return found


def _clamp(ob: Obligations, limits: Limits, operation: Operation) -> Obligations:
    # A forwarded save always carries a ttl and a forwarded search a limit, both within the limits.
    ttl = ob.ttl_days if ob.ttl_days is not None else (limits.max_days if operation in SAVES else None)
    top = ob.max_limit if ob.max_limit is not None else (limits.search_max_limit if operation in SEARCHES else None)
    return Obligations(
        ttl_days=None if ttl is None else max(1, min(ttl, limits.max_days)),
        max_limit=None if top is None else max(1, min(top, limits.search_max_limit)),
    )


def apply_floor(
    decision: Decision, inp: DecisionInput, limits: Limits, federation: Federation, org: Mapping[str, list[str]]
) -> Decision:
    """Narrow an engine decision to the floor; never widens it."""
    refused = floor_reasons(inp, limits, federation, org)
    if not refused:
        return decision.model_copy(update={"obligations": _clamp(decision.obligations, limits, inp.operation)})
    kept = set() if decision.action is Action.FORWARD else set(decision.reasons)
    return decision.model_copy(
        update={
            "action": deny_action(inp.operation),
            "reasons": sorted(kept | refused),
            "obligations": Obligations(),
        }
    )
