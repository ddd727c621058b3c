"""An install as NetworkPolicy sees it: pods and labels, the flows that matter, and witnesses.

Pure data, no I/O. A *flow* is one TCP connection attempt from a source peer to a port of a
target pod; the cyclonus engine says whether the policies allow it. The flows that can bypass
memgov end at kagent's controller (its API on 8083, its pprof on 6060) or, in gateway mode, at
kagent's UI, whose nginx proxies ``/api/`` to the controller. *Witnesses* are synthetic sources
built to match each ingress rule of each policy, so a rule that admits someone is exercised
even when no pod of the model happens to carry the labels it names. *Stand-ins* do the same for
a target whose labels are not all known (the controller and UI as the chart values describe them):
one per policy that may select it, carrying the labels that policy asks for besides the known ones.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

Labels = Mapping[str, str]
Policy = dict[str, Any]

KAGENT_API_PORT = 8083
PPROF_PORT = 6060
UI_PORT = 8080
#: The container port names kagent v0.9.11's chart gives the controller's API and the UI.
CONTROLLER_PORT_NAMES = {KAGENT_API_PORT: "http"}
UI_PORT_NAMES = {UI_PORT: "http"}
NAME_LABEL = "kubernetes.io/metadata.name"
#: The namespace the attacker "elsewhere" lives in; no policy names it.
ELSEWHERE = "memgov-doctor-elsewhere"


class BoundaryInputError(ValueError):
    """Values or exported policies that cannot be read; the message is one line for the operator."""


@dataclass(frozen=True)
class Peer:
    """A pod (namespace and labels) or, with namespace None, an address outside the cluster."""

    name: str
    ip: str
    namespace: str | None = None
    # Left out of the hash (mappings are not hashable); still compared for equality.
    labels: Labels = field(default_factory=dict, hash=False)
    namespace_labels: Labels = field(default_factory=dict, hash=False)
    #: Container port number -> name, so a policy that names a port ("http") matches it.
    port_names: Mapping[int, str] = field(default_factory=dict, hash=False)
    #: False when the pod may carry labels beyond these (only a selector's labels are known).
    labels_known: bool = field(default=True, hash=False)

    def traffic_peer(self) -> dict[str, Any]:
        """This peer in cyclonus's traffic format (``matcher.TrafficPeer``)."""
        if self.namespace is None:
            return {"Internal": None, "IP": self.ip}
        ns_labels = {**self.namespace_labels, NAME_LABEL: self.namespace}
        internal = {"PodLabels": dict(self.labels), "NamespaceLabels": ns_labels, "Namespace": self.namespace}
        return {"Internal": internal, "IP": self.ip}


@dataclass(frozen=True)
class Flow:
    """A TCP connection attempt from source to target:port."""

    source: Peer
    target: Peer
    port: int

    def traffic(self) -> dict[str, Any]:
        """This flow in cyclonus's traffic format (``matcher.Traffic``)."""
        return {
            "Source": self.source.traffic_peer(),
            "Destination": self.target.traffic_peer(),
            "Protocol": "TCP",
            "ResolvedPort": self.port,
            "ResolvedPortName": self.target.port_names.get(self.port, ""),
        }

    def describe(self) -> str:
        """``source -> target:port``, the way the doctor prints it."""
        return f"{self.source.name} -> {self.target.name}:{self.port}"


# --- label selectors -------------------------------------------------------------------------


def selects(selector: Mapping[str, Any] | None, labels: Labels) -> bool:
    """Whether a LabelSelector matches labels; an empty selector matches everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not (present and labels.get(key) in values),
            "Exists": present,
            "DoesNotExist": not present,
        }.get(op)
        if not ok:
            return False
    return True


def satisfying(selector: Mapping[str, Any] | None) -> dict[str, str] | None:
    """Labels that a LabelSelector matches, or None when none can (contradictory expressions)."""
    selector = selector or {}
    labels = {str(k): str(v) for k, v in (selector.get("matchLabels") or {}).items()}
    for expr in selector.get("matchExpressions") or []:
        key, op, values = str(expr.get("key")), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        if op == "In" and key not in labels and values:
            labels[key] = values[0]
        elif op == "Exists" and key not in labels:
            labels[key] = "present"
    return labels if selects(selector, labels) else None


# --- the install -----------------------------------------------------------------------------

#: The memgov chart's defaults for the values the model reads (a test keeps them equal to values.yaml).
CHART_DEFAULTS: dict[str, Any] = {
    "mode": "gateway",
    "rollout": {"stage": "prepare"},
    "nameOverride": "",
    "kagent": {
        "controllerSelector": {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "controller"},
        "ui": {
            "selector": {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "ui"},
            "gatewayAccess": "none",
        },
    },
    "networkPolicy": {
        "agents": {
            "podSelector": {
                "matchLabels": {"app": "kagent"},
                "matchExpressions": [{"key": "kagent", "operator": "Exists"}],
            },
            "namespaceSelector": {},
        },
        "bridge": {"podSelector": {}, "namespaceSelector": {"matchLabels": {NAME_LABEL: "matrix-bridge"}}},
        "monitoring": {"podSelector": {}, "namespaceSelector": {"matchLabels": {NAME_LABEL: "monitoring"}}},
    },
}


def merged(defaults: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """values over defaults, recursively for mappings (Helm's coalescing of a values file)."""
    out = dict(defaults)
    for key, value in values.items():
        base = out.get(key)
        out[key] = merged(base, value) if isinstance(base, Mapping) and isinstance(value, Mapping) else value
    return out


class _Addresses:
    """Hands out distinct pod IPs upward from a first address."""

    def __init__(self, first: str) -> None:
        self._next = int(ipaddress.ip_address(first)) - 1

    def take(self) -> str:
        self._next += 1
        return str(ipaddress.ip_address(self._next))


@dataclass(frozen=True)
class Install:
    """The pods of a kagent install with memgov in one mode and rollout stage."""

    namespace: str
    mode: str
    stage: str
    memgov: Peer | None
    controller: Peer
    ui: Peer
    ui_gateway_access: str
    neighbours: tuple[Peer, ...]
    #: The labels the chart selects memgov's pods (gateway mode) and kagent's UI pods by.
    memgov_selector: Labels | None = None
    ui_selector: Labels = field(default_factory=dict)
    #: memgov's namespace: kagent's, or in gateway mode one of its own.
    memgov_namespace: str = ""

    @classmethod
    def from_values(
        cls,
        values: Mapping[str, Any],
        *,
        namespace: str = "kagent",
        release: str = "memgov",
        memgov_namespace: str | None = None,
        controller: Peer | None = None,
        ui: Peer | None = None,
        neighbours: Sequence[Peer] = (),
    ) -> Install:
        """The install the chart values describe.

        The controller and UI pods default to what the chart's selectors name, with kagent's port
        names and labels_known false; pass the real pods (labels, port names) when they are known.
        memgov's namespace is kagent's unless given (gateway mode only).
        """
        v = merged(CHART_DEFAULTS, values)
        try:
            mode, stage = str(v["mode"]), str(v["rollout"]["stage"])
            kagent, np = v["kagent"], v["networkPolicy"]
            controller_sel, ui_sel = dict(kagent["controllerSelector"]), dict(kagent["ui"]["selector"])
            access = str(kagent["ui"]["gatewayAccess"])
            name = str(v.get("nameOverride") or "memgov")
            agents, bridge, monitoring = np["agents"], np["bridge"], np["monitoring"]
        except (KeyError, TypeError) as exc:
            raise BoundaryInputError(f"values: {exc} is missing or not a mapping") from None
        if mode not in {"gateway", "sidecar"} or stage not in {"prepare", "enforce"}:
            raise BoundaryInputError("values: mode must be gateway or sidecar, rollout.stage prepare or enforce")
        home = memgov_namespace or namespace
        if mode == "sidecar" and home != namespace:
            raise BoundaryInputError("values: in sidecar mode memgov lives in kagent's namespace")
        ips = _Addresses("10.244.0.10")  # kind's pod range
        memgov = None
        impostors: list[Peer] = []
        if mode == "gateway":
            labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": release}
            memgov = Peer(f"{home}/memgov", ips.take(), home, labels)
            # A pod in kagent's namespace with memgov's labels: the admission guard's business, unless
            # memgov lives elsewhere and the policies select it by its namespace too.
            impostors.append(Peer(f"{namespace}/memgov-impostor", ips.take(), namespace, labels))
        controller = controller or Peer(
            f"{namespace}/kagent-controller",
            ips.take(),
            namespace,
            controller_sel,
            port_names=CONTROLLER_PORT_NAMES,
            labels_known=False,
        )
        ui = ui or Peer(
            f"{namespace}/kagent-ui", ips.take(), namespace, ui_sel, port_names=UI_PORT_NAMES, labels_known=False
        )
        callers = [
            _selected_pod("agent", agents, namespace, ips),
            _selected_pod("bridge", bridge, namespace, ips),
            _selected_pod("monitoring", monitoring, namespace, ips),
        ]
        attackers = [
            Peer(f"{namespace}/attacker", ips.take(), namespace, {"app": "attacker"}),
            *impostors,
            Peer(f"{ELSEWHERE}/attacker", ips.take(), ELSEWHERE, {"app": "attacker"}),
        ]
        extra = tuple(p for p in (*callers, *neighbours) if p is not None)
        memgov_selector = memgov.labels if memgov else None
        neighbours = (*extra, *attackers)
        return cls(namespace, mode, stage, memgov, controller, ui, access, neighbours, memgov_selector, ui_sel, home)

    @property
    def sources(self) -> tuple[Peer, ...]:
        """Every modelled pod that may open a connection (memgov, the UI, callers, attackers)."""
        return (*((self.memgov,) if self.memgov else ()), self.ui, *self.neighbours)

    def legitimate(self, flow: Flow) -> bool:
        """Whether memgov's design allows this flow: memgov's pods (or, in gateway mode, the UI) to the API."""
        if flow.target != self.controller or flow.port != KAGENT_API_PORT:
            return False
        ui = self.mode == "gateway" and self._selected(flow.source, self.ui_selector, self.namespace)
        memgov = self.memgov_selector is not None and self._selected(
            flow.source, self.memgov_selector, self.memgov_namespace or self.namespace
        )
        return ui or memgov

    @staticmethod
    def _selected(peer: Peer, selector: Labels, namespace: str) -> bool:
        """Whether the chart's selector picks this peer (any pod it picks is, to the policies, that pod)."""
        return peer.namespace == namespace and selects({"matchLabels": selector}, peer.labels)


def _selected_pod(role: str, peer: Mapping[str, Any], namespace: str, ips: _Addresses) -> Peer | None:
    """A pod the {podSelector, namespaceSelector} pair of a chart value selects."""
    labels = satisfying(peer.get("podSelector"))
    ns_selector = peer.get("namespaceSelector") or {}
    ns_labels = satisfying(ns_selector)
    if labels is None or ns_labels is None:
        return None
    ns = ns_labels.get(NAME_LABEL) or (f"{role}-namespace" if ns_selector else namespace)
    return Peer(f"{ns}/{role}", ips.take(), ns, labels, ns_labels)


# --- policies and their witnesses ------------------------------------------------------------


def policy_name(policy: Policy) -> str:
    """``namespace/name`` of a NetworkPolicy."""
    return f"{policy['metadata']['namespace']}/{policy['metadata']['name']}"


def normalize_policies(docs: Sequence[Any], default_namespace: str) -> list[Policy]:
    """NetworkPolicies from parsed YAML documents (a List, a NetworkPolicyList or single objects).

    Each comes back as apiVersion, kind, name, namespace and spec only, with spec.policyTypes
    defaulted the way the API server does. Anything else is a BoundaryInputError.
    """
    items: list[Any] = []
    for doc in docs:
        if doc is None:
            continue
        if isinstance(doc, Mapping) and isinstance(doc.get("items"), list):
            items.extend(doc["items"])
        else:
            items.append(doc)
    policies = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or item.get("kind") != "NetworkPolicy":
            raise BoundaryInputError(f"policies: object {index + 1} is not a NetworkPolicy")
        meta, spec = item.get("metadata"), item.get("spec")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not isinstance(spec, Mapping):
            raise BoundaryInputError(f"policies: object {index + 1} has no metadata.name or spec")
        spec = dict(spec)
        _check_shape(spec, index + 1)
        if not spec.get("policyTypes"):
            spec["policyTypes"] = ["Ingress", *(["Egress"] if "egress" in spec else [])]
        namespace = meta.get("namespace") or default_namespace
        policies.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": meta["name"], "namespace": str(namespace)},
                "spec": spec,
            }
        )
    return policies


def _check_shape(spec: Mapping[str, Any], index: int) -> None:
    """Refuse a spec whose parts the model walks are not the types the API defines."""
    bad = f"policies: object {index} has a malformed spec"
    if not isinstance(spec.get("podSelector", {}), Mapping):
        raise BoundaryInputError(bad)
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        rules = spec.get(direction) or []
        if not isinstance(rules, list) or not all(isinstance(r, Mapping) for r in rules):
            raise BoundaryInputError(bad)
        for rule in rules:
            peers = rule.get(peers_key) or []
            if not isinstance(peers, list) or not all(isinstance(p, Mapping) for p in peers):
                raise BoundaryInputError(bad)
            for peer in peers:
                for key in ("podSelector", "namespaceSelector", "ipBlock"):
                    if not isinstance(peer.get(key) or {}, Mapping):
                        raise BoundaryInputError(bad)
                if peer.get("ipBlock") is not None:
                    _block_witness(peer["ipBlock"], bad)


def stand_ins(target: Peer, policies: Sequence[Policy]) -> list[Peer]:
    """The target as each policy that may select it for ingress would have it, when its labels are not all known.

    A selector "may select" the target unless one of its terms contradicts a label the target is
    known to carry; the stand-in carries the known labels and whatever else that selector asks for.
    """
    if target.labels_known:
        return []
    out: dict[str, Peer] = {}
    for policy in policies:
        spec = policy["spec"]
        if policy["metadata"]["namespace"] != target.namespace or "Ingress" not in spec["policyTypes"]:
            continue
        wanted = satisfying(spec.get("podSelector"))
        if wanted is None:
            continue
        labels = {**wanted, **target.labels}
        extra = {k: v for k, v in labels.items() if k not in target.labels}
        if not extra or not selects(spec.get("podSelector"), labels):
            continue
        name = f"{target.name}[{','.join(f'{k}={v}' for k, v in sorted(extra.items()))}]"
        out[name] = replace(target, name=name, labels=labels)
    return list(out.values())


def selects_for_ingress(policy: Policy, pod: Peer) -> bool:
    """Whether the policy isolates this pod for ingress."""
    spec = policy["spec"]
    return (
        pod.namespace == policy["metadata"]["namespace"]
        and "Ingress" in spec["policyTypes"]
        and selects(spec.get("podSelector"), pod.labels)
    )


def witnesses(policies: Sequence[Policy]) -> Iterator[Peer]:
    """One source per ingress peer of every policy, built to match that peer."""
    ips = _Addresses("10.245.0.10")  # clear of the install's own addresses
    for policy in policies:
        home = policy["metadata"]["namespace"]
        for r, rule in enumerate(policy["spec"].get("ingress") or []):
            for p, peer in enumerate(rule.get("from") or []):
                name = f"witness({policy_name(policy)} ingress[{r}].from[{p}])"
                if peer.get("ipBlock"):
                    yield Peer(name, _block_witness(peer["ipBlock"], "policies: malformed ipBlock"))
                    continue
                labels = satisfying(peer.get("podSelector"))
                ns_selector = peer.get("namespaceSelector")
                ns_labels = satisfying(ns_selector) if ns_selector is not None else {}
                if labels is None or ns_labels is None:
                    continue
                ns = home if ns_selector is None else ns_labels.get(NAME_LABEL, f"witness-ns-{r}-{p}")
                yield Peer(name, ips.take(), ns, labels, ns_labels)


def _block_witness(block: Any, message: str) -> str:
    """An address inside the ipBlock's CIDR and outside every one of its exceptions."""
    try:
        net = ipaddress.ip_network(str(block["cidr"]), strict=False)
        excepts = [ipaddress.ip_network(str(c), strict=False) for c in block.get("except") or []]
    except (KeyError, TypeError, ValueError):
        raise BoundaryInputError(message) from None
    first = int(net.network_address) + (1 if net.num_addresses > 1 else 0)
    candidates = [first] + [n for ex in excepts for n in (int(ex.network_address) - 1, int(ex.broadcast_address) + 1)]
    for number in candidates:
        if int(net.network_address) <= number <= int(net.broadcast_address):
            addr = ipaddress.ip_address(number) if net.version == 4 else ipaddress.IPv6Address(number)
            if not any(addr in ex for ex in excepts):
                return str(addr)
    raise BoundaryInputError(message)
