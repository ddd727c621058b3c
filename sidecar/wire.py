"""One strict parse of governed JSON bodies, and vector checks (SPEC R-10, R-18).

memgov forwards a body it serialized itself from the value it checked, so the upstream can only
read what memgov read. The parse is strict on top of that, because a lenient upstream parser
could otherwise disagree with ours about what a body *is*:

- duplicate keys in an object are refused (Go's ``encoding/json`` takes the last, others the first);
- two keys equal except for letter case, or a key equal to a field the upstream reads except for
  letter case, are refused (Go matches struct fields case-insensitively);
- bytes after the value, invalid UTF-8, ``NaN``/``Infinity`` literals, numbers beyond float range
  and integers outside int64 are refused; nesting too deep for the parser is refused, not crashed on;
- whatever is accepted, :func:`dumps` can write back: a string holding an unpaired UTF-16
  surrogate (``"\\ud800"``, which orjson refuses and the stdlib decoder reads), or nesting deeper
  than the serializer writes, is refused in the parse, before any check spends a budget on it.

Every refusal is :class:`BadBody`, whose message is a fixed code word (never the input).

Two parsers, one answer: orjson reads the common body fast and the stdlib decoder with strict
hooks is the authority. orjson's value is kept only when it provably equals the authority's: the
body parsed, no number is near the edge of int64 (orjson reads a longer integer as a float), every
key survived (a duplicate would have been dropped), no keys collide by case and nesting is
shallow. Anything else is decided by the authority.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Final, TypeGuard

import orjson

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
FLOAT32_MAX: Final = 3.4028234663852886e38
#: Smallest magnitude that survives float32 as a normal number; a vector whose every element is
#: below it would reach kagent as all zeros.
FLOAT32_MIN_NORMAL: Final = 1.1754943508222875e-38
VECTOR_DIM: Final = 768


class BadBody(ValueError):
    """A body memgov will not read; the message is a fixed code word."""


def _pairs(fields: frozenset[str]) -> Callable[[list[tuple[str, object]]], dict[str, object]]:
    def hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        folded: set[str] = set()
        for key, value in pairs:
            fold = key.casefold()
            if key in out or fold in folded:
                raise BadBody("duplicate_key")
            if fold in fields and key not in fields:
                # SECURITY: `INPUT` would be read as `input` by a case-insensitive decoder.
                raise BadBody("case_collision")
            folded.add(fold)
            out[key] = value
        return out

    return hook


def _constant(name: str) -> float:
    raise BadBody("non_finite")


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise BadBody("non_finite")  # `1e400`: the serializer would write it as null
    return value


def _int(text: str) -> int:
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise BadBody("int_range")
    return value


def _decoder(fields: Iterable[str]) -> json.JSONDecoder:
    folded = frozenset(f.casefold() for f in fields)
    return json.JSONDecoder(
        object_pairs_hook=_pairs(folded | frozenset(fields)),
        parse_constant=_constant,
        parse_float=_float,
        parse_int=_int,
    )


_INT64_SPAN: Final = 2**63
_NUMBER_TYPES: Final = frozenset({int, float})
#: A JSON string literal of a body orjson accepted (so its escapes are well formed).
_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*"')
#: Deeper bodies go to the authority (its recursion limit decides them).
_FAST_DEPTH: Final = 64


class _Unsure(Exception):
    """Internal: the fast value may differ from the authority's; ask the authority."""


class StrictJSON:
    """A strict parser for one route, knowing the field names its upstream reads."""

    __slots__ = ("_decoder", "_names")

    def __init__(self, upstream_fields: Iterable[str]) -> None:
        fields = frozenset(upstream_fields)
        self._decoder = _decoder(fields)
        #: The same set the authority's hook tests keys against.
        self._names = frozenset(f.casefold() for f in fields) | fields

    def parse(self, body: bytes) -> object:
        """Return the parsed value; raise BadBody for anything the rules above refuse."""
        try:
            return self._fast(body)
        except (_Unsure, orjson.JSONDecodeError, RecursionError):
            return self._strict(body)

    def _fast(self, body: bytes) -> object:
        value: object = orjson.loads(body)
        keys = self._keys(value, 0)
        # Every ':' outside string literals separates one key from its value; a body whose
        # parsed objects hold fewer keys than that had a duplicate, which the authority names.
        if keys != body.count(b":") and keys != _STRING.sub(b"", body).count(b":"):
            raise _Unsure
        return value

    def _keys(self, value: object, depth: int) -> int:
        """Count object keys; raise _Unsure where the authority might answer otherwise.

        That is a case collision, nesting deeper than the fast path reads, or a number of 2**63 or
        more in magnitude (orjson reads an integer literal beyond uint64 as a float, the authority
        refuses every integer beyond int64).
        """
        if depth > _FAST_DEPTH:
            raise _Unsure
        # orjson builds exact dicts and lists; a bool passes the number test harmlessly (magnitude 1).
        if isinstance(value, dict):
            names = self._names
            if len({key.casefold() for key in value}) != len(value) or any(
                k not in names and k.casefold() in names for k in value
            ):
                raise _Unsure
            return len(value) + sum(self._keys(v, depth + 1) for v in value.values())
        if isinstance(value, list):
            if _NUMBER_TYPES.issuperset(map(type, value)):  # a vector: checked in one C-level pass
                if value and max(map(abs, value)) >= _INT64_SPAN:
                    raise _Unsure
                return 0
            return sum(self._keys(v, depth + 1) for v in value)
        if isinstance(value, (int, float)) and abs(value) >= _INT64_SPAN:
            raise _Unsure
        return 0

    def _strict(self, body: bytes) -> object:
        try:
            text = body.decode("utf-8")
            value, end = self._decoder.raw_decode(text, _skip_ws(text, 0))
        except BadBody:
            raise
        except (ValueError, UnicodeDecodeError, RecursionError):
            # SECURITY: a RecursionError from a deeply nested body is a refusal, never a 500.
            raise BadBody("malformed") from None
        if _skip_ws(text, end) != len(text):
            raise BadBody("trailing_bytes")
        try:
            # Only the authority's values can hold what orjson would not have read; this path is rare.
            dumps(value)
        except orjson.JSONEncodeError:
            # SECURITY: a value memgov accepted but cannot forward would fail after budgets were spent.
            raise BadBody("unencodable") from None
        return value

    def parse_object(self, body: bytes) -> dict[str, object]:
        """Parse a body that must be a JSON object."""
        value = self.parse(body)
        if not isinstance(value, dict):
            raise BadBody("not_object")
        return value


_WS: Final = frozenset(" \t\n\r")


def _skip_ws(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WS:
        at += 1
    return at


def is_vector(value: object, dim: int = VECTOR_DIM) -> TypeGuard[list[float]]:
    """Exactly ``dim`` finite float32-range numbers, not all (float32-)zero (SPEC R-10).

    kagent answers 500 to every search whose query or results hold an all-zero vector, after
    counting the access, so one such row would poison its namespace.
    """
    # Exact type test (a JSON number is int or float, never a subclass; bool is refused): map over
    # the C-level builtins is several times faster than a per-element isinstance generator.
    if not (isinstance(value, list) and len(value) == dim and _NUMBER_TYPES.issuperset(map(type, value))):
        return False
    # A NaN compares False both ways, so `largest` may skip it; the sum cannot (every element is
    # within float32 range once the first test passes, so the sum itself cannot overflow).
    largest = max(map(abs, value))
    return FLOAT32_MIN_NORMAL <= largest <= FLOAT32_MAX and math.isfinite(sum(value))


def is_int64(value: object) -> TypeGuard[int]:
    """A JSON integer (not a bool) within int64."""
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


def is_number(value: object) -> TypeGuard[float]:
    """A finite JSON number (not a bool)."""
    return type(value) in _NUMBER_TYPES and math.isfinite(value)  # type: ignore[arg-type]  # the type test admits int and float only


def dumps(value: object) -> bytes:
    """Compact UTF-8 JSON bytes of a value memgov built from checked values (never of a raw request).

    orjson writes a non-finite float as ``null``: every number memgov forwards was checked finite
    first (``is_vector``, ``is_number``, ``is_int64``), and a string that is not valid Unicode
    raises instead of being sent.
    """
    return orjson.dumps(value)
