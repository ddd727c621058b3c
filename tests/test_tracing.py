"""Traces: off by default, content-free spans, W3C traceparent in and out, OTLP/HTTP export."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest
from aiohttp import ClientSession, web
from multidict import CIMultiDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sidecar import tracing
from sidecar.logs import configure_logging, get_logger
from sidecar.settings import TracingSettings
from sidecar.upstream import Upstream
from tests.support.sentinel import assert_absent, make_sentinel

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class TestOff:
    def test_off_by_default(self) -> None:
        """Without configuration no span is made and no header is written."""
        tracing.configure(TracingSettings())
        with tracing.span("memgov.classify", route_class="memory.search") as handle:
            handle.set(action="forward")
        headers: dict[str, str] = {}
        tracing.inject(headers)
        assert headers == {}


class TestSpans:
    def test_attributes_pass_the_log_allow_list(self, spans: InMemorySpanExporter) -> None:
        """Known keys with well-shaped values are kept; unknown keys and odd values are dropped."""
        secret = make_sentinel("attr")
        with tracing.span("memgov.decide", operation="memory.save", query=secret, status="200") as handle:
            handle.set(action="deny", reasons=["consent_missing"], reason=secret, decision_id="d_0123456789abcdef")
        (span,) = spans.get_finished_spans()
        assert span.name == "memgov.decide"
        assert dict(span.attributes or {}) == {
            "operation": "memory.save",
            "action": "deny",
            "reasons": ("consent_missing",),
            "decision_id": "d_0123456789abcdef",
        }
        assert_absent(secret, span.to_json())

    def test_exception_keeps_only_its_type(self, spans: InMemorySpanExporter) -> None:
        """A failing block marks its span failed with the exception's type; the message goes nowhere."""
        secret = make_sentinel("exc")
        with pytest.raises(RuntimeError), tracing.span("memgov.forward"):
            raise RuntimeError(f"kagent said {secret}")
        (span,) = spans.get_finished_spans()
        assert span.status.status_code is StatusCode.ERROR and span.status.description is None
        assert span.attributes == {"error.type": "RuntimeError"} and not span.events
        assert_absent(secret, span.to_json())

    def test_names_are_fixed_codes(self, spans: InMemorySpanExporter) -> None:
        """A span name is a memgov.* code, never something built from a request."""
        with pytest.raises(ValueError), tracing.span("GET /api/memories?user_id=alice"):
            pass

    def test_children_nest_under_the_request(self, spans: InMemorySpanExporter) -> None:
        """Stage spans are children of the request span, in one trace."""
        with tracing.span("memgov.request"), tracing.span("memgov.identify"):
            pass
        child, parent = spans.get_finished_spans()
        assert child.parent is not None and child.parent.span_id == parent.context.span_id
        assert child.context.trace_id == parent.context.trace_id


class TestHelpers:
    async def test_async_with_and_traced_functions(self, spans: InMemorySpanExporter) -> None:
        """`async with span` and @traced coroutines nest like `with`, and annotate() reaches the current span."""

        @tracing.traced("memgov.erasure.step", lambda erasure_id, step: {"erasure_id": erasure_id, "step": step})
        async def work(erasure_id: str, step: str) -> str:
            tracing.annotate(adapter="rest", query="not allowed")
            return step

        async with tracing.span("memgov.request"):
            assert await work("e0123456789abcdef01234567", "deleted") == "deleted"
        inner, outer = spans.get_finished_spans()
        assert inner.name == "memgov.erasure.step" and inner.parent is not None
        assert inner.parent.span_id == outer.context.span_id
        assert dict(inner.attributes or {}) == {
            "erasure_id": "e0123456789abcdef01234567",
            "step": "deleted",
            "adapter": "rest",
        }

    async def test_traced_attributes_named_like_span_parameters(self, spans: InMemorySpanExporter) -> None:
        """An attribute called ``kind`` (an erasure's kind) is recorded as one; the span stays INTERNAL."""

        @tracing.traced("memgov.erasure.step", lambda erasure_id: {"erasure_id": erasure_id, "kind": "forget"})
        async def work(erasure_id: str) -> None:
            return None

        await work("e0123456789abcdef01234567")
        (span,) = spans.get_finished_spans()
        assert span.kind is SpanKind.INTERNAL
        assert dict(span.attributes or {}) == {"erasure_id": "e0123456789abcdef01234567", "kind": "forget"}

    async def test_request_middleware_is_the_root(self, spans: InMemorySpanExporter, aiohttp_client: Any) -> None:
        """Each data-plane request gets a root span with its method and status, under the caller's trace."""

        async def ok(request: web.Request) -> web.Response:
            with tracing.span("memgov.classify"):
                return web.Response(status=204)

        app = web.Application(middlewares=[tracing.trace_requests])
        app.router.add_route("*", "/{tail:.*}", ok)
        client = await aiohttp_client(app)
        resp = await client.request("PROPFIND", "/x", headers={"traceparent": PARENT})
        assert resp.status == 204
        child, root = spans.get_finished_spans()
        attributes = {"http.request.method": "_OTHER", "http.response.status_code": 204}
        assert (root.name, root.kind, dict(root.attributes or {})) == ("memgov.request", SpanKind.SERVER, attributes)
        assert format(root.context.trace_id, "032x") == PARENT.split("-")[1]
        assert child.parent is not None and child.parent.span_id == root.context.span_id


class TestPropagation:
    def test_callers_traceparent_is_the_parent(self, spans: InMemorySpanExporter) -> None:
        """A request span continues the caller's trace; tracestate and baggage (free text) are not read."""
        secret = make_sentinel("state")
        headers = {"Traceparent": PARENT, "tracestate": f"vendor={secret}", "baggage": f"user={secret}"}
        with tracing.span("memgov.request", parent=headers):
            pass
        (span,) = spans.get_finished_spans()
        assert format(span.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
        assert span.parent is not None and format(span.parent.span_id, "016x") == "b7ad6b7169203331"
        assert_absent(secret, span.to_json())

    def test_malformed_traceparent_starts_a_new_trace(self, spans: InMemorySpanExporter) -> None:
        """A traceparent that is not W3C-shaped is ignored."""
        with tracing.span("memgov.request", parent={"traceparent": "00-zzzz-not-a-trace-01"}):
            pass
        (span,) = spans.get_finished_spans()
        assert span.parent is None

    def test_outgoing_requests_carry_the_current_span(self, spans: InMemorySpanExporter) -> None:
        """inject() replaces any traceparent with the current span's, so kagent joins memgov's trace."""
        headers = {"TRACEPARENT": PARENT, "Content-Type": "application/json"}
        with tracing.span("memgov.forward"):
            tracing.inject(headers)
        (span,) = spans.get_finished_spans()
        assert list(headers) == ["Content-Type", "traceparent"]
        version, trace_id, span_id, flags = headers["traceparent"].split("-")
        assert (version, trace_id, span_id) == ("00", f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")
        assert int(flags, 16) & 1  # sampled


class TestWhatAnSreSees:
    async def test_upstream_calls_are_client_spans(self, spans: InMemorySpanExporter, aiohttp_server: Any) -> None:
        """An upstream exchange is a CLIENT span with the semantic-convention names, and the upstream joins it."""
        seen: list[str] = []

        async def kagent(request: web.Request) -> web.Response:
            seen.append(request.headers["traceparent"])
            return web.Response(status=201)

        app = web.Application()
        app.router.add_post("/api/x", kagent)
        server = await aiohttp_server(app)
        async with ClientSession() as session:
            upstream = Upstream("controller", str(server.make_url("")).rstrip("/"), session)
            with tracing.span("memgov.request", kind=SpanKind.SERVER):
                async with upstream.request("POST", "/api/x?user_id=secret", headers=CIMultiDict()) as resp:
                    assert resp.status == 201
        client, root = spans.get_finished_spans()
        assert (client.name, client.kind, client.parent.span_id) == (
            "memgov.forward",
            SpanKind.CLIENT,
            root.context.span_id,
        )  # type: ignore[union-attr]
        assert dict(client.attributes or {}) == {
            "upstream": "controller",
            "http.request.method": "POST",
            "server.address": "127.0.0.1",
            "server.port": server.port,
            "http.response.status_code": 201,
        }
        assert [h.split("-")[:3] for h in seen] == [
            ["00", f"{client.context.trace_id:032x}", f"{client.context.span_id:016x}"]
        ]

    def test_resource_takes_the_downward_api_attributes(
        self, monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter
    ) -> None:
        """OTEL_RESOURCE_ATTRIBUTES (k8s.* from the chart) lands on the resource; service.name stays memgov's."""
        monkeypatch.setenv(
            "OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=memgov-7d9f,k8s.namespace.name=kagent,service.name=x"
        )
        exporter = InMemorySpanExporter()
        tracing.export_to(exporter)
        with tracing.span("memgov.classify"):
            pass
        (span,) = exporter.get_finished_spans()
        resource = dict(span.resource.attributes)
        assert (resource["k8s.pod.name"], resource["k8s.namespace.name"]) == ("memgov-7d9f", "kagent")
        assert resource["service.name"] == "memgov"

    def test_log_lines_inside_a_span_carry_its_ids(self, spans: InMemorySpanExporter) -> None:
        """A log line emitted inside a span names its trace_id and span_id; one outside names none."""
        out = io.StringIO()
        configure_logging("info", out)
        log = get_logger("test")
        with tracing.span("memgov.decide"):
            log.info("inside")
        log.info("outside")
        inside, outside = (json.loads(line) for line in out.getvalue().splitlines())
        (span,) = spans.get_finished_spans()
        assert (inside["trace_id"], inside["span_id"]) == (
            f"{span.context.trace_id:032x}",
            f"{span.context.span_id:016x}",
        )
        assert "trace_id" not in outside and "span_id" not in outside


class TestOtlpExport:
    async def test_spans_reach_an_otlp_http_collector(self, aiohttp_server: Any) -> None:
        """configure() exports over OTLP/HTTP (protobuf) to the configured endpoint."""
        received: list[ExportTraceServiceRequest] = []

        async def collect(request: web.Request) -> web.Response:
            message = ExportTraceServiceRequest()
            message.ParseFromString(await request.read())
            received.append(message)
            return web.Response(status=200)

        app = web.Application()
        app.router.add_post("/v1/traces", collect)
        server = await aiohttp_server(app)
        tracing.configure(TracingSettings(enabled=True, endpoint=str(server.make_url("/v1/traces"))))
        try:
            with tracing.span("memgov.classify", route_class="memory.search"):
                pass
        finally:
            await asyncio.to_thread(tracing.shutdown)  # flushes the batch: a blocking HTTP post
        (request,) = received
        resource = request.resource_spans[0]
        names = [s.name for scope in resource.scope_spans for s in scope.spans]
        service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
        assert (names, service) == (["memgov.classify"], "memgov")
