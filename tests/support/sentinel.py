"""Sentinel helper: plant a unique string, then prove it reached none of the sinks.

A sink is any text the outside world can see: every log line (all levels), the Prometheus
exposition, every trace span (recorded in memory while the block runs), audit rows, response
bodies and headers. The sentinel is searched for in plain,
JSON-escaped, URL-encoded and base64 form (the encoding logic lives in
``sidecar.drill.sentinels``, shared with ``memgov drill``).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar import tracing
from sidecar.drill.sentinels import encoded_forms, find_leaks, make_sentinel
from sidecar.logs import configure_logging
from sidecar.metrics import exposition

__all__ = ["Sinks", "assert_absent", "capture_sinks", "encoded_forms", "find_leaks", "make_sentinel"]


def assert_absent(sentinel: str, *haystacks: str | bytes) -> None:
    """Fail if the sentinel appears in any haystack in any encoded form."""
    leaks = find_leaks(sentinel, haystacks)
    assert not leaks, f"sentinel leaked in {len(leaks)} form(s)"


class Sinks:
    """Captures every sink of an in-process gateway while a test runs."""

    def __init__(self) -> None:
        self.log_stream = io.StringIO()
        self.spans = InMemorySpanExporter()
        self.responses: list[str] = []
        self.extra: list[str] = []

    def record(self, status: int, headers: Iterable[tuple[str, str]], body: bytes | str) -> None:
        """Remember one response (status line, headers, body) as seen by a client."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        self.responses.append(f"{status}\n" + "\n".join(f"{k}: {v}" for k, v in headers) + "\n" + text)

    def texts(self) -> list[str]:
        spans = [span.to_json() for span in self.spans.get_finished_spans()]
        return [self.log_stream.getvalue(), exposition().decode(), *spans, *self.responses, *self.extra]

    def assert_clean(self, *sentinels: str) -> None:
        assert self.spans.get_finished_spans(), "no span was recorded, so the trace sink was not exercised"
        for sentinel in sentinels:
            assert_absent(sentinel, *self.texts())


@contextmanager
def capture_sinks() -> Iterator[Sinks]:
    """Route all logging (debug and up) and every trace span into buffers for the duration of the block."""
    sinks = Sinks()
    configure_logging("debug", sinks.log_stream)
    tracing.export_to(sinks.spans)
    try:
        yield sinks
    finally:
        tracing.shutdown()
        configure_logging("info")
