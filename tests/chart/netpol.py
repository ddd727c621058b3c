"""A small, pure evaluator of Kubernetes NetworkPolicy semantics over rendered manifests.

It answers "may src open a connection to dst:port/protocol?" the way the networking.k8s.io/v1
API defines it: a pod selected by a policy of a direction accepts only what one of those policies'
rules allows in that direction; a pod no policy selects is open. A connection needs both src's
egress and dst's ingress to allow it. ipBlock peers are matched against every endpoint's IP,
pods included, which is the more permissive reading (CNIs differ), so a proven denial holds on all.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Policy = Mapping[str, Any]


@dataclass(frozen=True)
class Namespace:
    """A namespace; the API server always sets kubernetes.io/metadata.name."""

    name: str
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        """The namespace's labels, including the immutable name label."""
        return {**self.extra_labels, "kubernetes.io/metadata.name": self.name}


@dataclass(frozen=True)
class Endpoint:
    """A pod (with a namespace) or an address outside the cluster (namespace None)."""

    name: str
    ip: str
    namespace: Namespace | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Apply a LabelSelector; an empty selector matches everything."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in {"In", "NotIn", "Exists", "DoesNotExist"}:
            raise ValueError(f"unknown selector operator {op}")
    return True


def _in_block(block: Mapping[str, Any], ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    if addr not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(addr in ipaddress.ip_network(cidr) for cidr in block.get("except") or [])


def _peer_matches(peer: Mapping[str, Any], policy_namespace: str, other: Endpoint) -> bool:
    if "ipBlock" in peer:
        return _in_block(peer["ipBlock"], other.ip)
    if other.namespace is None:
        return False
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], other.namespace.labels):
            return False
    elif other.namespace.name != policy_namespace:
        return False
    return "podSelector" not in peer or selector_matches(peer["podSelector"], other.labels)


def _port_matches(ports: Sequence[Mapping[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        if "port" not in entry:
            return True
        first = entry["port"]
        if not isinstance(first, int):
            raise ValueError(f"named port {first!r}: the evaluator only knows numeric ports")
        if first <= port <= entry.get("endPort", first):
            return True
    return False


def _policy_types(spec: Mapping[str, Any]) -> list[str]:
    if "policyTypes" in spec:
        return list(spec["policyTypes"])
    return ["Ingress", "Egress"] if "egress" in spec else ["Ingress"]


def _selecting(policies: Sequence[Policy], pod: Endpoint, direction: str) -> list[Policy]:
    if pod.namespace is None:
        return []
    return [
        p
        for p in policies
        if p["kind"] == "NetworkPolicy"
        and p["metadata"]["namespace"] == pod.namespace.name
        and direction in _policy_types(p["spec"])
        and selector_matches(p["spec"].get("podSelector"), pod.labels)
    ]


def _direction_allows(
    policies: Sequence[Policy], pod: Endpoint, other: Endpoint, port: int, protocol: str, direction: str
) -> bool:
    selecting = _selecting(policies, pod, direction)
    if not selecting:
        return True
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in selecting:
        ns = policy["metadata"]["namespace"]
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key) or []
            if peers and not any(_peer_matches(peer, ns, other) for peer in peers):
                continue
            if _port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def egress_allows(policies: Sequence[Policy], src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Return whether src's egress policies alone let it connect to dst:port/protocol."""
    return _direction_allows(policies, src, dst, port, protocol, "Egress")


def allows(policies: Sequence[Policy], src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Return whether src may connect to dst:port/protocol under the given NetworkPolicies."""
    return _direction_allows(policies, src, dst, port, protocol, "Egress") and _direction_allows(
        policies, dst, src, port, protocol, "Ingress"
    )
