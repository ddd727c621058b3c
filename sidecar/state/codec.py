"""Pure conversions between caller values and stored columns, and the bounds every column has.

Times are stored as integer microseconds since the Unix epoch (UTC) on both backends, so the
same SQL compares them and no driver time-zone handling is involved. Every string a caller hands
in is checked here against a shape and a byte bound before it reaches SQL; a refused value is
never echoed in the error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Final, Generic, TypeVar, get_type_hints

from sidecar.reasons import REASON_VALUES

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_US: Final = timedelta(microseconds=1)
#: Largest stored time; stands for "never" (a bucket that does not refill).
NEVER_US: Final = 2**62

#: Byte bounds of stored strings; the schema declares the same bounds (tests compare them).
MXID_MAX: Final = 255
ROOM_MAX: Final = 255
AGENT_MAX: Final = 320
PURPOSE_MAX: Final = 256
CODE_MAX: Final = 64
ID_MAX: Final = 64
#: An embedding model name (provider ids such as ``text-embedding-3-small`` or ``org/model:tag``).
MODEL_MAX: Final = 128

_CODE = re.compile(r"[a-z][a-z0-9_.\-]{0,63}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}")
_SCOPE_ID = re.compile(r"s[0-9a-f]{24}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def to_us(when: datetime) -> int:
    """Convert an aware datetime to integer microseconds since the epoch."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError("state times must be timezone-aware")
    return (when - _EPOCH) // _US


def from_us(us: int) -> datetime:
    """Convert stored microseconds back to an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=int(us))


def opt_from_us(us: int | None) -> datetime | None:
    """Like :func:`from_us`, keeping NULL as None."""
    return None if us is None else from_us(us)


R = TypeVar("R")


def _decoder(hint: Any) -> Callable[[Any], Any] | None:
    """How a stored column becomes a field of type ``hint`` (None: taken as stored)."""
    if hint is datetime:
        return from_us
    if hint == datetime | None:
        return opt_from_us
    if hint in (int, bool) or (isinstance(hint, type) and issubclass(hint, Enum)):
        return hint  # type: ignore[no-any-return]
    return None


class Columns(Generic[R]):
    """A record read from a row whose columns follow its fields, in the record's field order.

    A time field (``datetime``) is stored as microseconds in the column ``x_us`` (``created_at`` reads
    ``created_us``, ``at`` reads ``at_us``); ``int``, ``bool`` and enum fields are cast, every other
    field is taken as stored. ``renamed`` names a column that does not follow that rule; ``omit``
    leaves out fields the row does not hold (given to :meth:`read` instead, or left at their default).
    """

    __slots__ = ("_decoders", "_make", "names")

    def __init__(self, record: type[R], *, omit: Collection[str] = (), renamed: Mapping[str, str] = {}) -> None:
        hints = get_type_hints(record)
        fields = [f.name for f in dataclasses.fields(record) if f.name not in omit]  # type: ignore[arg-type]
        self._make = record
        self._decoders = tuple((name, _decoder(hints[name])) for name in fields)
        self.names: tuple[str, ...] = tuple(renamed.get(name) or _column(name, hints[name]) for name in fields)

    def __len__(self) -> int:
        return len(self.names)

    def select(self, alias: str = "") -> str:
        """The column list, each prefixed with ``alias`` (``"s."``)."""
        return ", ".join(alias + name for name in self.names)

    def read(self, row: Sequence[Any], start: int = 0, **given: Any) -> R:
        """The record from ``row``'s columns from ``start`` on, with the omitted fields ``given``."""
        for at, (name, decode) in enumerate(self._decoders, start):
            value = row[at]
            given[name] = value if decode is None else decode(value)
        return self._make(**given)


def _column(field: str, hint: Any) -> str:
    if hint not in (datetime, datetime | None):
        return field
    return (field.removesuffix("_at") if field.endswith("_at") else field) + "_us"


def new_id(prefix: str) -> str:
    """Return an opaque id: a one-letter kind prefix and 24 random hex digits (no dots)."""
    return prefix + secrets.token_hex(12)


def digest(value: str) -> str:
    """Return the SHA-256 hex of a caller key, so stored keys are bounded and opaque."""
    return hashlib.sha256(value.encode()).hexdigest()


class InvalidValue(ValueError):
    """A caller value the state store refuses by shape or length (never echoed)."""


def _fail(field: str) -> InvalidValue:
    # The value itself is deliberately left out: it may be anything a request carried.
    return InvalidValue(f"{field} has an invalid shape or length")


def check_bounded(value: str, field: str, max_bytes: int, *, allow_empty: bool = False) -> str:
    """Require a printable string of at most ``max_bytes`` UTF-8 bytes."""
    # isprintable() first: it also refuses lone surrogates, which encode() could not handle.
    if not isinstance(value, str) or not value.isprintable() or not (value or allow_empty):
        raise _fail(field)
    if len(value.encode()) > max_bytes:
        raise _fail(field)
    return value


def _matching(rx: re.Pattern[str], value: str, field: str) -> str:
    if not isinstance(value, str) or rx.fullmatch(value) is None:
        raise _fail(field)
    return value


def check_code(value: str, field: str) -> str:
    """Require a lower-case code such as ``control_room`` or ``forget_one``."""
    return _matching(_CODE, value, field)


def check_reason(value: str, field: str = "reason") -> str:
    """Require a value of the Reason enum."""
    if not isinstance(value, str) or value not in REASON_VALUES:
        raise _fail(field)
    return value


def check_id(value: str, field: str) -> str:
    """Require an opaque id (letters, digits, ``_.:-``, at most 64 bytes)."""
    return _matching(_ID, value, field)


def check_scope_id(value: str) -> str:
    """Require the ``s`` + 24 hex form of a scope id."""
    return _matching(_SCOPE_ID, value, "scope_id")


def valid_scope_id(scope_id: str) -> bool:
    """True when ``scope_id`` has the stored shape (anything else cannot name a scope)."""
    try:
        check_scope_id(scope_id)
    except ValueError:
        return False
    return True


def check_hex64(value: str, field: str) -> str:
    """Require a lower-case SHA-256 hex digest."""
    return _matching(_HEX64, value, field)
