"""Checks shared by both planes: error shape, decision header, strict JSON, sentinel sweeps.

Every check returns content-free findings (codes, statuses, header names, sentinel tags), so a
failure report can be printed and kept without carrying anything the case planted.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sidecar.dev.fuzz.wire import Reply
from sidecar.drill.sentinels import find_leaks
from sidecar.reasons import REASON_VALUES

DECISION_HEADER = "X-Memgov-Decision"
ACTIONS = frozenset({"forward", "rewrite_disabled", "empty_result", "deny"})
UPSTREAM_REASONS = frozenset({"upstream_error", "upstream_unavailable"})
DECISION_ID = re.compile(r"d_[0-9a-f]{16}")
#: Any sentinel of any case, in its plain or JSON-escaped form (tag and hex survive both).
MARKER = re.compile(r"SNTL([a-z]+)([0-9a-f]{12})")


@dataclass(frozen=True)
class Failure:
    """One broken contract: a stable kind, the route it was seen on, a content-free detail."""

    kind: str
    route: str
    detail: str = ""


@dataclass
class Outcome:
    """What one case did: the answer's status (None: no answer) and every broken contract."""

    case: Any  # sidecar.dev.fuzz.cases.Case
    status: int | None
    failures: list[Failure] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    decision_id: str


def decision_of(reply: Reply) -> Decision | None:
    """The parsed ``X-Memgov-Decision`` header, or None when absent or malformed."""
    value = reply.header(DECISION_HEADER)
    if value is None:
        return None
    action, *params = [p.strip() for p in value.split(";")]
    fields = dict(p.partition("=")[::2] for p in params)
    decision = Decision(action, fields.get("reason", ""), fields.get("id", ""))
    ok = action in ACTIONS and decision.reason in REASON_VALUES and DECISION_ID.fullmatch(decision.decision_id)
    return decision if ok else None


def reason_body(reply: Reply) -> dict[str, Any] | None:
    """The error body when it is exactly memgov's shape (``error``, ``decision_id``, maybe ``status``)."""
    ctype = (reply.header("Content-Type") or "").split(";")[0].strip()
    value, problem = strict_json(reply.body)
    if problem or ctype != "application/json" or not isinstance(value, dict):
        return None
    if not {"error", "decision_id"} <= value.keys() <= {"error", "decision_id", "status"}:
        return None
    if value["error"] not in REASON_VALUES or not isinstance(value["decision_id"], str):
        return None
    if DECISION_ID.fullmatch(value["decision_id"]) is None:
        return None
    status = value.get("status")
    if status is not None and (not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599):
        return None
    return value


def header_agrees(reply: Reply, body: dict[str, Any]) -> bool:
    """The decision header and the error body name one decision: the same id and, unless the
    decision sent the request on (to the agent or its memory-free variant) and that upstream then
    failed, the same reason."""
    decision = decision_of(reply)
    if decision is None or decision.decision_id != body["decision_id"]:
        return False
    sent_on = decision.action in ("forward", "rewrite_disabled")
    return decision.reason == body["error"] or (sent_on and body["error"] in UPSTREAM_REASONS)


class _Strict(ValueError):
    pass


def _constant(name: str) -> Any:
    raise _Strict("nonfinite_literal")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Strict("nonfinite_literal")
    return value


def strict_json(raw: bytes, read: frozenset[str] = frozenset()) -> tuple[Any, str]:
    """Parse JSON the way a careful peer must; the second item names the first problem ('' if none).

    Problems: not UTF-8, invalid JSON, a repeated key, a key that equals a field of ``read`` when
    case is ignored (what a Go decoder would take for it), NaN/Infinity or a number beyond float
    range, bytes after the value.
    """

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            raise _Strict("duplicate_key")
        folded = [k.casefold() for k in keys if k.casefold() in read]
        if len(set(folded)) != len(folded):
            raise _Strict("case_colliding_key")
        return dict(items)

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not_utf8"
    decoder = json.JSONDecoder(object_pairs_hook=pairs, parse_constant=_constant, parse_float=_float)
    try:
        value, end = decoder.raw_decode(text)
    except _Strict as exc:
        return None, str(exc)
    except (ValueError, RecursionError):
        return None, "invalid_json"
    if text[end:].strip(" \t\r\n"):
        return None, "trailing_bytes"
    return value, ""


def is_good_vector(value: Any, dim: int = 768) -> bool:
    """Exactly ``dim`` finite numbers, not all zero (SPEC R-10)."""
    if not isinstance(value, list) or len(value) != dim:
        return False
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value):
        return False
    return any(x != 0 for x in value)


def utf8_len(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def reply_text(reply: Reply) -> str:
    """Everything a client sees: status line, headers, body."""
    head = f"{reply.status} {reply.reason}\n" + "\n".join(f"{k}: {v}" for k, v in reply.headers)
    return head + "\n" + reply.body.decode("utf-8", "replace")


def leaked(sentinels: dict[str, str], texts: Iterable[str]) -> list[str]:
    """Tags of the sentinels found (in any encoded form) in the texts."""
    haystacks = [t for t in texts if t]
    return sorted(tag for tag, value in sentinels.items() if haystacks and find_leaks(value, haystacks))


def foreign_markers(text: str, allowed: set[str]) -> list[str]:
    """Tags of sentinels in ``text`` (any case's) that are not among the ``allowed`` values."""
    allowed_cores = {m.group(0) for v in allowed if (m := MARKER.search(v)) is not None}
    return sorted({m.group(1) for m in MARKER.finditer(text) if m.group(0) not in allowed_cores})
