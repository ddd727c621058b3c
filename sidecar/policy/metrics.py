"""Prometheus metrics of the policy stage, ``memgov_policy_`` prefix, bounded labels only.

Labels come from closed sets: operation, action, reason code, engine name, reload outcome. The
only open-ended label is the pack revision on the info gauges, which hold one series at a time.
"""

from __future__ import annotations

import os
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from sidecar.policy.model import Decision, Operation

_BUCKETS: Final = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)

POLICY_DECISIONS = Counter(
    "memgov_policy_decisions_total",
    "Policy decisions by operation, action, reason code and engine (one count per reason).",
    ["operation", "action", "reason", "engine"],
)
DECISION_SECONDS = Histogram(
    "memgov_policy_decision_duration_seconds",
    "Time to decide, engine and floor included.",
    ["engine"],
    buckets=_BUCKETS,
)
ENGINE_FAILURES = Counter(
    "memgov_policy_engine_failures_total",
    "Engine calls that failed and were answered policy_unavailable.",
    ["engine", "kind"],
)
SHADOW_DISAGREEMENTS = Counter(
    "memgov_policy_shadow_disagreements_total",
    "Shadow-mode decisions where the comparison engine disagreed with the enforcing one.",
    ["operation"],
)
RELOADS = Counter("memgov_policy_reloads_total", "Pack reload attempts by outcome.", ["outcome"])
# Merged over live workers (sidecar/workers.py): ready only when every worker is.
READY = Gauge("memgov_policy_ready", "1 when a validated pack is loaded.", multiprocess_mode="livemin")
PACK_INFO = Gauge(
    "memgov_policy_pack_info",
    "The loaded pack revision (content hash) and engine.",
    ["engine", "revision"],
    multiprocess_mode="livemax",
)

OPA_BUNDLE = Gauge(
    "memgov_policy_opa_bundle_info",
    "The pack revision the OPA server says it serves (its bundle manifest).",
    ["revision"],
    multiprocess_mode="livemax",
)


def count_decision(operation: Operation, decision: Decision, seconds: float) -> None:
    """Count one decision under each of its reason codes and observe its latency."""
    for reason in decision.reasons:
        POLICY_DECISIONS.labels(operation.value, decision.action.value, reason.value, decision.engine).inc()
    DECISION_SECONDS.labels(decision.engine).observe(seconds)


_SHOWN: dict[str, tuple[str, ...]] = {}


def _only(gauge: Gauge, labels: tuple[str, ...] | None) -> None:
    """Make ``labels`` the info gauge's only series at 1 (none when None)."""
    old = _SHOWN.pop(gauge._name, None)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Several workers (sidecar/workers.py): a sample cannot be removed, only set to 0; the
        # merged series stays 1 while any worker still shows it.
        if old is not None and old != labels:
            gauge.labels(*old).set(0)
    else:
        gauge.clear()
    if labels is not None:
        gauge.labels(*labels).set(1)
        _SHOWN[gauge._name] = labels


def show_pack(engine: str, revision: str | None) -> None:
    """Publish the loaded revision as the only series of the info gauge."""
    _only(PACK_INFO, None if revision is None else (engine, revision))
    READY.set(1 if revision is not None else 0)


def show_opa_bundle(revision: str | None) -> None:
    """Publish the revision OPA serves as the only series of its info gauge."""
    _only(OPA_BUNDLE, None if revision is None else (revision,))
