"""Values the chart is rendered with: the matrix every check runs over."""

from __future__ import annotations

from typing import Any

CLIENT_PEER: dict[str, Any] = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "kagent-tools"}}}
ENFORCE: dict[str, Any] = {"stage": "enforce"}
PROVIDER_CIDR = "203.0.113.0/24"
POSTGRES_PEER: dict[str, Any] = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "databases"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "postgresql"}},
}
COLLECTOR_PEER: dict[str, Any] = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
    "podSelector": {"matchLabels": {"app": "otel-collector"}},
}
OPA_PEER: dict[str, Any] = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "opa"}},
    "podSelector": {"matchLabels": {"app": "opa"}},
}

#: The alerts as an operator enables them: with the absolute URL their team reads the runbook at.
RUNBOOK_URL = "https://docs.example.org/memgov/runbook.md"
PROMETHEUS_RULE: dict[str, Any] = {"enabled": True, "runbookUrl": RUNBOOK_URL}

GATEWAY_DEFAULT: dict[str, Any] = {}

GATEWAY_PRODUCTION: dict[str, Any] = {
    "rollout": ENFORCE,
    "replicaCount": 3,
    "image": {"digest": "sha256:" + "ab" * 32},
    "podAnnotations": {"example.org/team": "platform"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}],
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
    ],
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "upstream": {
        "embeddingUrl": "https://embeddings.example.org/v1",
        "embeddingApiKey": {"existingSecret": "memgov-embedding"},
    },
    "state": {"postgresql": {"existingSecret": "memgov-state"}},
    "policy": {"engine": "shadow", "opa": {"container": {"enabled": True}}},
    "secrets": {"previousSessionKey": {"existingSecret": "memgov-session-key-old"}},
    "trust": {"bridgeKey": {"existingSecret": "memgov-bridge"}, "operatorKey": {"existingSecret": "memgov-operator"}},
    "matrix": {"serverName": "example.org", "bridgeBot": "@kagent-bridge:example.org"},
    "agents": {
        "kagent/helper": {
            "disabledVariant": "helper-nomem",
            "ghost": "@agent-helper:example.org",
            "embeddingModel": "text-embedding-3-small",
        }
    },
    "erasure": {"adapter": "kagent-db", "kagentDb": {"existingSecret": "memgov-kagent-db"}},
    "tracing": {"enabled": True, "endpoint": "http://otel-collector.observability:4318/v1/traces"},
    "networkPolicy": {
        "tracing": {"to": [COLLECTOR_PEER]},
        "agents": {"namespaceSelector": {"matchLabels": {"memgov.example.org/agents": "true"}}},
        "clients": [CLIENT_PEER],
        "embedding": {"to": [{"ipBlock": {"cidr": PROVIDER_CIDR}}]},
        "postgresql": {"to": [POSTGRES_PEER]},
    },
}

GATEWAY_EXTERNAL_OPA: dict[str, Any] = {
    "policy": {"engine": "opa", "opa": {"url": "http://opa.opa.svc:8181"}},
    "networkPolicy": {"opa": {"to": [OPA_PEER]}},
}

SIDECAR: dict[str, Any] = {
    "rollout": ENFORCE,
    "mode": "sidecar",
    "policy": {"engine": "opa", "opa": {"container": {"enabled": True}}},
    "upstream": {"embeddingUrl": "https://embeddings.example.org/v1"},
    "networkPolicy": {"clients": [CLIENT_PEER]},
}

GATEWAY_UI_PORT_FORWARD: dict[str, Any] = {"rollout": ENFORCE, "kagent": {"ui": {"gatewayAccess": "port-forward"}}}

NETWORK_POLICIES_OFF: dict[str, Any] = {
    "networkPolicy": {"enabled": False},
    "upstream": {"embeddingUrl": "https://embeddings.example.org/v1"},
    "serviceMonitor": {"enabled": True},
}

MATRIX: dict[str, dict[str, Any]] = {
    "gateway-default": GATEWAY_DEFAULT,
    "gateway-production": GATEWAY_PRODUCTION,
    "gateway-external-opa": GATEWAY_EXTERNAL_OPA,
    "sidecar": SIDECAR,
    "gateway-ui-port-forward": GATEWAY_UI_PORT_FORWARD,
    "network-policies-off": NETWORK_POLICIES_OFF,
}
