"""One strict parse of governed JSON bodies, and vector checks (SPEC R-10, R-18).

memgov forwards a body it serialized itself from the value it checked, so the upstream can only
read what memgov read. The parse is strict on top of that, because a lenient upstream parser
could otherwise disagree with ours about what a body *is*:

- duplicate keys in an object are refused (Go's ``encoding/json`` takes the last, others the first);
- two keys equal except for letter case, or a key equal to a field the upstream reads except for
  letter case, are refused (Go matches struct fields case-insensitively);
- bytes after the value, invalid UTF-8, ``NaN``/``Infinity`` literals and integers outside
  int64 are refused; nesting too deep for the parser is refused, not crashed on.

Every refusal is :class:`BadBody`, whose message is a fixed code word (never the input).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeGuard

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
FLOAT32_MAX: Final = 3.4028234663852886e38
#: Smallest magnitude that survives float32 as a normal number; a vector whose every element is
#: below it would reach kagent as all zeros.
FLOAT32_MIN_NORMAL: Final = 1.1754943508222875e-38
VECTOR_DIM: Final = 768


class BadBody(ValueError):
    """A body memgov will not read; the message is a fixed code word."""


def _pairs(fields: frozenset[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
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


def _int(text: str) -> int:
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise BadBody("int_range")
    return value


def _decoder(fields: Iterable[str]) -> json.JSONDecoder:
    folded = frozenset(f.casefold() for f in fields)
    return json.JSONDecoder(object_pairs_hook=_pairs(folded | frozenset(fields)), parse_constant=_constant,
                            parse_int=_int)


class StrictJSON:
    """A strict parser for one route, knowing the field names its upstream reads."""

    __slots__ = ("_decoder",)

    def __init__(self, upstream_fields: Iterable[str]) -> None:
        self._decoder = _decoder(upstream_fields)

    def parse(self, body: bytes) -> Any:
        """Return the parsed value; raise BadBody for anything the rules above refuse."""
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
        return value

    def parse_object(self, body: bytes) -> dict[str, Any]:
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


_NUMBER_TYPES: Final = frozenset({int, float})


def is_vector(value: object, dim: int = VECTOR_DIM) -> bool:
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


def is_number(value: object) -> bool:
    """A finite JSON number (not a bool)."""
    return type(value) in _NUMBER_TYPES and math.isfinite(value)  # type: ignore[arg-type]  # the type test admits int and float only


def dumps(value: object) -> bytes:
    """Compact JSON bytes of a value memgov built (never of a raw request)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
