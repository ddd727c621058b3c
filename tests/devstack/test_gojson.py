"""Go's JSON and query-string rules, as the stand-in applies them to requests and responses."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from sidecar.dev.devstack.gojson import GoDecodeError, Raw, decode_struct, go_dumps, go_float, go_query
from sidecar.dev.devstack.memory_api import SAVE_FIELDS, rfc3339, ttl_delta


class TestDecode:
    @pytest.mark.parametrize(
        ("raw", "fields"),
        [
            (b'{"agent_name":"a","agent_name":"b"}', {"agent_name": "b"}),
            (b'{"agent_name":"a","AGENT_NAME":null}', {"agent_name": "a"}),
            (b'{"vector":[1],"vector":null}', {}),
            (b'{"vector":[1,null,2.5]}', {"vector": [1.0, 0.0, 2.5]}),
            (b'{"vector":[0.1]}', {"vector": [pytest.approx(0.1, abs=1e-8)]}),
            (b'{"metadata":null}', {"metadata": Raw("null")}),
            (b'{"metadata":  {"k" : [1.0]} }', {"metadata": Raw('{"k" : [1.0]}')}),
            (b'{"ttl_days":-0}', {"ttl_days": 0}),
            (b'{"content":"\\ud800x"}', {"content": "\ufffdx"}),
            (b' \n{"user_id":"u"} {"user_id":"ignored"}', {"user_id": "u"}),
        ],
    )
    def test_decoding_follows_go(self, raw: bytes, fields: dict[str, Any]) -> None:
        """Duplicates, null, case, float32 rounding, raw metadata and trailing values behave like Go."""
        assert decode_struct(raw, SAVE_FIELDS) == fields

    @pytest.mark.parametrize(
        "raw",
        [
            b"",
            b"   ",
            b"[1]",
            b'"x"',
            b"{",
            b'{"ttl_days":1e2}',
            b'{"ttl_days":9223372036854775808}',
            b'{"content":1}',
            b'{"vector":[true]}',
            b'{"vector":[[1]]}',
            b'{"metadata":NaN}',
            b"\xef\xbb\xbf{}",
        ],
    )
    def test_go_decode_errors(self, raw: bytes) -> None:
        """Bodies Go's decoder refuses raise GoDecodeError."""
        with pytest.raises(GoDecodeError):
            decode_struct(raw, SAVE_FIELDS)


class TestEncode:
    @pytest.mark.parametrize(
        ("value", "text"),
        [
            (1.0, "1"),
            (0.5, "0.5"),
            (-0.0, "-0"),
            (100.0, "100"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.30000000000000004, "0.30000000000000004"),
        ],
    )
    def test_floats_are_spelled_like_encoding_json(self, value: float, text: str) -> None:
        """Float64 values use Go's shortest spelling and exponent thresholds."""
        assert go_float(value) == text

    def test_strings_escape_html_and_keep_unicode(self) -> None:
        """<, >, &, U+2028 and U+2029 are escaped; other non-ASCII stays raw; no spaces."""
        assert go_dumps({"s": "<a&b>\u2028é\n", "r": Raw('{ "x" : "<" }'), "l": [True, None]}) == (
            '{"s":"\\u003ca\\u0026b\\u003e\\u2028é\\n","r":{"x":"\\u003c"},"l":[true,null]}'
        )


class TestQuery:
    @pytest.mark.parametrize(
        ("raw", "parsed"),
        [
            ("a=1&b=2", {"a": ["1"], "b": ["2"]}),
            ("a=1&a=2", {"a": ["1", "2"]}),
            ("a=x+y%21", {"a": ["x y!"]}),
            ("a=1;b=2&c=3", {"c": ["3"]}),
            ("a=%zz&c=3", {"c": ["3"]}),
            ("&&a", {"a": [""]}),
        ],
    )
    def test_query_parsing_drops_what_go_drops(self, raw: str, parsed: dict[str, list[str]]) -> None:
        """Pairs with ';' or bad escapes vanish, '+' is a space, empty pairs are skipped."""
        assert go_query(raw) == parsed


class TestTimes:
    def test_rfc3339_forms(self) -> None:
        """Times are UTC: RFC3339Nano with trimmed zeros for search, whole seconds for list, zero time for NULL."""
        t = datetime(2026, 3, 1, 14, 0, 5, 120000, tzinfo=timezone(timedelta(hours=2)))
        assert (rfc3339(t, nano=True), rfc3339(t), rfc3339(None)) == (
            "2026-03-01T12:00:05.12Z",
            "2026-03-01T12:00:05Z",
            "0001-01-01T00:00:00Z",
        )

    @pytest.mark.parametrize(("days", "wraps"), [(15, False), (106_751, False), (106_752, True)])
    def test_ttl_wraps_at_int64_nanoseconds(self, days: int, wraps: bool) -> None:
        """Days beyond ~106751 overflow Go's Duration and wrap negative."""
        delta = ttl_delta(days)
        assert (delta < timedelta(0)) == wraps
        assert wraps or delta == timedelta(days=days)
