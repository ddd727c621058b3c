"""OpenTelemetry traces, off unless configured: content-free spans and W3C traceparent propagation.

Traces are a sink like logs (SPEC R-14): a span's name is a fixed code and its attributes pass the
log allow-list (``logs.ALLOWED``: key known, value of its declared shape), so no memory text,
query, token or upstream body can reach a collector. Exceptions are recorded as a type name and
an error status, never their message or traceback. From a caller only ``traceparent`` is read
(trace and span ids, the sampled flag); ``tracestate`` and baggage, which are free text, are not.

What an SRE's tools expect: the request span is a SERVER span, each upstream call a CLIENT span,
and attributes with an OpenTelemetry semantic convention carry its name (``http.request.method``,
``http.response.status_code``, ``http.route``, ``server.address``, ``server.port``,
``error.type``). ``url.path`` is not recorded: a raw path is caller-chosen text, ``http.route`` is
the classified template. The resource takes ``OTEL_RESOURCE_ATTRIBUTES`` (the chart sets
``k8s.*`` there from the downward API) under memgov's ``service.name``.

    with span("memgov.decide", operation=op.value) as s:      # also `async with`
        ...
        s.set(action=decision.action.value)

    @traced("memgov.identify")                                # a whole coroutine function
    async def identify(...): ...
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Final, ParamSpec, TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from sidecar.logs import ALLOWED
from sidecar.settings import TracingSettings

_NAME: Final = re.compile(r"^memgov\.[a-z][a-z0-9_.]{0,48}$")
_PROPAGATOR: Final = TraceContextTextMapPropagator()
_TRACEPARENT: Final = "traceparent"
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _State:
    tracer: Tracer | None = None
    provider: TracerProvider | None = None


#: Allow-listed keys recorded under their OpenTelemetry semantic-convention name.
SEMCONV: Final = {
    "method": "http.request.method",
    "status": "http.response.status_code",
    "route": "http.route",
    "server_address": "server.address",
    "server_port": "server.port",
    "error_type": "error.type",
}
_SERVER_ADDRESS: Final = re.compile(r"^[A-Za-z0-9.\-:\[\]]{1,253}$")


def _clean(attrs: Mapping[str, object]) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    for key, value in attrs.items():
        check = _SERVER_KEYS.get(key) or ALLOWED.get(key)
        # SECURITY: only allow-listed keys with values of their declared shape reach a collector.
        if value is None or key == "event" or check is None or not check(value):
            continue
        if key == "method" and value == "OTHER":
            value = "_OTHER"  # the convention's name for a method outside the known set
        # Every allow-listed shape is a string, a number or a list of strings.
        if isinstance(value, (list, tuple)):
            out[SEMCONV.get(key, key)] = [x for x in value if isinstance(x, str)]
        elif isinstance(value, (str, int, float)):
            out[SEMCONV.get(key, key)] = value
    return out


def _server_address(value: object) -> bool:
    # An upstream's configured host name (operator configuration, never request text).
    return isinstance(value, str) and _SERVER_ADDRESS.fullmatch(value) is not None


def _server_port(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


_SERVER_KEYS: Final[dict[str, Callable[[object], bool]]] = {
    "server_address": _server_address,
    "server_port": _server_port,
}


class SpanHandle:
    """Adds allow-listed attributes to the span it wraps (does nothing while tracing is off)."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None) -> None:
        self._span = span

    def set(self, **attrs: object) -> None:
        if self._span is not None:
            self._span.set_attributes(_clean(attrs))


_OFF: Final = SpanHandle(None)


class span:
    """A span around a block, child of the current span (or of ``parent``'s traceparent header)."""

    __slots__ = ("_attrs", "_cm", "_kind", "_name", "_parent", "_span")

    def __init__(
        self,
        name: str,
        *,
        parent: Mapping[str, str] | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        **attrs: object,
    ) -> None:
        self._name, self._parent, self._kind, self._attrs = name, parent, kind, attrs
        self._cm: AbstractContextManager[Span] | None = None
        self._span: Span | None = None

    def __enter__(self) -> SpanHandle:
        tracer = _State.tracer
        if tracer is None:
            return _OFF
        if not _NAME.fullmatch(self._name):
            raise ValueError("span names are fixed memgov.* codes")
        context = extract(self._parent) if self._parent is not None else None
        self._cm = tracer.start_as_current_span(
            self._name,
            context=context,
            kind=self._kind,
            attributes=_clean(self._attrs),
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span = self._cm.__enter__()
        return SpanHandle(self._span)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._cm is None:
            return
        if kind is not None and self._span is not None:
            # SECURITY: an exception's message may quote request or upstream text; only its type is kept.
            self._span.set_status(Status(StatusCode.ERROR))
            self._span.set_attributes(_clean({"error_type": kind.__name__}))
        self._cm.__exit__(kind, exc, tb)

    async def __aenter__(self) -> SpanHandle:
        return self.__enter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(kind, exc, tb)


def _span_with(name: str, attrs: Mapping[str, object]) -> span:
    """A span whose attributes come as a mapping: a key named like a parameter of ``span`` (an
    erasure's ``kind``) stays an attribute instead of becoming the span's parent or SpanKind."""
    opened = span(name)
    opened._attrs = dict(attrs)
    return opened


def traced(
    name: str, attrs: Callable[..., Mapping[str, object]] | None = None
) -> Callable[[Callable[_P, Awaitable[_R]]], Callable[_P, Awaitable[_R]]]:
    """Decorate a coroutine function so each call is a span; ``attrs`` maps the call's arguments to attributes."""

    def wrap(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
        @functools.wraps(fn)
        async def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if _State.tracer is None:
                return await fn(*args, **kwargs)
            try:
                found = dict(attrs(*args, **kwargs)) if attrs is not None else {}
            except Exception:  # noqa: BLE001 - attributes are optional; tracing never fails a call
                found = {}
            with _span_with(name, found):
                return await fn(*args, **kwargs)

        return run

    return wrap


def annotate(**attrs: object) -> None:
    """Add allow-listed attributes to the current span (does nothing while tracing is off)."""
    if _State.tracer is not None:
        get_current_span().set_attributes(_clean(attrs))


@web.middleware
async def trace_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The root span of each data-plane request, continuing the caller's trace when it sent one."""
    if _State.tracer is None:
        return await handler(request)
    method = request.method if ALLOWED["method"](request.method) else "OTHER"
    with span("memgov.request", parent=request.headers, kind=SpanKind.SERVER, method=method) as root:
        response = await handler(request)
        root.set(status=response.status)
        return response


def extract(headers: Mapping[str, str]) -> Context | None:
    """The caller's trace context from its ``traceparent`` header alone (None when absent or malformed)."""
    value = next((v for k, v in headers.items() if k.lower() == _TRACEPARENT), None)
    if value is None:
        return None
    return _PROPAGATOR.extract({_TRACEPARENT: value})


def inject(headers: MutableMapping[str, str]) -> None:
    """Set ``traceparent`` on an outgoing request to the current span (kagent, providers); no-op when off."""
    if _State.tracer is None:
        return
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    if _TRACEPARENT in carrier:
        for key in [k for k in headers if k.lower() == _TRACEPARENT]:
            del headers[key]
        headers[_TRACEPARENT] = carrier[_TRACEPARENT]


def _install(provider: TracerProvider) -> None:
    shutdown()
    _State.provider, _State.tracer = provider, provider.get_tracer("memgov")


def configure(settings: TracingSettings) -> None:
    """Start exporting spans over OTLP/HTTP when tracing is enabled; otherwise tracing stays off."""
    if not settings.enabled:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from sidecar import __version__

    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.service_name, "service.version": __version__}),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
    )
    # The batch queue is bounded: when a collector is slow, spans are dropped, never requests held.
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint, timeout=settings.timeout_s))
    )
    _install(provider)


def export_to(exporter: SpanExporter, service_name: str = "memgov") -> None:
    """Send every span to one exporter synchronously (tests: an in-memory exporter is a sink to scan)."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _install(provider)


def shutdown() -> None:
    """Flush and stop the exporter; tracing is off afterwards."""
    provider, _State.provider, _State.tracer = _State.provider, None, None
    if provider is not None:
        provider.shutdown()
