"""The fuzzer's judges: strict JSON, the reason-code shape, the decision header, sentinel markers."""

from __future__ import annotations

import pytest

from sidecar.dev.fuzz.oracle import (
    decision_of,
    foreign_markers,
    header_agrees,
    is_good_vector,
    leaked,
    reason_body,
    strict_json,
)
from sidecar.dev.fuzz.wire import Reply
from sidecar.drill.sentinels import make_sentinel

JSON = (("Content-Type", "application/json"),)


def reply(body: bytes, *headers: tuple[str, str], status: int = 403) -> Reply:
    return Reply(status, "Forbidden", JSON + headers, body)


class TestStrictJson:
    @pytest.mark.parametrize(
        ("raw", "problem"),
        [
            (b'{"input":"a"}', ""),
            (b'{"input":"a","input":"b"}', "duplicate_key"),
            (b'{"input":"a","INPUT":["b"]}', "case_colliding_key"),
            (b'{"\\u0069nput":"a","input":"b"}', "duplicate_key"),
            (b'{"Extra":1,"extra":2}', ""),
            (b'{"v":NaN}', "nonfinite_literal"),
            (b'{"v":1e999}', "nonfinite_literal"),
            (b'{"input":"a"} x', "trailing_bytes"),
            (b'{"input":"a"}\n', ""),
            (b"[" * 5000 + b"]" * 5000, "invalid_json"),
            (b"\xff{}", "not_utf8"),
        ],
    )
    def test_problems(self, raw: bytes, problem: str) -> None:
        """Each hostile spelling is named; case collisions count only for fields the peer reads."""
        assert strict_json(raw, frozenset({"input"}))[1] == problem


class TestReasonBody:
    def test_exact_shape(self) -> None:
        """error + decision_id (+ an upstream status) and nothing else is memgov's error shape."""
        assert reason_body(reply(b'{"error":"route_denied","decision_id":"d_0123456789abcdef"}'))
        assert reason_body(reply(b'{"error":"upstream_error","decision_id":"d_0123456789abcdef","status":500}'))

    @pytest.mark.parametrize(
        "body",
        [
            b'{"error":"route_denied"}',
            b'{"error":"no such code","decision_id":"d_0123456789abcdef"}',
            b'{"error":"route_denied","decision_id":"d_0123456789abcdef","detail":"x"}',
            b'{"error":"route_denied","decision_id":"d_0123456789abcdef","error":"x"}',
            b"Bad Request",
        ],
    )
    def test_anything_else_is_not(self, body: bytes) -> None:
        """Extra keys, unknown codes, duplicates and text are not the shape."""
        assert reason_body(reply(body)) is None

    def test_header_must_name_the_same_decision(self) -> None:
        """The decision header carries the body's id, and its reason unless a call sent on failed upstream."""
        body = {"error": "key_invalid", "decision_id": "d_0123456789abcdef"}
        same = reply(b"", ("X-Memgov-Decision", "deny; reason=key_invalid; id=d_0123456789abcdef"))
        other = reply(b"", ("X-Memgov-Decision", "deny; reason=key_invalid; id=d_ffffffffffffffff"))
        forwarded = reply(b"", ("X-Memgov-Decision", "forward; reason=allowed; id=d_0123456789abcdef"))
        assert header_agrees(same, body) and not header_agrees(other, body)
        assert header_agrees(forwarded, {**body, "error": "upstream_error"}) and not header_agrees(forwarded, body)
        # A refused invocation went to the memory-free variant, which then could not be reached.
        rewritten = reply(b"", ("X-Memgov-Decision", "rewrite_disabled; reason=context_invalid; id=d_0123456789abcdef"))
        assert header_agrees(rewritten, {**body, "error": "upstream_unavailable"})
        assert not header_agrees(rewritten, body)
        denied = reply(b"", ("X-Memgov-Decision", "deny; reason=key_invalid; id=d_0123456789abcdef"))
        assert not header_agrees(denied, {**body, "error": "upstream_unavailable"})
        assert decision_of(reply(b"", ("X-Memgov-Decision", "maybe; reason=allowed; id=d_0123456789abcdef"))) is None


class TestSentinels:
    def test_leaks_and_markers(self) -> None:
        """A planted sentinel is found in escaped form; any other case's sentinel is foreign."""
        mine, other = make_sentinel("fact"), make_sentinel("query")
        text = '{"content":' + __import__("json").dumps(mine) + "} " + other
        assert leaked({"fact": mine}, [text]) == ["fact"]
        assert foreign_markers(text, {mine}) == ["query"]
        assert foreign_markers(text, {mine, other}) == []


class TestVector:
    @pytest.mark.parametrize(
        ("vector", "good"),
        [
            ([0.5] * 768, True),
            ([0.0] * 768, False),
            ([0.5] * 767, False),
            ([float("nan")] + [0.5] * 767, False),
            ([True] * 768, False),
        ],
    )
    def test_r10(self, vector: list[object], good: bool) -> None:
        """Exactly 768 finite numbers, not all zero."""
        assert is_good_vector(vector) is good
