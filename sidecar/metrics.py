"""Prometheus metrics for the data plane and the state an operator watches: ``memgov_`` prefix,
bounded labels only.

Labels are drawn from closed sets (route class, HTTP status, upstream name, decision action,
reason code, operation, engine, erasure state). Never a user, room, scope, agent or entry id.
"""

from __future__ import annotations

import os
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

_LATENCY_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

REQUESTS = Counter(
    "memgov_requests_total", "Data-plane requests by route class and response status.", ["route_class", "status"]
)
REQUEST_SECONDS = Histogram(
    "memgov_request_duration_seconds",
    "Data-plane request latency until the response head is sent.",
    ["route_class"],
    buckets=_LATENCY_BUCKETS,
)
UPSTREAM_SECONDS = Histogram(
    "memgov_upstream_duration_seconds",
    "Upstream latency until response headers arrive.",
    ["upstream"],
    buckets=_LATENCY_BUCKETS,
)
UPSTREAM_FAILURES = Counter(
    "memgov_upstream_failures_total", "Upstream requests that failed before a response.", ["upstream", "kind"]
)
GOVERNED_DECISIONS = Counter(
    "memgov_governed_decisions_total",
    "Governed requests by operation, action and reason.",
    ["operation", "action", "reason"],
)
DEFINITION_CLAIMS = Counter(
    "memgov_definition_claims_total",
    "kagent definition writes found claiming memgov's boundary, by kind of field (label, annotation, name,"
    " service_account, secret, host_path).",
    ["claim"],
)
MEMORY_OPERATIONS = Counter(
    "memgov_memory_operations_total",
    "Admitted memory work by kind (embedding items, summarizations, saves, retrievals); not model tokens.",
    ["kind"],
)
ROTATIONS = Counter(
    "memgov_rotations_total", "Namespace rotations (exact erasure over REST) that ended, by outcome.", ["outcome"]
)
AUDIT_WRITES = Counter("memgov_audit_records_total", "Content-free audit records written.", ["kind"])
AUDIT_SPOOLED = Gauge(
    "memgov_audit_spool_records",
    "Audit records and counted refusals kept locally while the state store is down, waiting to be replayed.",
    multiprocess_mode="livesum",
)
AUDIT_SPOOL_DROPPED = Counter(
    "memgov_audit_spool_dropped_total",
    "Audit records (kind audit) and counted refusals (kind refusal_count) lost: the spool was full, or the"
    " process stopped before the state store came back.",
    ["kind"],
)

KEY_VERIFICATIONS = Counter(
    "memgov_key_verifications_total",
    "Credentials that verified, by purpose (session, bridge, operator) and key slot: the session-key slot"
    " (current, previous, next) or the verification key's configured id. A slot that stops counting is no"
    " longer used.",
    ["purpose", "slot"],
)
KEY_RELOADS = Counter(
    "memgov_key_reloads_total",
    "Key files and folders read again after a change, by outcome: loaded, or rejected (the keys in use stay).",
    ["outcome"],
)

AUDIT_SPOOL_LEFT = Counter(
    "memgov_audit_spool_left_total",
    "Audit records (kind audit) and counted refusals (kind refusal_count) a stopping process left in its"
    " spool folder with the state store down: the next process replays them; lost if the folder goes too.",
    ["kind"],
)

# Client connections of each listener (data, control, ops), counted as they open and close
# (sidecar/connections.py). A reason is per_address or total (refused at accept, over a cap),
# header_too_large (an unfinished head outgrew its size), header_timeout (a request head had begun
# but was not complete in time) or idle (no byte of a request arrived in time: how every
# kept-alive connection ends).
CONNECTIONS_OPEN = Gauge(
    "memgov_connections_open", "Open client connections by listener.", ["listener"], multiprocess_mode="livesum"
)
CONNECTIONS_CLOSED = Counter(
    "memgov_connections_closed_total",
    "Client connections refused at accept or closed before a complete request head, by listener and reason.",
    ["listener", "reason"],
)

# Set by the state store's health check (sidecar/state/health.py). With several workers
# (sidecar/workers.py) it is merged over the live ones: the store is down when any worker found it down.
STATE_AVAILABLE = Gauge(
    "memgov_state_available",
    "1 while the state store answers its health check, 0 while it does not (memory degrades, chat goes on).",
    multiprocess_mode="livemin",
)

# Read from the state store every few seconds (sidecar/sampler.py); every replica reports the same store.
# A backlog is the largest any worker read.
ERASURES = Gauge(
    "memgov_erasures", "Erasure records in the state store by state.", ["state"], multiprocess_mode="livemax"
)
ERASURE_OLDEST_UNFINISHED = Gauge(
    "memgov_erasure_oldest_unfinished_seconds",
    "Age of the oldest erasure not yet verified or failed (0: none).",
    multiprocess_mode="livemax",
)
EXPIRY_OVERDUE = Gauge(
    "memgov_expiry_overdue_seconds",
    "How long the oldest expired entry has waited for physical deletion (0: none); the bound is 24 h.",
    multiprocess_mode="livemax",
)

# Read from kagent at start and every upstream.kagent_refresh_s (the same in every worker).
KAGENT_RELEASE_UNTESTED = Gauge(
    "memgov_kagent_release_untested",
    "1 while kagent's controller reports a release memgov is not tested against, or none it recognises"
    " (/readyz names it and the tested ones); 0 on a tested release.",
    multiprocess_mode="livemax",
)
ROTATION_AGENTS_WITHOUT_MODEL = Gauge(
    "memgov_rotation_agents_without_model",
    "Memory-enabled agents with rotation on but no embedding model, neither configured nor declared by their"
    " kagent definition: forget-one and hard expiry of their scopes stay pending until the namespace is"
    " cleared (0: every agent is exact).",
    multiprocess_mode="livemax",
)


_REQUEST_CHILDREN: dict[tuple[str, int], tuple[Any, Any]] = {}


def request_children(route_class: str, status: int) -> tuple[Any, Any]:
    """The request counter and latency histogram children for one (class, status), made once."""
    key = (route_class, status)
    children = _REQUEST_CHILDREN.get(key)
    if children is None:
        children = (REQUESTS.labels(route_class, status_label(status)), REQUEST_SECONDS.labels(route_class))
        _REQUEST_CHILDREN[key] = children
    return children


_UPSTREAM_CHILDREN: dict[str, Any] = {}


def upstream_seconds(upstream: str) -> Any:
    """The upstream latency histogram child for one upstream name (a fixed few), made once."""
    child = _UPSTREAM_CHILDREN.get(upstream)
    if child is None:
        child = _UPSTREAM_CHILDREN[upstream] = UPSTREAM_SECONDS.labels(upstream)
    return child


def status_label(status: int) -> str:
    """Return a bounded status label: the code when it is a valid HTTP status, else 'other'."""
    return str(status) if 100 <= status <= 599 else "other"


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """Render the Prometheus text exposition of a registry (of every worker's samples, with several)."""
    if registry is REGISTRY and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        merged = CollectorRegistry()
        MultiProcessCollector(merged)  # type: ignore[no-untyped-call]  # prometheus_client leaves its __init__ untyped
        return generate_latest(merged)
    return generate_latest(registry)
