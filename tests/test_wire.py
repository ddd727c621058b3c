"""The fast parse (orjson) never answers otherwise than the strict authority (SPEC R-18)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.wire import BadBody, StrictJSON, dumps

PARSER = StrictJSON(("agent_name", "user_id", "content", "vector"))


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


def test_dumps_is_compact_utf8() -> None:
    """What memgov serializes is compact JSON in UTF-8 and reads back as the same value."""
    value = {"content": "caf\u00e9 \U0001f600", "vector": [0.1, -2, 1e-07], "ttl_days": 3}
    raw = dumps(value)
    assert json.loads(raw) == value and b" " not in raw.replace("caf\u00e9 ".encode(), b"")
    assert "caf\u00e9".encode() in raw
    with pytest.raises(TypeError):
        dumps({"content": "\ud800"})  # never sent as something else
