"""Stable reason codes, their HTTP statuses, the one refusal exception and the only error body.

Every denial, rewrite and failure memgov reports names exactly one of these codes. Error bodies
are assembled from the enum and opaque ids only, so no request, memory or upstream text can
reach a client through an error (SPEC D7).

A handler on either plane refuses by raising :class:`Refusal`; the plane's middleware records it
(log, metric, audit row or refusal count) and answers ``error_body`` with its status::

    Refusal(reason)                  status from STATUS (403 for codes not listed)
      └── decide.respond.Denied      a policy decision's refusal, already recorded: 403 (SPEC D6)

A policy pack may declare further codes for its own rules (``data/reasons.yaml``); the runtime
registers them with :func:`declare` before the pack goes live. A declared code is a
:class:`DeclaredCode` (``Reason`` itself never changes); :func:`code` reads either kind, and a
declared code stays accepted until the process ends, so a decision made by the previous pack can
still be answered and audited. Declared codes are operator-reviewed identifiers of a fixed shape
and bounded number, never request text.
"""

from __future__ import annotations

import enum
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from http import HTTPStatus
from types import MappingProxyType
from typing import Final, TypeAlias


class Reason(enum.StrEnum):
    """Reason codes; values are the wire form and never change once released."""

    # consent and fencing
    CONSENT_MISSING = "consent_missing"
    CONSENT_DISABLED = "consent_disabled"
    STALE_GENERATION = "stale_generation"
    KEY_INVALID = "key_invalid"
    AGENT_MISMATCH = "agent_mismatch"
    SCOPE_MISMATCH = "scope_mismatch"
    # identity, origin and audience
    PRINCIPAL_INVALID = "principal_invalid"
    ORIGIN_NOT_ALLOWED = "origin_not_allowed"
    AUDIENCE_MISMATCH = "audience_mismatch"
    ROOM_STATE_INVALID = "room_state_invalid"
    # delegation context
    CONTEXT_MISSING = "context_missing"
    CONTEXT_INVALID = "context_invalid"
    CONTEXT_EXPIRED = "context_expired"
    CONTEXT_REPLAYED = "context_replayed"
    # limits and budgets
    ENTRY_CAP_REACHED = "entry_cap_reached"
    FACT_TOO_LARGE = "fact_too_large"
    BATCH_TOO_LARGE = "batch_too_large"
    RATE_LIMITED = "rate_limited"
    HOURLY_BUDGET_EXHAUSTED = "hourly_budget_exhausted"
    PREFETCH_LIMIT = "prefetch_limit"
    EMBEDDING_ITEM_TOO_LARGE = "embedding_item_too_large"
    # routes and transport
    ROUTE_DENIED = "route_denied"
    UNGOVERNED_STORE = "ungoverned_store"
    BODY_TOO_LARGE = "body_too_large"
    BODY_TIMEOUT = "body_timeout"
    CONCURRENCY_LIMITED = "concurrency_limited"
    BAD_REQUEST = "bad_request"
    NOT_FOUND = "not_found"
    UPSTREAM_ERROR = "upstream_error"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    EMBEDDING_MODEL_UNKNOWN = "embedding_model_unknown"
    # kagent's definitions (controller writes)
    OPERATOR_REQUIRED = "operator_required"
    BOUNDARY_CLAIMED = "boundary_claimed"
    # kagent's share links (v0.10)
    SHARE_REFUSED = "share_refused"
    # dependencies
    POLICY_UNAVAILABLE = "policy_unavailable"
    STATE_UNAVAILABLE = "state_unavailable"
    INTERNAL_ERROR = "internal_error"
    # control plane
    AUTH_REQUIRED = "auth_required"
    CONFIRMATION_REQUIRED = "confirmation_required"
    NOT_SUBJECT = "not_subject"
    ERASURE_FAILED = "erasure_failed"
    ERASURE_PENDING = "erasure_pending"
    ERASURE_NOT_RETRYABLE = "erasure_not_retryable"
    VERIFICATION_FAILED = "verification_failed"
    # the policy allowed the request
    ALLOWED = "allowed"


class DeclaredCode(str):
    """A reason code a loaded policy pack declared (``data/reasons.yaml``); made only by :func:`declare`.

    Spelled and used like a :class:`Reason` member (``.value`` is the wire form), so a refusal,
    error body, log line or metric label takes either kind.
    """

    __slots__ = ()

    @property
    def value(self) -> str:
        return str.__str__(self)


#: A reason code of either kind: built into memgov, or declared by a loaded pack.
Code: TypeAlias = Reason | DeclaredCode


class Action(enum.StrEnum):
    """What the gateway does with the request."""

    FORWARD = "forward"
    REWRITE_DISABLED = "rewrite_disabled"
    EMPTY_RESULT = "empty_result"
    DENY = "deny"


#: The built-in codes a policy pack's rules answer with (each has rules in both languages and
#: case rows); every other code is memgov's own, decided in code.
RULE_REASONS: Final[tuple[Reason, ...]] = (
    Reason.CONSENT_MISSING,
    Reason.CONSENT_DISABLED,
    Reason.STALE_GENERATION,
    Reason.KEY_INVALID,
    Reason.AGENT_MISMATCH,
    Reason.SCOPE_MISMATCH,
    Reason.PRINCIPAL_INVALID,
    Reason.ORIGIN_NOT_ALLOWED,
    Reason.AUDIENCE_MISMATCH,
    Reason.ROOM_STATE_INVALID,
    Reason.CONTEXT_MISSING,
    Reason.CONTEXT_INVALID,
    Reason.CONTEXT_EXPIRED,
    Reason.CONTEXT_REPLAYED,
    Reason.ENTRY_CAP_REACHED,
    Reason.FACT_TOO_LARGE,
    Reason.BATCH_TOO_LARGE,
    Reason.EMBEDDING_ITEM_TOO_LARGE,
    Reason.RATE_LIMITED,
    Reason.HOURLY_BUDGET_EXHAUSTED,
    Reason.PREFETCH_LIMIT,
    Reason.UNGOVERNED_STORE,
    Reason.OPERATOR_REQUIRED,
    Reason.BOUNDARY_CLAIMED,
    Reason.SHARE_REFUSED,
)

#: The codes built into memgov; a pack can never redefine them.
BUILT_IN: Final[frozenset[str]] = frozenset(r.value for r in Reason)
#: Shape of a declared code: a lower-case identifier, like the built-in ones.
DECLARED_CODE: Final = re.compile(r"^[a-z][a-z0-9_]{2,47}$")
#: Most codes one process accepts from packs, so metric labels and log values stay bounded.
MAX_DECLARED: Final = 64
_DECLARED: dict[str, DeclaredCode] = {}
_DECLARED_AFTER: dict[str, str] = {}


class _Codes(Set[str]):
    """Built-in codes plus the codes packs declared in this process (a live view)."""

    def __contains__(self, value: object) -> bool:
        return value in BUILT_IN or value in _DECLARED

    def __iter__(self) -> Iterator[str]:
        yield from BUILT_IN
        yield from list(_DECLARED)

    def __len__(self) -> int:
        return len(BUILT_IN) + len(_DECLARED)


REASON_VALUES: Final[Set[str]] = _Codes()


def declare(codes: Iterable[tuple[str, str]]) -> None:
    """Accept pack-declared ``(code, after)`` pairs: ``code`` ranks right after the code ``after``.

    Raises ValueError (naming the code) for a malformed code, a built-in one, an ``after`` that is
    not a known code, or when the process would accept more than MAX_DECLARED codes.
    """
    pairs = list(codes)
    new = {code for code, _ in pairs if code not in _DECLARED}
    for code, after in pairs:
        if not isinstance(code, str) or not DECLARED_CODE.fullmatch(code) or code in BUILT_IN:
            raise ValueError(f"{code!r} cannot be declared: built-in or not a lower-case identifier")
        if after not in BUILT_IN and after not in {c for c, _ in pairs} | set(_DECLARED):
            raise ValueError(f"{code}: 'after' names no known code")
    if len(_DECLARED) + len(new) > MAX_DECLARED:
        raise ValueError(f"more than {MAX_DECLARED} declared reason codes in one process")
    for code, after in pairs:
        if code not in _DECLARED:
            _DECLARED[code] = DeclaredCode(code)
        _DECLARED_AFTER[code] = after


def code(value: object) -> Code:
    """The code spelled ``value``: a built-in :class:`Reason` or a code a pack declared.

    Raises ValueError, which never quotes ``value``, for anything else.
    """
    if isinstance(value, Reason | DeclaredCode):
        return value
    if isinstance(value, str):
        if value in BUILT_IN:
            return Reason(value)
        found = _DECLARED.get(value)
        if found is not None:
            return found
    raise ValueError("not a reason code")


#: When several rules refuse one request, the header and error body name the most fundamental
#: cause: who is asking (context, key, principal) before what they may do (consent, scope, room)
#: before how much (limits, budgets).
_PRIORITY: Final[tuple[Reason, ...]] = (
    Reason.BAD_REQUEST,
    Reason.POLICY_UNAVAILABLE,
    Reason.STATE_UNAVAILABLE,
    Reason.BOUNDARY_CLAIMED,
    Reason.CONTEXT_MISSING,
    Reason.CONTEXT_EXPIRED,
    Reason.CONTEXT_REPLAYED,
    Reason.CONTEXT_INVALID,
    Reason.KEY_INVALID,
    Reason.PRINCIPAL_INVALID,
    Reason.OPERATOR_REQUIRED,
    Reason.ORIGIN_NOT_ALLOWED,
    Reason.AGENT_MISMATCH,
    Reason.CONSENT_MISSING,
    Reason.CONSENT_DISABLED,
    Reason.STALE_GENERATION,
    Reason.SCOPE_MISMATCH,
    Reason.ROOM_STATE_INVALID,
    Reason.AUDIENCE_MISMATCH,
    Reason.SHARE_REFUSED,
    Reason.ROUTE_DENIED,
    Reason.UNGOVERNED_STORE,
    Reason.BATCH_TOO_LARGE,
    Reason.FACT_TOO_LARGE,
    Reason.EMBEDDING_ITEM_TOO_LARGE,
    Reason.ENTRY_CAP_REACHED,
    Reason.PREFETCH_LIMIT,
    Reason.RATE_LIMITED,
    Reason.HOURLY_BUDGET_EXHAUSTED,
)
_RANK: Final[dict[Reason, int]] = {r: i for i, r in enumerate(_PRIORITY)}


def _rank(reason: str, seen: frozenset[str] = frozenset()) -> tuple[float, ...]:
    if reason in BUILT_IN and Reason(reason) in _RANK:
        return (_RANK[Reason(reason)],)
    after = _DECLARED_AFTER.get(reason)
    if after is None or reason in seen:
        return (float(len(_PRIORITY)),)
    # Right after its anchor, before the anchor's next built-in neighbour.
    return (*_rank(after, seen | {reason}), 0.5)


def primary(reasons: Sequence[Code]) -> Code:
    """The reason reported first when several apply (see ``_PRIORITY``); ``internal_error`` when none."""
    if not reasons:
        return Reason.INTERNAL_ERROR
    return code(min(reasons, key=lambda r: (_rank(code(r).value), code(r).value)))


#: The HTTP status a refusal answers with. Codes not listed (consent, identity, context, limits,
#: routes, pack-declared codes) answer 403; a refusal may name another status where the same code
#: means something else on one route (``Refusal(status=...)``).
STATUS: Final[Mapping[Reason, HTTPStatus]] = MappingProxyType(
    {
        Reason.BAD_REQUEST: HTTPStatus.BAD_REQUEST,
        Reason.PRINCIPAL_INVALID: HTTPStatus.BAD_REQUEST,
        Reason.AUTH_REQUIRED: HTTPStatus.UNAUTHORIZED,
        Reason.NOT_FOUND: HTTPStatus.NOT_FOUND,
        Reason.BODY_TIMEOUT: HTTPStatus.REQUEST_TIMEOUT,
        Reason.CONFIRMATION_REQUIRED: HTTPStatus.CONFLICT,
        Reason.ERASURE_PENDING: HTTPStatus.CONFLICT,
        Reason.ERASURE_NOT_RETRYABLE: HTTPStatus.CONFLICT,
        Reason.BODY_TOO_LARGE: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        Reason.CONCURRENCY_LIMITED: HTTPStatus.TOO_MANY_REQUESTS,
        Reason.INTERNAL_ERROR: HTTPStatus.INTERNAL_SERVER_ERROR,
        Reason.ERASURE_FAILED: HTTPStatus.INTERNAL_SERVER_ERROR,
        Reason.VERIFICATION_FAILED: HTTPStatus.INTERNAL_SERVER_ERROR,
        Reason.UPSTREAM_ERROR: HTTPStatus.BAD_GATEWAY,
        Reason.UPSTREAM_UNAVAILABLE: HTTPStatus.BAD_GATEWAY,
        Reason.STATE_UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    }
)


def status_of(reason: Code) -> HTTPStatus:
    """The HTTP status of a refusal with ``reason`` (see :data:`STATUS`)."""
    return STATUS.get(reason, HTTPStatus.FORBIDDEN) if isinstance(reason, Reason) else HTTPStatus.FORBIDDEN


class Refusal(Exception):
    """A request is refused with ``reason``; the plane's middleware records it and answers ``error_body``.

    Args:
        status: the answer's status when it is not the code's usual one (:func:`status_of`).
        scope_id: the scope the refusal concerns (audit rows and logs name it).
        credentialed: the caller proved a genuine credential, so the refusal gets its own audit row;
            otherwise it is only counted per hour, operation and reason (R-15).
        recorded: already logged and audited where it was decided; the middleware only answers.
        headers: response headers the answer carries (a challenge, the evidence's location).
        upstream_status: the upstream's status, named in an ``upstream_error`` body.
    """

    def __init__(
        self,
        reason: Code,
        *,
        status: HTTPStatus | None = None,
        scope_id: str | None = None,
        credentialed: bool = False,
        recorded: bool = False,
        headers: Mapping[str, str] | None = None,
        upstream_status: int | None = None,
    ) -> None:
        self.reason = code(reason)
        super().__init__(self.reason.value)
        self.status = status if status is not None else status_of(self.reason)
        self.scope_id, self.credentialed, self.recorded = scope_id, credentialed, recorded
        self.headers = dict(headers or {})
        self.upstream_status = upstream_status


class _RandomPool:
    """Bytes from the OS's random source, fetched 4 KiB at a time: one system call per 512 decision
    ids instead of one per request. Each id still takes its own 8 bytes, never shared or reused."""

    __slots__ = ("_at", "_buf", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buf, self._at = b"", 0

    def take(self, n: int) -> bytes:
        with self._lock:
            at = self._at
            if at + n > len(self._buf):
                self._buf, at = os.urandom(4096), 0
            self._at = at + n
            return self._buf[at : at + n]

    def forget(self) -> None:
        # A new lock too: the parent may have held it while forking.
        self._lock = threading.Lock()
        self._buf, self._at = b"", 0


_POOL: Final = _RandomPool()
# SECURITY: a forked worker starts with an empty pool, or it would hand out its parent's next ids.
os.register_at_fork(after_in_child=_POOL.forget)


def new_decision_id() -> str:
    """Return an opaque, unguessable id that ties a response, a log line and an audit row."""
    return "d_" + _POOL.take(8).hex()


def error_body(reason: Code, decision_id: str, *, status: int | None = None) -> bytes:
    """Serialize the only error body shape memgov emits: a reason code, an id, maybe a status."""
    body: dict[str, object] = {"error": code(reason).value, "decision_id": decision_id}
    if status is not None:
        body["status"] = int(status)
    return json.dumps(body, separators=(",", ":")).encode()
