"""The fast parse (orjson) never answers otherwise than the strict authority (SPEC R-18)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.wire import BadBody, StrictJSON, dumps, is_vector

PARSER = StrictJSON(("agent_name", "user_id", "content", "vector"))
#: A parser with no upstream field names, so a generated key never collides with one.
FREE = StrictJSON(())


def outcome(parse: Any, body: bytes) -> tuple[str, Any]:
    try:
        return "value", parse(body)
    except BadBody as refused:
        return "refused", str(refused)


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1,"a":2}',
        b'{"a":{"b":1,"b":2}}',
        b'{"x":"a:b","a":1,"a":2}',
        b'{"x":"\\":","a":1,"a":2}',
        b'{"A":1,"a":2}',
        b'{"Agent_Name":"x"}',
        b'{"\\u0061gent_name":"x","agent_name":"y"}',
        b'{"a":NaN}',
        b'{"a":-Infinity}',
        b'{"a":1e400}',
        b'{"a":18446744073709551616}',
        b'{"a":[1,18446744073709551615]}',
        b'{"a":9223372036854775807}',
        b'{"a":-9223372036854775808}',
        b'{"a":-9223372036854775809}',
        b'{"a":[1e19]}',
        b'{"a":"\\ud800"}',
        b'{"a":1} x',
        b'{"a":1}\n',
        b"\xff{}",
        b"\xef\xbb\xbf{}",
        b"[" * 900 + b"]" * 900,
        b"[" * 5000 + b"]" * 5000,
        b'{"a":[true,{"b":1,"b":1}]}',
        b'{"vector":[0.1,-2,3e-5],"content":"t: 1:2"}',
        b"  [] ",
        b"",
        b'{"a":"\x01"}',
        b'{"a":[1,2,]}',
        b'{"a" :1, "b": {"c" : [ {} ]}}',
    ],
)
def test_fast_and_strict_agree(body: bytes) -> None:
    """Every hostile spelling gets the authority's answer: the same value or the same refusal."""
    assert outcome(PARSER.parse, body) == outcome(PARSER._strict, body)


KEYS = st.sampled_from(["a", "A", "agent_name", "Agent_name", "user_id", "x:y", "\u00e9", "vector", 'k"q'])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
PAIRS = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5) | st.lists(st.tuples(KEYS, inner), max_size=5).map(lambda kv: ("obj", kv))
    ),
    max_leaves=30,
)


def render(value: Any) -> str:
    """JSON text that may repeat keys (objects are lists of pairs)."""
    if isinstance(value, tuple) and value and value[0] == "obj":
        return "{" + ",".join(f"{json.dumps(k)}:{render(v)}" for k, v in value[1]) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    return json.dumps(value)


@settings(max_examples=400, deadline=None)
@given(PAIRS)
def test_generated_bodies_agree(value: Any) -> None:
    """Random bodies with repeated, case-colliding and odd keys and numbers at every size agree."""
    body = render(value).encode()
    assert outcome(PARSER.parse, body) == outcome(PARSER._strict, body)


#: Every escape JSON has: the short ones, any UTF-16 code unit as \\uXXXX (so lone high and low
#: surrogates, in either hex case) and supplementary characters as a surrogate pair.
ESCAPES = st.one_of(
    st.sampled_from(['\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"]),
    st.integers(0, 0xFFFF).map(lambda u: f"\\u{u:04x}"),
    st.integers(0xD800, 0xDFFF).map(lambda u: f"\\u{u:04X}"),
    st.integers(0x10000, 0x10FFFF).map(lambda c: json.dumps(chr(c))[1:-1]),  # the stdlib writes a pair
)
#: Characters a JSON string may hold unescaped (UTF-8 cannot carry a surrogate, so none is here).
UNESCAPED = st.characters(min_codepoint=0x20, exclude_categories=("Cs",), exclude_characters='"\\')
STRING = st.lists(ESCAPES | UNESCAPED, max_size=6).map(lambda parts: '"' + "".join(parts) + '"')
NUMBER = st.integers(-(2**63), 2**63 - 1).map(str) | st.floats(allow_nan=False, allow_infinity=False).map(repr)
#: Object keys that never collide, each letter spelled as itself or as an escape.
KEY = st.sampled_from(["k0", "k1", "k2", "k3"]).flatmap(
    lambda k: st.tuples(*(st.sampled_from([c, f"\\u{ord(c):04x}"]) for c in k)).map(
        lambda cs: (k, '"' + "".join(cs) + '"')
    )
)
TEXT = st.recursive(
    STRING | NUMBER | st.sampled_from(["true", "false", "null"]),
    lambda inner: (
        st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]")
        | st.lists(st.tuples(KEY, inner), max_size=4, unique_by=lambda kv: kv[0][0]).map(
            lambda kvs: "{" + ",".join(f"{k[1]}:{v}" for k, v in kvs) + "}"
        )
        | st.tuples(STRING, inner).map(lambda kv: "{" + f"{kv[0]}:{kv[1]}" + "}")
    ),
    max_leaves=12,
)


def surrogate_in(value: Any) -> bool:
    """Whether a decoded value holds a UTF-16 surrogate code point in a string or key."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, list):
        return any(map(surrogate_in, value))
    if isinstance(value, dict):
        return any(surrogate_in(k) or surrogate_in(v) for k, v in value.items())
    return False


@settings(max_examples=600, deadline=None)
@given(TEXT)
def test_what_the_parse_accepts_the_serializer_writes(text: str) -> None:
    """Every escape form: a value accepted is written back as itself; a lone surrogate is refused in the parse."""
    read = json.loads(text)  # the stdlib's own reading, which keeps lone surrogates
    try:
        value = FREE.parse(text.encode())
    except BadBody as refused:
        assert str(refused) == "unencodable" and surrogate_in(read)
    else:
        assert not surrogate_in(read) and value == read
        assert orjson.loads(dumps(value)) == value


@pytest.mark.parametrize(
    "body",
    [b'"\\ud800"', b'"\\udfff"', b'"a\\udc00b"', b'"\\ude00\\ud83d"', b'{"\\ud800":1}', b'["\\uD83D"]'],
)
def test_an_unpaired_surrogate_is_refused(body: bytes) -> None:
    """A lone or reversed surrogate escape is refused, wherever it sits (orjson and the authority agree)."""
    assert outcome(PARSER.parse, body) == ("refused", "unencodable")


@pytest.mark.parametrize("body", [b"1e400", b"[-1e999]", b"[" * 300 + b"]" * 300])
def test_what_the_serializer_would_not_write_faithfully_is_refused(body: bytes) -> None:
    """A number beyond float range (written back as null) and nesting beyond the serializer's depth are refused."""
    assert outcome(PARSER.parse, body)[0] == "refused"


def test_dumps_is_compact_utf8() -> None:
    """What memgov serializes is compact JSON in UTF-8 and reads back as the same value."""
    value = {"content": "caf\u00e9 \U0001f600", "vector": [0.1, -2, 1e-07], "ttl_days": 3}
    raw = dumps(value)
    assert json.loads(raw) == value and b" " not in raw.replace("caf\u00e9 ".encode(), b"")
    assert "caf\u00e9".encode() in raw
    with pytest.raises(TypeError):
        dumps({"content": "\ud800"})  # never sent as something else


@pytest.mark.parametrize(
    ("body", "ok"), [(b'{"a":1}', True), (b"[1]", False), (b"nope", False), (b"\xff\xfe", False), (b'"s"', False)]
)
def test_a_governed_body_is_a_json_object(body: bytes, ok: bool) -> None:
    """A governed body must be a JSON object; anything else is refused (bad_request)."""
    assert (outcome(PARSER.parse_object, body)[0] == "value") is ok


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ([0.1] * 768, True),
        ([0.1] * 767, False),
        ([True] * 768, False),
        (["1"] * 768, False),
        ("x", False),
        ([0.0] * 768, False),
        ([float("nan")] + [0.1] * 767, False),
        ([1e39] + [0.1] * 767, False),
    ],
)
def test_only_768_finite_not_all_zero_numbers_form_a_vector(value: object, ok: bool) -> None:
    """kagent fails every search of a namespace holding an all-zero vector, so none is forwarded."""
    assert is_vector(value) is ok
