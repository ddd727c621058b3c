"""Content-free erasure evidence (SPEC R-15, D4): what was erased, how, when, and what remains.

The record is assembled from the durable erasure row, its read-backs and the ledger stamps of
its entries, so it is the same whichever replica serves it and whenever it is fetched: an entry
forgotten over REST reads ``pending_namespace_clear`` until its namespace is cleared, then
``complete``. ``physically_absent`` is derived only from read-backs: true when every namespace
(or every forgotten id) was read back with nothing left, never from a delete having been sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sidecar.state.types import (
    ERASURE_TERMINAL,
    WHOLE_SCOPE,
    Erasure,
    ErasureKind,
    ErasureState,
    LedgerEntry,
    Namespace,
)

FORMAT = "memgov.erasure.v1"

#: What no memgov erasure reaches, stated on every record (see docs/control-api.md).
ALWAYS_RESIDUAL = ("database_backups", "delivered_inspect_pages", "rows_written_around_memgov")


def iso(when: datetime | None) -> str | None:
    """RFC 3339 UTC with microseconds, or None."""
    return None if when is None else when.isoformat().replace("+00:00", "Z")


def _entry(entry_id: str, e: LedgerEntry | None) -> dict[str, object]:
    return {
        "entry_id": entry_id,
        "generation": None if e is None else e.generation,
        "tombstoned_at": None if e is None else iso(e.tombstoned_at),
        "physically_deleted_at": None if e is None else iso(e.physically_deleted_at),
        "verified_at": None if e is None else iso(e.verified_at),
    }


def physical_state(erasure: Erasure, entries: list[LedgerEntry | None]) -> str:
    """``complete``, ``pending_namespace_clear``, ``in_progress`` or ``incomplete`` (failed)."""
    if erasure.state is ErasureState.FAILED:
        return "incomplete"
    if erasure.state not in ERASURE_TERMINAL:
        return "in_progress"
    if erasure.kind in WHOLE_SCOPE or all(e is None or e.physically_deleted_at is not None for e in entries):
        return "complete"
    return "pending_namespace_clear"


def _read_back_clean(erasure: Erasure, entries: list[LedgerEntry | None], namespaces: list[Namespace]) -> bool:
    """True only when read-backs cover everything the erasure claims and every one found nothing."""
    # A rotation also reads back the namespace it moved entries into: finding them there is the point.
    emptied = [(ns_id, n) for ns_id, _, n, check in erasure.readbacks if check != "moved"]
    if erasure.state is not ErasureState.VERIFIED or any(n for _, n in emptied):
        return False
    read = {ns_id for ns_id, _ in emptied}
    if erasure.kind in WHOLE_SCOPE:
        # Every namespace the scope had before the erasure, except the one it writes to now.
        wanted = {
            n.ns_id
            for n in namespaces
            if n.state != "live" and n.created_at is not None and n.created_at <= erasure.created_at
        }
        return wanted <= read
    if erasure.kind is ErasureKind.ROTATE:
        # The namespace it rotated away from (and every entry it erased was stamped from that read-back).
        frozen = _frozen(erasure, namespaces)
        return bool(frozen) and frozen <= read and all(e is not None and e.verified_at is not None for e in entries)
    # A forgotten entry is stamped verified only after a read-back found it gone (this erasure's
    # own, or the sweeper's when its namespace was cleared later).
    return bool(entries) and all(e is not None and e.verified_at is not None for e in entries)


def _frozen(erasure: Erasure, namespaces: list[Namespace]) -> set[str]:
    """The namespace a rotation moved away from, as the rotation recorded it (its row may be compacted)."""
    if erasure.from_ns_id is not None:
        return {erasure.from_ns_id}
    return {n.ns_id for n in namespaces if n.frozen_by == erasure.erasure_id}


def _rotation(erasure: Erasure, namespaces: list[Namespace]) -> dict[str, object] | None:
    """What a rotation moved where: both namespaces and every old -> new entry id."""
    if erasure.kind is not ErasureKind.ROTATE:
        return None
    frozen = min(_frozen(erasure, namespaces), default=None)
    return {
        "from_namespace": frozen,
        "to_namespace": erasure.ns_id,
        "moved": [{"from_entry_id": old, "to_entry_id": new} for old, new in erasure.moves if new is not None],
        "not_found_in_kagent": [old for old, new in erasure.moves if new is None],
    }


def _rotated_by(erasure: Erasure, rotations: Sequence[Erasure]) -> dict[str, object] | None:
    """For forget-one: the rotation that physically removed its entries, else the latest attempt since."""
    if erasure.kind is not ErasureKind.FORGET_ONE:
        return None
    later = [r for r in rotations if r.created_at >= erasure.created_at]  # newest first
    done = next(
        (r for r in later if r.state is ErasureState.VERIFIED and set(r.entry_ids) & set(erasure.entry_ids)), None
    )
    chosen = done or (later[0] if later else None)
    if chosen is None:
        return None
    return {"erasure_id": chosen.erasure_id, "state": chosen.state, "failure_reason": chosen.failure_reason}


def build_evidence(
    erasure: Erasure, ledger: list[LedgerEntry], namespaces: list[Namespace], rotations: Sequence[Erasure] = ()
) -> dict[str, object]:
    """The exportable evidence record of one erasure; ``ledger``, ``namespaces`` and ``rotations``
    (newest first) are the scope's."""
    by_id = {e.entry_id: e for e in ledger}
    entries = [by_id.get(i) for i in erasure.entry_ids]
    physical = physical_state(erasure, entries)
    verified = erasure.state is ErasureState.VERIFIED
    absent = _read_back_clean(erasure, entries, namespaces)
    if physical == "complete" and not absent:
        physical = "unverified"
    residuals = list(ALWAYS_RESIDUAL)
    if physical == "pending_namespace_clear":
        residuals.insert(0, "pending_namespace_clear")
    # A read-back keeps its namespace's facts; the namespace row itself may be compacted since.
    facts = {**erasure.ns_facts, **{n.ns_id: (n.generation, n.legacy) for n in namespaces}}
    return {
        "format": FORMAT,
        "erasure_id": erasure.erasure_id,
        "scope_id": erasure.scope_id,
        "kind": erasure.kind,
        "state": erasure.state,
        "adapter": erasure.adapter,
        "requested_by": erasure.requested_by_kind,
        "created_at": iso(erasure.created_at),
        "updated_at": iso(erasure.updated_at),
        "failure_reason": erasure.failure_reason,
        "not_before": iso(erasure.not_before),
        "steps": [{"state": state, "at": iso(at)} for state, at in erasure.steps],
        "entries": [_entry(i, e) for i, e in zip(erasure.entry_ids, entries, strict=True)],
        "read_back": [
            {
                "namespace_id": ns_id,
                "generation": facts[ns_id][0] if ns_id in facts else None,
                "legacy": facts[ns_id][1] if ns_id in facts else None,
                "check": check,
                "at": iso(at),
                "rows_found": found,
            }
            for ns_id, at, found, check in erasure.readbacks
        ],
        "verification": {
            "result": "passed" if verified else ("failed" if erasure.state is ErasureState.FAILED else "pending"),
            # Past the fence step nothing of it is served: tombstoned, stale or disabled.
            "readable_through_memgov": None if erasure.state is ErasureState.REQUESTED else False,
            "physically_absent": True
            if absent
            else (False if verified or erasure.state is ErasureState.FAILED else None),
            "rechecked_after_possible_write": erasure.not_before is not None and verified,
        },
        "physical_deletion": physical,
        "residuals": residuals,
        "rotation": _rotation(erasure, namespaces),
        "rotated_by": _rotated_by(erasure, rotations),
    }
