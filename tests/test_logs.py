"""The allow-list log sanitizer: unknown keys dropped, shapes enforced, failures drop the event."""

from __future__ import annotations

import errno
import io
import json
import logging
import sys

import pytest

from sidecar.logs import configure_logging, error_type, get_logger, sanitize_for_test
from tests.support.sentinel import assert_absent, make_sentinel


class TestAllowListSanitizer:
    @pytest.mark.parametrize(
        ("event", "expected"),
        [
            ({"event": "request.done", "status": 200}, {"event": "request.done", "status": 200}),
            ({"event": "x", "query": "what is my password"}, {"event": "x", "dropped_fields": 1}),
            ({"event": "x", "reason": "not_a_code"}, {"event": "x", "dropped_fields": 1}),
            ({"event": "x", "reason": "rate_limited"}, {"event": "x", "reason": "rate_limited"}),
            ({"event": "x", "route": "/api/sessions/{id}"}, {"event": "x", "route": "/api/sessions/{id}"}),
            ({"event": "x", "route": "/api/sessions/a b"}, {"event": "x", "dropped_fields": 1}),
            ({"event": "x", "count": True}, {"event": "x", "dropped_fields": 1}),
            ({"event": "x", "count": "12"}, {"event": "x", "dropped_fields": 1}),
            ({"event": "x", "duration_ms": 1.5}, {"event": "x", "duration_ms": 1.5}),
            ({"event": "x", "decision_id": "d_0123abcd"}, {"event": "x", "decision_id": "d_0123abcd"}),
            ({"event": "x", "decision_id": "has space"}, {"event": "x", "dropped_fields": 1}),
            (
                {"event": "x", "reasons": ["stale_generation", "key_invalid"]},
                {"event": "x", "reasons": ["stale_generation", "key_invalid"]},
            ),
            ({"event": "x", "reasons": ["stale_generation", "free text"]}, {"event": "x", "dropped_fields": 1}),
            ({"event": "x", "exc_info": True}, {"event": "x", "dropped_fields": 1}),
        ],
    )
    def test_fields(self, event, expected):
        """Only allow-listed keys with values of the declared shape survive."""
        assert sanitize_for_test(event) == expected

    @pytest.mark.parametrize("name", ["Free text event", "x" * 80, "", None, 42, "memory: I like cats"])
    def test_malformed_event_name_drops_the_event(self, name):
        """An event name that is not a short code drops the whole event."""
        assert sanitize_for_test({"event": name, "status": 200}) is None

    def test_predicate_failure_drops_the_event(self):
        """An exception inside the sanitizer drops the event instead of emitting it raw."""

        class Evil(str):
            def __eq__(self, other):  # pragma: no cover - only reached via the sanitizer
                raise RuntimeError("boom")

            __hash__ = str.__hash__

        assert sanitize_for_test({"event": "x", "reason": Evil("rate_limited")}) is None


class TestConfiguredPipeline:
    def test_sentinel_in_any_field_never_reaches_output(self):
        """Content smuggled into log calls, library records and exceptions is not written."""
        secret = make_sentinel("log")
        out = io.StringIO()
        configure_logging("debug", out)
        try:
            log = get_logger("test")
            log.info("memory.saved", content=secret, query=secret, status=201)
            log.debug(secret)
            log.warning("x", error_type=secret)
            try:
                raise ValueError(secret)
            except ValueError:
                log.exception("request.failed")
                logging.getLogger("aiohttp.server").exception("Error handling request %s", secret)
            logging.getLogger("asyncio").warning("Task exception: %s", secret)
        finally:
            configure_logging("info")
        text = out.getvalue()
        assert_absent(secret, text)
        events = [json.loads(line)["event"] for line in text.splitlines()]
        assert events == ["memory.saved", "x", "request.failed", "library_log", "library_log"]

    def test_level_filter(self):
        """Events below the configured level are not emitted."""
        out = io.StringIO()
        configure_logging("warning", out)
        try:
            get_logger("t").info("quiet.event")
            get_logger("t").error("loud.event")
        finally:
            configure_logging("info")
        assert [json.loads(x)["event"] for x in out.getvalue().splitlines()] == ["loud.event"]

    def test_a_logger_made_earlier_follows_each_configuration(self):
        """A module-level logger keeps its bound logger only while the configuration and the
        output stream it was bound under stand: it writes where and at the level configured now."""
        log = get_logger("t")
        first, second = io.StringIO(), io.StringIO()
        try:
            configure_logging("info", first)
            log.info("one.event")
            log.debug("hidden.event")
            configure_logging("debug", second)
            log.debug("two.event")
        finally:
            configure_logging("info")
        assert [json.loads(x)["event"] for x in first.getvalue().splitlines()] == ["one.event"]
        assert [json.loads(x)["event"] for x in second.getvalue().splitlines()] == ["two.event"]

    def test_a_logger_on_stdout_follows_a_replaced_stdout(self, monkeypatch):
        """Configured without a stream, a logger writes to ``sys.stdout`` as it is at the call."""
        log = get_logger("t")
        configure_logging("info")
        before, after = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdout", before)
        log.info("one.event")
        monkeypatch.setattr(sys, "stdout", after)
        log.info("two.event")
        assert [json.loads(x)["event"] for x in before.getvalue().splitlines()] == ["one.event"]
        assert [json.loads(x)["event"] for x in after.getvalue().splitlines()] == ["two.event"]

    def test_the_bound_logger_is_reused_between_calls(self):
        """Under one configuration a logging call binds nothing new (the per-request saving)."""
        log = get_logger("t")
        configure_logging("info", io.StringIO())
        try:
            assert log._logger() is log._logger()
        finally:
            configure_logging("info")


class TestErrorType:
    @pytest.mark.parametrize(
        ("exc", "named"),
        [
            (OSError(errno.EADDRINUSE, "Address already in use: 10.0.0.7"), "EADDRINUSE"),
            (ConnectionRefusedError(errno.ECONNREFUSED, "refused by db.internal"), "ECONNREFUSED"),
            (OSError("no errno"), "OSError"),
            (RuntimeError("kagent said something"), "RuntimeError"),
        ],
    )
    def test_names_the_errno_or_the_type_never_the_message(self, exc: BaseException, named: str) -> None:
        """An OS error is named by its errno (a port taken says EADDRINUSE), anything else by its type."""
        assert error_type(exc) == named
