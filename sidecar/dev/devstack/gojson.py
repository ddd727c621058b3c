"""JSON the way kagent's Go handlers read and write it (encoding/json, net/url).

Decoding follows ``json.NewDecoder(r.Body).Decode(&struct)``: only the first JSON value counts
(trailing bytes are ignored), keys match fields case-insensitively and the last one wins, unknown
keys are ignored, ``null`` leaves a field at its zero value, and any type mismatch fails the whole
decode. ``json.RawMessage`` fields keep the bytes exactly as sent. Encoding follows
``json.Marshal``: compact, HTML characters escaped, Go's float spelling, no trailing newline.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

#: Field kinds of a decoded struct: scalars, float32 slices, raw JSON, nested structs, struct slices.
Kind = Literal["string", "int", "float64", "float32s", "raw"] | Mapping[str, Any] | tuple[Mapping[str, Any]]
_INT64 = (-(2**63), 2**63 - 1)
_WS = " \t\n\r"
_NIL = object()  # a slice set to nil by JSON null


class GoDecodeError(ValueError):
    """The body would make Go's decoder return an error."""


@dataclass(frozen=True)
class Raw:
    """A ``json.RawMessage``: JSON text kept verbatim, compacted when encoded."""

    text: str


def _reject_constant(name: str) -> Any:
    raise GoDecodeError(f"invalid literal {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=lambda pairs: pairs)


def _clean_str(value: str) -> str:
    # Go turns lone UTF-16 surrogate escapes into U+FFFD; Python would keep them and fail later.
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def go_loads(body: bytes) -> Any:
    """Decode a whole document into plain values as Go fills an ``any``: a lone surrogate becomes U+FFFD."""
    return _cleaned(json.loads(body))


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return _clean_str(value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {_clean_str(k): _cleaned(v) for k, v in value.items()}
    return value


def _string_end(text: str, i: int) -> int:
    """Index just past the JSON string whose opening quote is at ``i``."""
    i += 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _skip(text: str, i: int) -> int:
    """Index just past the (already validated) JSON value starting at ``i``."""
    if text[i] not in '"[{':
        while i < len(text) and text[i] not in _WS + ",]}":
            i += 1
        return i
    depth = 0
    while True:
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
        else:
            depth += (c in "[{") - (c in "]}")
            i += 1
        if depth == 0:
            return i


def _spans(text: str, i: int) -> list[tuple[str | None, int, int]]:
    """Members (key, start, end) of the object or elements (None, start, end) of the array at ``i``."""
    out: list[tuple[str | None, int, int]] = []
    is_obj = text[i] == "{"
    i += 1
    while True:
        while text[i] in _WS + ",":
            i += 1
        if text[i] in "]}":
            return out
        key = None
        if is_obj:
            end = _skip(text, i)
            key = json.loads(text[i:end])
            i = end
            while text[i] in _WS + ":":
                i += 1
        end = _skip(text, i)
        out.append((key, i, end))
        i = end


def _lookup(fields: Mapping[str, Any], key: str) -> str | None:
    if key in fields:
        return key
    folded = key.lower()
    return next((name for name in fields if name.lower() == folded), None)


def _is(text: str, start: int, value: Any, opener: str) -> bool:
    # Objects decode to pair lists too, so the first character tells arrays from objects.
    return isinstance(value, list) and text[start] == opener


def _decode(value: Any, text: str, start: int, end: int, kind: Any) -> Any:
    """Decode one value; ``None`` means "leave the field as it is" (Go's null on a scalar)."""
    if kind == "raw":
        return Raw(text[start:end])
    if value is None:
        return _NIL if kind == "float32s" or isinstance(kind, tuple) else None
    if isinstance(kind, tuple):
        if not _is(text, start, value, "["):
            raise GoDecodeError("expected array")
        return [_struct(v, text, s, kind[0]) for v, (_, s, _e) in zip(value, _spans(text, start), strict=True)]
    if isinstance(kind, Mapping):
        return _struct(value, text, start, kind)
    if kind == "float32s":
        if not _is(text, start, value, "["):
            raise GoDecodeError("expected array")
        return [_float32(item) for item in value]
    if kind == "string":
        if not isinstance(value, str):
            raise GoDecodeError("expected string")
        return _clean_str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GoDecodeError("expected number")
    if kind == "int":
        if not isinstance(value, int) or not _INT64[0] <= value <= _INT64[1]:
            raise GoDecodeError("expected int64")
        return value
    try:
        number = float(value)
    except OverflowError:
        raise GoDecodeError("number out of range") from None
    if math.isinf(number):
        raise GoDecodeError("number out of range")
    return number


def _float32(item: Any) -> float:
    if item is None:
        return 0.0
    number = _decode(item, "", 0, 0, "float64")
    try:
        return float(struct.unpack("<f", struct.pack("<f", number))[0])
    except OverflowError:
        raise GoDecodeError("number out of float32 range") from None


def _struct(value: Any, text: str, start: int, fields: Mapping[str, Any]) -> dict[str, Any]:
    if value is None:
        return {}
    if not _is(text, start, value, "{"):
        raise GoDecodeError("expected object")
    out: dict[str, Any] = {}
    for (key, raw_value), (_, s, e) in zip(value, _spans(text, start), strict=True):
        name = _lookup(fields, key)
        if name is None:
            continue
        decoded = _decode(raw_value, text, s, e, fields[name])
        if decoded is _NIL:
            out.pop(name, None)
        elif decoded is not None:
            out[name] = decoded
    return out


def decode_struct(body: bytes, fields: Mapping[str, Kind]) -> dict[str, Any]:
    """Decode the first JSON value of ``body`` into the fields Go would set; raises GoDecodeError."""
    text = body.decode("utf-8", "replace").lstrip(_WS)
    if not text:
        raise GoDecodeError("EOF")
    try:
        value, _end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError) as exc:  # Go refuses nesting deeper than 10000; Python gives up sooner
        raise GoDecodeError(str(exc)) from None
    return _struct(value, text, 0, fields)


# -- encoding ---------------------------------------------------------------------------------

_HTML = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def go_float(value: float) -> str:
    """Spell a float64 the way encoding/json does."""
    if value != 0 and (abs(value) < 1e-6 or abs(value) >= 1e21):
        text = repr(value)
        mantissa, _, exp = text.partition("e")
        sign, digits = exp[0], exp[1:].lstrip("0") or "0"
        return f"{mantissa}e{sign}{digits.zfill(1)}"
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _strip_ws(raw: str) -> str:
    """Go's compact(): drop whitespace outside strings, escape HTML characters."""
    out, i = [], 0
    while i < len(raw):
        if raw[i] == '"':
            end = _string_end(raw, i)
            out.append(raw[i:end])
            i = end
            continue
        if raw[i] not in _WS:
            out.append(raw[i])
        i += 1
    return "".join(out).translate(_HTML)


def go_dumps(value: Any) -> str:
    """Serialize like json.Marshal (dict order is the Go struct's field order)."""
    if isinstance(value, Raw):
        return _strip_ws(value.text)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).translate(_HTML)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{go_dumps(str(k))}:{go_dumps(v)}" for k, v in value.items()) + "}"
    return "[" + ",".join(go_dumps(v) for v in value) + "]"


# -- query strings ----------------------------------------------------------------------------

_HEX = frozenset(b"0123456789abcdefABCDEF")


def _unescape(text: str) -> str:
    raw, out, i = text.encode(), bytearray(), 0
    while i < len(raw):
        c = raw[i]
        if c == 0x25:  # '%'
            pair = raw[i + 1 : i + 3]
            if len(pair) < 2 or not all(x in _HEX for x in pair):
                raise ValueError("bad escape")
            out.append(int(pair, 16))
            i += 3
            continue
        out.append(0x20 if c == 0x2B else c)  # '+' is a space
        i += 1
    return out.decode("utf-8", "replace")


def go_query(raw_query: str) -> dict[str, list[str]]:
    """``r.URL.Query()``: pairs holding ';' or a bad %-escape are silently dropped."""
    out: dict[str, list[str]] = {}
    for pair in raw_query.split("&"):
        if not pair or ";" in pair:
            continue
        key, _, value = pair.partition("=")
        try:
            key, value = _unescape(key), _unescape(value)
        except ValueError:
            continue
        out.setdefault(key, []).append(value)
    return out


def go_query_get(raw_query: str, key: str) -> str:
    """``r.URL.Query().Get(key)``: the first value, or empty."""
    return go_query(raw_query).get(key, [""])[0]
