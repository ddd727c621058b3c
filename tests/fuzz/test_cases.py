"""Cases: hostile JSON spellings rendered byte for byte, content-free reproducers, simpler variants."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.strategies import SearchStrategy

from sidecar.dev.fuzz.bodies import batch_body, embedding_body, save_body
from sidecar.dev.fuzz.cases import Case, Request
from sidecar.dev.fuzz.data import CANONICAL, data_cases
from sidecar.dev.fuzz.jsondoc import Arr, Deep, Doc, Lit, Obj, Ph, Str, Vec, display, to_bytes
from sidecar.dev.fuzz.runner import simpler
from sidecar.dev.fuzz.stack import AGENT, PLAIN_AGENT

A2A_PATHS = {
    f"/api/a2a/{AGENT}/",
    f"/api/a2a/{AGENT}",
    f"/api/a2a/{PLAIN_AGENT}/",
    f"/api/a2a-sandboxes/{AGENT}/",
    f"/api/a2a/{AGENT}/.well-known/agent-card.json",
}
ENV = {"KEY": "mg1.s0.1.mac", "S:fact": 'SNTLfact0123456789abü"x'}
#: A high surrogate escape not followed by a low one, or a low one with no high one before it.
UNPAIRED = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<![0-9a-fA-F]{4})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


class TestRender:
    def test_hostile_spellings_survive(self) -> None:
        """Duplicate and escaped keys, NaN, huge integers, deep nesting and trailing bytes are sent as built."""
        doc = Doc(
            Obj(
                (("input", "a"), (Str(("input",), escaped=True), Lit("NaN")), ("n", 2**64), ("d", Deep(3, "array", 1)))
            ),
            suffix=b" x",
        )
        assert (
            to_bytes(doc, ENV) == b'{"input":"a","\\u0069\\u006e\\u0070\\u0075\\u0074":NaN,'
            b'"n":18446744073709551616,"d":[[[1]]]} x'
        )

    def test_placeholders_are_json_escaped(self) -> None:
        """A sentinel with a quote and a non-ASCII letter stays a valid JSON string."""
        body = to_bytes(Doc(Obj((("user_id", Ph("KEY")), ("content", Str(("said ", Ph("S:fact")), "x", 3))))), ENV)
        assert json.loads(body) == {"user_id": "mg1.s0.1.mac", "content": 'said SNTLfact0123456789abü"xxxx'}

    def test_escapes_are_written_verbatim(self) -> None:
        """A string's escapes, an unpaired surrogate included, reach the wire as spelled."""
        body = to_bytes(
            Doc(Obj(((Str(("k",), escape="\\udc00"), Str(("said ", Ph("S:fact")), escape="\\ud800\\/")),))), ENV
        )
        assert body == '{"k\\udc00":"said SNTLfact0123456789abü\\"x\\ud800\\/"}'.encode()

    def test_vectors_by_recipe(self) -> None:
        """A recipe spells a 768-vector (valid, all zero, NaN inside, wrong length) without drawing 768 numbers."""
        valid = json.loads(to_bytes(Doc(Vec("valid", 3)), ENV))
        zeros = json.loads(to_bytes(Doc(Vec("zeros")), ENV))
        assert len(valid) == 768 and any(valid) and zeros == [0] * 768
        assert b"NaN" in to_bytes(Doc(Vec("nan", 5)), ENV)
        assert len(json.loads(to_bytes(Doc(Vec("short", 9)), ENV))) < 768


class TestRequest:
    def test_wire_fills_encodes_and_frames(self) -> None:
        """Placeholders in the target are percent-encoded; gzip and chunked framing apply to the body."""
        request = Request(
            "POST",
            ("/api/memories/search?user_id=", Ph("S:fact")),
            (("X-User-Id", Ph("KEY")),),
            Doc(Obj((("a", 1),))),
            "gzip",
            chunked=True,
        )
        target, headers, body = request.wire(ENV)
        assert target.startswith(b"/api/memories/search?user_id=SNTLfact") and b"%22x" in target
        assert ("X-User-Id", "mg1.s0.1.mac") in headers and ("Transfer-Encoding", "chunked") in headers
        chunks, rest = [], body
        while True:
            size, _, rest = rest.partition(b"\r\n")
            if int(size, 16) == 0:
                break
            chunks.append(rest[: int(size, 16)])
            rest = rest[int(size, 16) + 2 :]
        assert gzip.decompress(b"".join(chunks)) == b'{"a":1}'

    def test_reproducer_is_content_free(self) -> None:
        """The printed case names placeholders, never their values."""
        request = Request(
            "POST",
            ("/api/memories/sessions",),
            (("X-User-Id", Ph("KEY")),),
            Doc(Obj((("content", Str((Ph("S:fact"),), "ü", 500)), ("vector", Vec("zeros"))))),
        )
        text = Case("data", "save", request).show()
        assert "«S:fact»" in text and "KEY" in text and "«vector:zeros»" in text and "×500" in text
        assert "SNTL" not in text and "mg1." not in text


class TestSimpler:
    def test_variants_are_one_step_smaller(self) -> None:
        """Headers, fault, nesting depth and list items are dropped one at a time."""
        body = Doc(Obj((("items", Arr((1, 2, 3, 4))), ("d", Deep(1000, "array")))))
        case = Case("data", "batch", Request("POST", ("/x", "?a=", "b"), (("A", "1"), ("B", "2")), body))
        variants = list(simpler(case))
        assert any(v.request.headers == (("B", "2"),) for v in variants)
        assert any(v.request.target == ("/x",) for v in variants)
        assert any(
            isinstance(v.request.body, Doc) and ("d", Deep(500, "array")) in v.request.body.value.pairs
            for v in variants
        )
        assert all(len(v.show()) <= len(case.show()) for v in variants)


class TestGeneratedCases:
    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data_cases())
    def test_a_look_alike_is_never_the_canonical_spelling(self, case: Case) -> None:
        """A target judged as a look-alike differs from every spelling the route is governed under."""
        if case.route == "lookalike":
            target, method = case.request.target[0], case.request.method
            assert not (isinstance(target, str) and ((method, target) in CANONICAL or target in A2A_PATHS))

    @pytest.mark.parametrize("body", [embedding_body, save_body, batch_body])
    def test_unpaired_surrogates_are_drawn(self, body: Callable[[], SearchStrategy[Doc | bytes]]) -> None:
        """The grammar reaches bodies with an unpaired surrogate escape on every route that forwards text."""
        limits = settings(
            max_examples=5000, database=None, phases=(Phase.generate,), suppress_health_check=list(HealthCheck)
        )
        found = find(body(), lambda b: isinstance(b, Doc) and UNPAIRED.search(display(b)) is not None, settings=limits)
        assert isinstance(found, Doc)

    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(data_cases())
    def test_reproducers_name_placeholders_only(self, case: Case) -> None:
        """Nothing a case prints is a sentinel, a key or a token."""
        assert not any(mark in case.show() for mark in ("SNTL", "mg1.", "eyJ"))
