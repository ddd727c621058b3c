"""Records the state store returns, the budget claim it accepts, and its errors.

Error tree (every error carries a :class:`~sidecar.reasons.Reason` in ``reason``; the message is
that code and nothing else, so no stored or requested value can surface through it)::

    StateError            backend unreachable or failing (state_unavailable), an unknown record (not_found),
    │                     a fence (consent_missing | consent_disabled | stale_generation), a full scope
    │                     (entry_cap_reached)
    └── RunTaken          another runner holds the erasure (its caller stops, changing nothing)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final, Literal

from sidecar.identity.keys import storage_key
from sidecar.reasons import Reason
from sidecar.settings import AdapterName

ReceiptAction = Literal["grant", "withdraw"]
BudgetKind = Literal["bucket", "window", "counter"]


class ErasureState(StrEnum):
    """Where an erasure is. It walks them in this order; ``failed`` is reachable from any unfinished
    state and, like ``verified``, is terminal. Stored as the value."""

    REQUESTED = "requested"
    FENCED = "fenced"
    QUIESCED = "quiesced"
    DELETED = "deleted"
    VERIFIED = "verified"
    FAILED = "failed"


class ErasureKind(StrEnum):
    """What an erasure erases, and how it fences the scope first."""

    FORGET_ONE = "forget_one"
    FORGET_ALL = "forget_all"
    OFF = "off"
    WITHDRAW = "withdraw"
    OFFBOARD = "offboard"
    ROTATE = "rotate"


#: Kinds that erase every entry of a scope (and fence it by retiring its live namespace first).
WHOLE_SCOPE: Final = frozenset({ErasureKind.FORGET_ALL, ErasureKind.OFF, ErasureKind.WITHDRAW, ErasureKind.OFFBOARD})


#: The one transition table: every state an erasure may move to from each state.
ERASURE_NEXT: dict[ErasureState, frozenset[ErasureState]] = {
    ErasureState.REQUESTED: frozenset({ErasureState.FENCED, ErasureState.FAILED}),
    ErasureState.FENCED: frozenset({ErasureState.QUIESCED, ErasureState.FAILED}),
    ErasureState.QUIESCED: frozenset({ErasureState.DELETED, ErasureState.FAILED}),
    ErasureState.DELETED: frozenset({ErasureState.VERIFIED, ErasureState.FAILED}),
    ErasureState.VERIFIED: frozenset(),
    ErasureState.FAILED: frozenset(),
}
ERASURE_STATES: tuple[str, ...] = tuple(ErasureState)
ERASURE_TERMINAL: frozenset[ErasureState] = frozenset(s for s, nxt in ERASURE_NEXT.items() if not nxt)
#: Each unfinished state's step forward when nothing fails (derived from the table).
ERASURE_FORWARD: dict[ErasureState, ErasureState] = {
    s: next(iter(nxt - {ErasureState.FAILED})) for s, nxt in ERASURE_NEXT.items() if nxt
}
#: The terminal states as an SQL list, for ``state NOT IN (...)`` (fixed names, never input).
ERASURE_TERMINAL_SQL: str = ", ".join(f"'{s}'" for s in sorted(ERASURE_TERMINAL))


class StateError(Exception):
    """The state store could not do what was asked; ``reason`` says why, as a code."""

    def __init__(self, reason: Reason = Reason.STATE_UNAVAILABLE) -> None:
        super().__init__(reason.value)
        self.reason = reason


class SchemaMismatch(Exception):
    """The database's schema is not one this binary runs on: migrated by a newer release that this
    one cannot follow, or (when this process does not migrate) not yet migrated to this release, or
    (:class:`MigrationFailed`) its migration was refused by the store."""

    #: The exit code of a command that stops on it (`memgov serve`, `memgov state migrate | check`).
    EXIT_CODE = 3

    def __init__(self, found: int, supported: int) -> None:
        super().__init__(f"state schema version {found}, this release runs on {supported}")
        self.found, self.supported = found, supported

    @property
    def newer(self) -> bool:
        return self.found > self.supported

    @property
    def event(self) -> str:
        """The log event that reports it."""
        return "state.schema_unknown" if self.newer else "state.schema_not_migrated"

    def fields(self) -> dict[str, int | str]:
        """The log fields that go with :attr:`event`: content-free versions and codes only."""
        return {"schema_version": self.found, "supported": self.supported}


class MigrationFailed(SchemaMismatch):
    """The store answered but refused a migration statement (a missing privilege, a full disk, a lock
    that timed out): nothing of the run was applied, the schema stays at ``found``.

    ``migration`` is the version whose statement failed; ``code`` is the backend's error class,
    never its message (PostgreSQL's SQLSTATE such as ``42501``, or SQLite's result name such as
    ``SQLITE_FULL``), so an operator can act on it and no stored or statement text can leak.
    """

    EXIT_CODE = 4

    def __init__(self, found: int, supported: int, migration: int, code: str) -> None:
        super().__init__(found, supported)
        self.migration, self.code = migration, code

    @property
    def event(self) -> str:
        return "state.migration_failed"

    def fields(self) -> dict[str, int | str]:
        return {**super().fields(), "migration": self.migration, "error_code": self.code}


class RunTaken(StateError):
    """Another runner holds this erasure now (its run lease), or replaced the rotation's staged namespace:
    the caller stops without changing anything more; the other runner finishes the erasure."""

    def __init__(self) -> None:
        super().__init__(Reason.ERASURE_PENDING)


NamespaceState = Literal["live", "retired", "cleared", "staged"]


@dataclass(frozen=True, slots=True)
class Namespace:
    """One kagent storage namespace of a scope (SPEC D2): written while ``live``, never again after.

    ``salt`` is empty for a ``legacy`` namespace written before salted keys existed.
    ``possibly_until`` is set while a write of unknown outcome may still land in it (D4).
    ``staged`` namespaces belong to the rotation ``rotation_id`` alone until it switches the
    scope to them; ``frozen_by`` names the rotation copying a live namespace (no save may write it).
    """

    ns_id: str
    scope_id: str
    generation: int
    salt: str
    state: NamespaceState
    possibly_until: datetime | None = None
    created_at: datetime | None = None
    retired_at: datetime | None = None
    cleared_at: datetime | None = None
    frozen_by: str | None = None
    rotation_id: str | None = None

    @property
    def storage_key(self) -> str:
        """The kagent ``user_id`` of this namespace."""
        return storage_key(self.scope_id, self.generation, self.salt)

    @property
    def legacy(self) -> bool:
        return not self.salt


@dataclass(frozen=True, slots=True)
class Scope:
    """A typed (principal, agent, scope) triple with its consent state."""

    scope_id: str
    principal_mxid: str
    origin: str
    agent: str
    kind: str
    room_id: str
    enabled: bool
    generation: int
    purpose: str | None
    policy_version: str | None
    created_at: datetime
    updated_at: datetime
    consented_at: datetime | None
    #: The live namespace; None while the scope is disabled (nothing may be written then).
    namespace: Namespace | None = None


@dataclass(frozen=True, slots=True)
class Receipt:
    """One append-only consent change; ``purpose`` is the scope's last consented purpose."""

    receipt_id: str
    scope_id: str
    action: ReceiptAction
    purpose: str
    policy_version: str
    generation_after: int
    at: datetime


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """An entry id the gateway let kagent create, with its immutable hard expiry."""

    entry_id: str
    scope_id: str
    generation: int
    created_at: datetime
    expires_at: datetime
    tombstoned_at: datetime | None
    physically_deleted_at: datetime | None
    verified_at: datetime | None
    ns_id: str | None = None


@dataclass(frozen=True, slots=True)
class Erasure:
    """A crash-resumable erasure: its current state and every state it passed through."""

    erasure_id: str
    scope_id: str
    kind: ErasureKind
    state: ErasureState
    entry_ids: list[str]
    steps: list[tuple[str, datetime]]
    failure_reason: str | None
    adapter: AdapterName
    requested_by_kind: str
    created_at: datetime
    updated_at: datetime
    #: While set, verification waits until then (a write of unknown outcome may still land).
    not_before: datetime | None = None
    #: Every read-back of the erasure: (ns_id, at, rows found, "namespace", "entries" or "moved").
    readbacks: list[tuple[str, datetime, int, str]] = field(default_factory=list)
    #: A rotation: the namespace it switched the scope to (None until then).
    ns_id: str | None = None
    #: A rotation: every entry it copied, (old id, new id or None when kagent no longer held it).
    moves: list[tuple[str, str | None]] = field(default_factory=list)
    #: What each read-back's namespace was when it was read: ns_id -> (generation, legacy).
    ns_facts: dict[str, tuple[int, bool]] = field(default_factory=dict)
    #: A rotation: the live namespace it froze and moved away from (None until frozen).
    from_ns_id: str | None = None
    #: A retry: the failed erasure its chain of retries began with (None: not a retry).
    retry_of: str | None = None


@dataclass(frozen=True, slots=True)
class ErasureSummary:
    """One erasure as an operator lists it: ids, kind, state, reason code and times; never its entries."""

    erasure_id: str
    scope_id: str
    kind: ErasureKind
    state: ErasureState
    adapter: AdapterName
    requested_by_kind: str
    failure_reason: str | None
    created_at: datetime
    updated_at: datetime
    retry_of: str | None
    #: A failed erasure: the later verified erasure that covers it (None while nothing does).
    superseded_by: str | None


@dataclass(frozen=True, slots=True)
class ErasureFilter:
    """Which erasures a listing returns (every field optional), newest first, after ``cursor``."""

    state: ErasureState | None = None
    kind: ErasureKind | None = None
    scope_id: str | None = None
    #: Created at or after ``since`` and before ``until``.
    since: datetime | None = None
    until: datetime | None = None
    #: True: only failures a later verified erasure covers; False: everything else.
    superseded: bool | None = None


@dataclass(frozen=True, slots=True)
class BudgetClaim:
    """One unit of cost to reserve; ``reason`` is the code reported when this claim is refused.

    ``bucket``: token bucket with capacity ``limit`` refilled at ``refill_per_s``;
    ``window``: at most ``limit`` per fixed window of ``window_s`` seconds;
    ``counter``: at most ``limit`` until ``ttl_s`` seconds after the first use.
    """

    kind: BudgetKind
    key: str
    limit: int
    cost: int = 1
    refill_per_s: float = 0.0
    window_s: int = 3600
    ttl_s: int = 0
    reason: str = Reason.RATE_LIMITED.value


#: The encodings an OpenAI-compatible provider answers in (and the only ones memgov relays or records).
ENCODINGS: Final = frozenset({"float", "base64"})


#: Budget claims of a live scope, given its prefetch window id (None outside a window).
Claims = Callable[[Scope, str | None], list[BudgetClaim]]


@dataclass(frozen=True, slots=True)
class Admission:
    """What one admission transaction saw and reserved.

    ``live``: the scope exists, is enabled at the presented generation and has a live namespace.
    ``refused``: the reason of the budget claim that did not fit (nothing was reserved then).
    ``live_count``: the scope's live entries, for the decision (counted up to the cap + 1).
    ``window``: the prefetch window id.
    ``slots``/``op_id``: the ledger slots and in-flight record of an admitted save.
    ``blocked``: why an admitted save got no slots (the cap with pending slots, or a rotation
    copying the namespace); the call is refused with it if the policy allows.
    ``levels``: each reserved claim's level after it, by claim key (empty when nothing was reserved).
    """

    scope: Scope | None
    live: bool = False
    refused: str | None = None
    live_count: int = 0
    window: str | None = None
    slots: list[str] = field(default_factory=list)
    op_id: str | None = None
    blocked: Reason | None = None
    levels: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WriteAsk:
    """A save's part of an admission: ``n`` slots under ``cap``, an in-flight lease of ``lease_s``."""

    n: int
    cap: int
    lease_s: float
