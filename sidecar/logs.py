"""Structured JSON logging behind an allow-list sanitizer (SPEC D7).

Only known keys survive, and each known key only with a value of its declared shape: codes,
opaque ids, counts, durations, route templates. Unknown keys are dropped; a malformed event name
or any failure inside the sanitizer drops the whole event. Library log records (aiohttp, asyncio)
are reduced to their logger name and level; their message and traceback never pass.

A line emitted inside an OpenTelemetry span carries that span's ``trace_id`` and ``span_id``, so
a log line leads to its trace and back.
"""

from __future__ import annotations

import errno
import logging
import re
import sys
from collections.abc import Callable, Mapping, Set
from typing import Any, Final, TextIO

import structlog
from opentelemetry.trace import get_current_span
from structlog.typing import EventDict, Processor, WrappedLogger

from sidecar.reasons import REASON_VALUES, Action

_EVENT = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")
_OPAQUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,95}$")
_CODE = re.compile(r"^[a-z][a-z0-9_.\-/]{0,63}$")
_TEMPLATE = re.compile(r"^/[A-Za-z0-9_{}./\-]{0,127}$")
_TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,95}$")
_HEX = re.compile(r"^[0-9a-f]{1,64}$")
_ACTIONS: Final = frozenset(a.value for a in Action)
_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE", "OTHER"})
_LEVELS: Final = frozenset({"debug", "info", "warning", "error", "critical"})


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63


def _num(v: object) -> bool:
    return _int(v) or (isinstance(v, float) and v == v and abs(v) < 1e15)


def _match(rx: re.Pattern[str]) -> Callable[[object], bool]:
    return lambda v: isinstance(v, str) and rx.fullmatch(v) is not None


def _member(values: Set[str]) -> Callable[[object], bool]:
    return lambda v: isinstance(v, str) and v in values


#: A code location, "path:line:function" (never a value or a source line).
_FRAME = re.compile(r"^[A-Za-z0-9_.\-/]{1,160}:[0-9]{1,6}:[A-Za-z_<>][A-Za-z0-9_<>]{0,63}$")


def _frames(v: object) -> bool:
    return isinstance(v, (list, tuple)) and len(v) <= 16 and all(isinstance(x, str) and _FRAME.fullmatch(x) for x in v)


def _reasons(v: object) -> bool:
    return isinstance(v, (list, tuple)) and len(v) <= 16 and all(isinstance(x, str) and x in REASON_VALUES for x in v)


_opaque, _code = _match(_OPAQUE), _match(_CODE)

#: The allow-list: key -> predicate its value must satisfy.
ALLOWED: Final[dict[str, Callable[[object], bool]]] = {
    "event": _match(_EVENT),
    "level": _member(_LEVELS),
    "timestamp": _match(re.compile(r"^[0-9T:.\-+Z]{10,40}$")),
    "logger": _match(_TYPE_NAME),
    "reason": _member(REASON_VALUES),
    "reasons": _reasons,
    "action": _member(_ACTIONS),
    "shadow_action": _member(_ACTIONS),
    "operation": _code,
    "route_class": _code,
    "component": _code,
    "engine": _code,
    "adapter": _code,
    "state": _code,
    "step": _code,
    "kind": _code,
    "outcome": _code,
    "origin": _code,
    "backend": _code,
    "upstream": _code,
    "route": _match(_TEMPLATE),
    "method": _member(_METHODS),
    "status": _int,
    "upstream_status": _int,
    "decision_id": _opaque,
    "scope_id": _opaque,
    "erasure_id": _opaque,
    "retry_of": _opaque,
    "entry_id": _opaque,
    "receipt_id": _opaque,
    "op_id": _opaque,
    "jti_hash": _match(_HEX),
    "revision": _match(_HEX),
    "policy_revision": _match(_HEX),
    "shadow_revision": _match(_HEX),
    "pack_file": _match(re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")),
    "generation": _int,
    "count": _int,
    "deleted": _int,
    "pending": _int,
    "failures": _int,
    "items": _int,
    "bytes": _int,
    "attempt": _int,
    "port": _int,
    "pid": _int,
    "fd_limit": _int,
    "fd_limit_before": _int,
    "duration_ms": _num,
    "upstream_ms": _num,
    "retry_in_ms": _num,
    "schema_version": _int,
    "supported": _int,
    "migration": _int,
    # A backend's error class, never its message: PostgreSQL's SQLSTATE or SQLite's result name.
    "error_code": _match(re.compile(r"^([0-9A-Z]{5}|SQLITE_[A-Z_]{1,40}|unknown)$")),
    "trace_id": _match(re.compile(r"^[0-9a-f]{32}$")),
    "span_id": _match(re.compile(r"^[0-9a-f]{16}$")),
    "error_type": _match(_TYPE_NAME),
    "listener": _code,
    "frames": _frames,
}


class AllowListSanitizer:
    """Keeps allow-listed keys whose values have the declared shape; drops everything else.

    Args:
        allowed: key -> predicate; defaults to :data:`ALLOWED`.
    """

    __slots__ = ("_allowed",)

    def __init__(self, allowed: dict[str, Callable[[object], bool]] | None = None) -> None:
        self._allowed = ALLOWED if allowed is None else allowed

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        try:
            event = event_dict.get("event")
            if not self._allowed["event"](event):
                raise structlog.DropEvent
            clean: EventDict = {}
            dropped = 0
            for key, value in event_dict.items():
                check = self._allowed.get(key)
                if check is not None and check(value):
                    clean[key] = value
                else:
                    dropped += 1
            if dropped:
                clean["dropped_fields"] = dropped
            return clean
        except structlog.DropEvent:
            raise
        except Exception:  # noqa: BLE001 - SECURITY: a sanitizer failure drops the event
            raise structlog.DropEvent from None


class TraceIds:
    """Adds the current span's ``trace_id`` and ``span_id`` (W3C hex) to an event emitted inside one.

    Args:
        none.
    """

    __slots__ = ()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        ctx = get_current_span().get_span_context()
        if ctx.is_valid:
            event_dict["trace_id"] = format(ctx.trace_id, "032x")
            event_dict["span_id"] = format(ctx.span_id, "016x")
        return event_dict


class ForeignRecordReducer:
    """Turns a stdlib log record into ``library_log`` with its logger name; the message is dropped.

    Args:
        none.
    """

    __slots__ = ()

    def __call__(self, logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
        record = event_dict.get("_record")
        name = getattr(record, "name", "unknown")
        level = getattr(record, "levelname", "INFO").lower()
        # SECURITY: library messages and tracebacks may carry request or upstream text.
        return {"event": "library_log", "logger": name, "level": level if level in _LEVELS else "info"}


def _shared_processors() -> list[Processor]:
    return [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        TraceIds(),
    ]


def configure_logging(level: str = "info", stream: TextIO | None = None) -> None:
    """Route structlog and stdlib logging through the sanitizer into JSON lines on ``stream``."""
    global _generation
    out = stream if stream is not None else sys.stdout
    lvl = getattr(logging, level.upper())
    sanitizer = AllowListSanitizer()
    _generation += 1
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *_shared_processors(),
            sanitizer,
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        # None: each logger writes to sys.stdout as it is when the logger is made, not as it was now.
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[],
            processors=[
                ForeignRecordReducer(),
                *_shared_processors(),
                sanitizer,
                structlog.processors.JSONRenderer(sort_keys=True),
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(lvl)


def error_type(exc: BaseException) -> str:
    """What an ``error_type`` field says of an exception: the errno's name for an OS error
    (``EADDRINUSE``), the type's name otherwise; never its message, which may quote anything."""
    name = errno.errorcode.get(exc.errno) if isinstance(exc, OSError) and exc.errno is not None else None
    return name or type(exc).__name__


#: Counts configure_logging calls: a component logger made under an older configuration is stale.
_generation = 0


class _ComponentLogger:
    """A component's logger, bound once per logging configuration and output stream.

    structlog's lazy proxy binds a new logger (and a new writer with its own lock) on every
    attribute access, which cost more than a pass-through relay's own logging. This one keeps the
    bound logger until ``configure_logging`` runs again or, for a logger writing to whatever
    ``sys.stdout`` is, until ``sys.stdout`` is replaced (test capture does that).
    """

    __slots__ = ("_bound", "_component", "_generation", "_stdout")

    def __init__(self, component: str) -> None:
        self._component = component
        self._bound: Any = None
        self._generation = -1
        self._stdout: object = None

    def _logger(self) -> Any:
        if self._generation != _generation or self._stdout is not sys.stdout:
            self._bound = structlog.get_logger(component=self._component).bind()
            self._generation, self._stdout = _generation, sys.stdout
        return self._bound

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger(), name)


def get_logger(component: str) -> Any:
    """Return a logger bound to a component name (configure logging through ``configure_logging``)."""
    return _ComponentLogger(component)


def sanitize_for_test(event: Mapping[str, object]) -> EventDict | None:
    """Run the sanitizer on one event dict; ``None`` when it would be dropped."""
    try:
        return AllowListSanitizer()(None, "info", dict(event))
    except structlog.DropEvent:
        return None
