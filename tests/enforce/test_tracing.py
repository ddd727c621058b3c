"""Traces through a real gateway: one trace per request across classify, identify, state, decide and
forward, erasure steps as spans, and W3C traceparent carried on to kagent."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from sidecar.root import erasure_engine
from sidecar.state.types import ErasureKind
from tests.support.stack import APP

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


def _named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


def _ids(traceparent: str | None) -> tuple[str, str]:
    assert traceparent is not None
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


class TestGovernedRequest:
    async def test_search_is_one_trace_through_every_stage(self, stack: Any, spans: InMemorySpanExporter) -> None:
        """A governed search continues the caller's trace through each stage and kagent joins it."""
        await stack.scope()
        key = await stack.session_key()
        body = {"agent_name": APP, "user_id": key, "vector": await stack.embed_one("tea"), "limit": 5}
        spans.clear()
        async with stack.http.post(
            stack.gw.data_url + "/api/memories/search",
            json=body,
            headers={"X-Agent-Name": APP, "traceparent": TRACEPARENT},
        ) as resp:
            assert resp.status == 200
            decision_id = resp.headers["X-Memgov-Decision"].rsplit("id=", 1)[1]
        stages = {
            "memgov.request",
            "memgov.classify",
            "memgov.identify",
            "memgov.state",
            "memgov.decide",
            "memgov.forward",
        }
        assert stages <= {s.name for s in spans.get_finished_spans()}
        assert {format(s.context.trace_id, "032x") for s in spans.get_finished_spans()} == {CALLER_TRACE}
        (root,) = _named(spans, "memgov.request")
        assert (root.attributes or {})["decision_id"] == decision_id
        assert (root.attributes or {})["action"] == "forward"
        (decide,) = _named(spans, "memgov.decide")
        assert (decide.attributes or {})["operation"] == "memory.search"
        seen = stack.dev.recorder.of_kind("memory")[-1]
        (forward,) = _named(spans, "memgov.forward")
        assert _ids(seen.header("traceparent")) == (CALLER_TRACE, format(forward.context.span_id, "016x"))

    async def test_passthrough_carries_memgovs_span_to_kagent(self, stack: Any, spans: InMemorySpanExporter) -> None:
        """A relayed call reaches kagent as a child of memgov's forward span."""
        async with stack.http.get(stack.gw.data_url + "/api/agents", headers={"traceparent": TRACEPARENT}) as resp:
            assert resp.status == 200
        (forward,) = _named(spans, "memgov.forward")
        seen = stack.dev.recorder.of_kind("api")[-1]
        assert _ids(seen.header("traceparent")) == (CALLER_TRACE, format(forward.context.span_id, "016x"))
        (root,) = _named(spans, "memgov.request")
        assert (root.kind, forward.kind) == (SpanKind.SERVER, SpanKind.CLIENT)
        assert {
            k: (root.attributes or {})[k] for k in ("http.request.method", "http.route", "http.response.status_code")
        } == {
            "http.request.method": "GET",
            "http.route": "/api/{collection}",
            "http.response.status_code": 200,
        }
        assert (forward.attributes or {})["server.address"] == "127.0.0.1"

    async def test_tracing_off_relays_the_callers_header_untouched(self, stack: Any) -> None:
        """Without tracing memgov adds nothing: the caller's traceparent reaches kagent as sent."""
        async with stack.http.get(stack.gw.data_url + "/api/agents", headers={"traceparent": TRACEPARENT}) as resp:
            assert resp.status == 200
        assert stack.dev.recorder.of_kind("api")[-1].header("traceparent") == TRACEPARENT


class TestErasure:
    async def test_each_erasure_step_is_a_span(self, stack: Any, spans: InMemorySpanExporter) -> None:
        """A forget-all runs fenced, quiesced, deleted and verified, each a span naming the erasure and step."""
        scope = await stack.scope()
        erasure = await erasure_engine(stack.parts).erase(scope, ErasureKind.FORGET_ALL, "subject")
        steps = [
            s
            for s in _named(spans, "memgov.erasure.step")
            if (s.attributes or {}).get("erasure_id") == erasure.erasure_id
        ]
        assert [(s.attributes or {})["step"] for s in steps] == ["fenced", "quiesced", "deleted", "verified"]
        assert all((s.attributes or {})["adapter"] == erasure.adapter for s in steps)
