"""Reachability proofs over the NetworkPolicies the chart renders, using example pods and namespaces."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import cases
from tests.chart.helm import render
from tests.chart.netpol import Endpoint, Namespace, allows, egress_allows, selector_matches

KAGENT = Namespace("kagent")
TEAM = Namespace("team-a", {"memgov.example.org/agents": "true"})
OTHER = Namespace("other")

MEMGOV = Endpoint(
    "memgov", "10.0.0.10", KAGENT, {"app.kubernetes.io/name": "memgov", "app.kubernetes.io/instance": "memgov"}
)
CONTROLLER = Endpoint(
    "controller",
    "10.0.0.2",
    KAGENT,
    {
        "app.kubernetes.io/name": "kagent",
        "app.kubernetes.io/instance": "kagent",
        "app.kubernetes.io/component": "controller",
    },
)
UI = Endpoint("ui", "10.0.0.3", KAGENT, {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "ui"})
TOOLS = Endpoint("tools", "10.0.0.4", KAGENT, {"app.kubernetes.io/name": "kagent-tools"})
AGENT = Endpoint("agent", "10.0.0.20", KAGENT, {"app": "kagent", "kagent": "helper"})
TEAM_AGENT = Endpoint("team-agent", "10.0.1.20", TEAM, {"app": "kagent", "kagent": "helper"})
OTHER_AGENT = Endpoint("other-agent", "10.0.2.20", OTHER, {"app": "kagent", "kagent": "helper"})
# Labels alone do not make an agent: kagent sets both app=kagent and kagent=<name>.
LOOKALIKE = Endpoint("lookalike", "10.0.0.21", KAGENT, {"app": "kagent"})
RANDOM = Endpoint("random", "10.0.0.30", KAGENT, {"app": "something"})
BRIDGE = Endpoint("bridge", "10.0.3.5", Namespace("matrix-bridge"), {"app": "bridge"})
PROMETHEUS = Endpoint("prometheus", "10.0.4.5", Namespace("monitoring"), {"app": "prometheus"})
DNS = Endpoint("dns", "10.0.5.10", Namespace("kube-system"), {"k8s-app": "kube-dns"})
POSTGRES = Endpoint("postgres", "10.0.6.5", Namespace("databases"), {"app.kubernetes.io/name": "postgresql"})
OPA = Endpoint("opa", "10.0.7.5", Namespace("opa"), {"app": "opa"})
COLLECTOR = Endpoint("collector", "10.0.8.5", Namespace("observability"), {"app": "otel-collector"})
PROVIDER = Endpoint("provider", "203.0.113.7")
INTERNET = Endpoint("internet", "198.51.100.9")
KUBE_API = Endpoint("kube-api", "172.20.0.1")

PODS = [
    MEMGOV,
    CONTROLLER,
    UI,
    TOOLS,
    AGENT,
    TEAM_AGENT,
    OTHER_AGENT,
    LOOKALIKE,
    RANDOM,
    BRIDGE,
    PROMETHEUS,
    DNS,
    POSTGRES,
    OPA,
    COLLECTOR,
]
EVERYONE = [*PODS, PROVIDER, INTERNET, KUBE_API]
PORTS = [
    (p, proto) for p in (53, 80, 443, 4318, 5432, 6443, 8080, 8081, 8082, 8083, 8181, 9090) for proto in ("TCP", "UDP")
]


def policies(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The NetworkPolicies rendered for these values."""
    return [m for m in render(values) if m["kind"] == "NetworkPolicy"]


def reachers(values: dict[str, Any], dst: Endpoint, port: int) -> set[str]:
    """Names of every example pod that may connect to dst:port over TCP."""
    nps = policies(values)
    return {src.name for src in PODS if src is not dst and allows(nps, src, dst, port)}


def memgov_egress(values: dict[str, Any]) -> set[tuple[str, int, str]]:
    """Every (destination, port, protocol) memgov's egress policy admits among the examples."""
    nps = policies(values)
    return {
        (dst.name, port, proto)
        for dst in EVERYONE
        if dst is not MEMGOV
        for port, proto in PORTS
        if egress_allows(nps, MEMGOV, dst, port, proto)
    }


BASE_EGRESS = {("controller", 8083, "TCP"), ("dns", 53, "UDP"), ("dns", 53, "TCP")}


class TestControllerIngress:
    @pytest.mark.parametrize(
        ("values", "expected"),
        [
            (cases.GATEWAY_PRODUCTION, {"memgov"}),
            (cases.GATEWAY_UI_PORT_FORWARD, {"memgov", "ui"}),
        ],
        ids=["enforced", "ui-port-forward"],
    )
    def test_only_memgov_reaches_8083(self, values: dict[str, Any], expected: set[str]) -> None:
        """Once enforced, of all example pods only memgov (and an operators-only UI) reach the controller's 8083."""
        assert reachers(values, CONTROLLER, 8083) == expected

    @pytest.mark.parametrize("agent", [AGENT, TEAM_AGENT, OTHER_AGENT], ids=lambda a: a.name)
    def test_agents_cannot_dial_the_controller(self, agent: Endpoint) -> None:
        """An agent pod in any namespace cannot skip memgov by dialing the controller's API port."""
        for values in (cases.GATEWAY_PRODUCTION, cases.GATEWAY_UI_PORT_FORWARD):
            assert not allows(policies(values), agent, CONTROLLER, 8083)

    @pytest.mark.parametrize(("allow_other", "expected"), [(True, True), (False, False)], ids=["opened", "closed"])
    def test_other_controller_ports_follow_the_switch(self, allow_other: bool, expected: bool) -> None:
        """The controller's other ports (probes, pprof) are reachable only with allowOtherControllerPorts."""
        values = {
            "rollout": cases.ENFORCE,
            "networkPolicy": {"allowOtherControllerPorts": allow_other},
            "admissionPolicy": {"enabled": not allow_other},
        }
        assert allows(policies(values), RANDOM, CONTROLLER, 8082) is expected
        assert not allows(policies(values), RANDOM, CONTROLLER, 8083)


class TestStagedRollout:
    @pytest.mark.parametrize("values", [cases.GATEWAY_DEFAULT, {"mode": "sidecar"}], ids=["gateway", "sidecar"])
    def test_prepare_stage_leaves_kagent_as_it_was(self, values: dict[str, Any]) -> None:
        """The default stage puts no policy on kagent's pods: agents still pointed at the controller keep working."""
        nps = policies(values)
        assert not [np for np in nps if selector_matches(np["spec"]["podSelector"], CONTROLLER.labels)]
        assert not [np for np in nps if selector_matches(np["spec"]["podSelector"], UI.labels)]
        assert allows(nps, AGENT, CONTROLLER, 8083) and allows(nps, UI, CONTROLLER, 8083)

    def test_prepare_stage_already_guards_memgov(self) -> None:
        """memgov's own ingress and egress policy applies from the first install (it cuts nobody off)."""
        assert reachers(cases.GATEWAY_DEFAULT, MEMGOV, 8081) == {"bridge"}
        assert memgov_egress(cases.GATEWAY_DEFAULT) == BASE_EGRESS

    @pytest.mark.parametrize("mode", ["gateway", "sidecar"])
    def test_enforce_stage_closes_the_controller(self, mode: str) -> None:
        """The enforce stage is what turns the bypass off, in both modes."""
        nps = policies({"rollout": cases.ENFORCE, "mode": mode})
        assert not allows(nps, AGENT, CONTROLLER, 8083)


class TestKagentUi:
    def test_gateway_ui_is_cut_off_from_the_controller_by_default(self) -> None:
        """In gateway mode the UI (which proxies /api/ to the controller) is refused on 8083 once enforced."""
        assert not allows(policies(cases.GATEWAY_PRODUCTION), UI, CONTROLLER, 8083)

    def test_port_forward_ui_is_reachable_by_no_pod(self) -> None:
        """With gatewayAccess=port-forward the UI reaches the controller, and no pod reaches the UI on any port."""
        nps = policies(cases.GATEWAY_UI_PORT_FORWARD)
        assert allows(nps, UI, CONTROLLER, 8083)
        assert not {src.name for src in PODS if src is not UI for port, _ in PORTS if allows(nps, src, UI, port)}

    def test_sidecar_ui_lands_on_memgov_not_the_controller(self) -> None:
        """In sidecar mode the UI's calls reach memgov's data plane in the controller pod, never 8083."""
        nps = policies(cases.SIDECAR)
        assert allows(nps, UI, CONTROLLER, 8080) and not allows(nps, UI, CONTROLLER, 8083)

    @pytest.mark.parametrize("values", list(cases.MATRIX.values()), ids=list(cases.MATRIX))
    def test_no_client_reaches_the_controller_api_around_memgov(self, values: dict[str, Any]) -> None:
        """Whatever the values, once enforced only memgov, or a UI nothing can reach, dials the controller's 8083."""
        nps = policies(values)
        if not any(selector_matches(np["spec"]["podSelector"], CONTROLLER.labels) for np in nps):
            return  # not enforced (or policies off): nothing is promised yet
        for name in reachers(values, CONTROLLER, 8083) - {"memgov"}:
            pod = next(p for p in PODS if p.name == name)
            assert not any(allows(nps, src, pod, port) for src in PODS if src is not pod for port, _ in PORTS), name


class TestMemgovIngress:
    @pytest.mark.parametrize(
        ("port", "expected"),
        [
            (8080, {"agent", "bridge"}),
            (8081, {"bridge"}),
            (9090, {"prometheus"}),
        ],
        ids=["data-plane", "control-api", "metrics"],
    )
    def test_each_port_admits_its_callers_only(self, port: int, expected: set[str]) -> None:
        """Agents reach the data plane, the bridge the data plane and control API, monitoring the metrics port."""
        assert reachers(cases.GATEWAY_DEFAULT, MEMGOV, port) == expected

    def test_agent_namespaces_follow_the_namespace_selector(self) -> None:
        """With an agent namespace selector, only agents in labelled namespaces (and listed clients) reach it."""
        assert reachers(cases.GATEWAY_PRODUCTION, MEMGOV, 8080) == {"team-agent", "bridge", "tools"}

    def test_listed_clients_come_through_memgov(self) -> None:
        """A listed client of the controller API reaches memgov's data plane and never the controller."""
        nps = policies(cases.GATEWAY_PRODUCTION)
        assert allows(nps, TOOLS, MEMGOV, 8080) and not allows(nps, TOOLS, CONTROLLER, 8083)


class TestMemgovEgress:
    @pytest.mark.parametrize(
        ("values", "expected"),
        [
            (cases.GATEWAY_DEFAULT, BASE_EGRESS),
            (
                cases.GATEWAY_PRODUCTION,
                BASE_EGRESS | {("provider", 443, "TCP"), ("postgres", 5432, "TCP"), ("collector", 4318, "TCP")},
            ),
            (cases.GATEWAY_EXTERNAL_OPA, BASE_EGRESS | {("opa", 8181, "TCP")}),
        ],
        ids=["default", "embedding-postgresql-and-collector", "external-opa"],
    )
    def test_egress_is_exactly_the_documented_set(
        self, values: dict[str, Any], expected: set[tuple[str, int, str]]
    ) -> None:
        """memgov may connect to the controller, DNS, and the configured provider, PostgreSQL and OPA only."""
        assert memgov_egress(values) == expected

    def test_controller_accepts_memgov(self) -> None:
        """The controller's own policy admits memgov's calls end to end."""
        assert allows(policies(cases.GATEWAY_PRODUCTION), MEMGOV, CONTROLLER, 8083)


class TestSidecarMode:
    @pytest.mark.parametrize(
        ("port", "expected"),
        [
            (8080, {"agent", "bridge", "ui", "tools"}),
            (8081, {"bridge"}),
            (9090, {"prometheus"}),
            (8083, set()),
        ],
        ids=["data-plane", "control-api", "metrics", "controller-port"],
    )
    def test_controller_pod_admits_memgov_callers_only(self, port: int, expected: set[str]) -> None:
        """memgov in the controller pod answers its callers, and 8083 on the pod IP stays closed to all."""
        assert reachers(cases.SIDECAR, CONTROLLER, port) == expected

    def test_controller_egress_is_left_to_kagent(self) -> None:
        """The sidecar patch does not restrict the controller pod's own outbound traffic."""
        nps = policies(cases.SIDECAR)
        assert all(egress_allows(nps, CONTROLLER, dst, 443) for dst in (KUBE_API, INTERNET, PROVIDER))


#: memgov in a namespace of its own, and a pod in kagent's namespace wearing its labels.
OWN = Namespace("memgov-system")
OWN_MEMGOV = Endpoint("memgov", "10.0.9.10", OWN, MEMGOV.labels)
IMPOSTOR = Endpoint("impostor", "10.0.0.40", KAGENT, MEMGOV.labels)


class TestOwnNamespace:
    @staticmethod
    def policies(values: dict[str, Any]) -> list[dict[str, Any]]:
        return [m for m in render(values, OWN.name) if m["kind"] == "NetworkPolicy"]

    @pytest.mark.parametrize(("namespace", "reach"), [(KAGENT.name, {"memgov", "impostor"}), (OWN.name, {"memgov"})])
    def test_no_pod_in_kagents_namespace_passes_for_memgov(self, namespace: str, reach: set[str]) -> None:
        """In kagent's namespace any pod with memgov's labels reaches 8083; with memgov in its own, only memgov does."""
        nps = [m for m in render({"rollout": cases.ENFORCE}, namespace) if m["kind"] == "NetworkPolicy"]
        memgov = OWN_MEMGOV if namespace == OWN.name else MEMGOV
        pods = [memgov, IMPOSTOR, AGENT, UI, TOOLS, RANDOM, BRIDGE]
        assert {p.name for p in pods if allows(nps, p, CONTROLLER, 8083)} == reach

    @pytest.mark.parametrize(
        ("port", "expected"),
        [(8080, {"agent", "bridge"}), (8081, {"bridge"}), (9090, {"prometheus"})],
        ids=["data-plane", "control-api", "metrics"],
    )
    def test_callers_still_reach_memgov(self, port: int, expected: set[str]) -> None:
        """Agents in kagent's namespace, the bridge and monitoring reach memgov across namespaces as before."""
        nps = self.policies({"rollout": cases.ENFORCE})
        assert {p.name for p in PODS if p is not MEMGOV and allows(nps, p, OWN_MEMGOV, port)} == expected

    def test_memgov_still_reaches_the_controller_and_dns_only(self) -> None:
        """memgov's egress names kagent's namespace for the controller, so it still reaches it (and DNS) only."""
        nps = self.policies({"rollout": cases.ENFORCE})
        reached = {
            (dst.name, port, proto)
            for dst in EVERYONE
            if dst is not MEMGOV
            for port, proto in PORTS
            if egress_allows(nps, OWN_MEMGOV, dst, port, proto)
        }
        assert reached == BASE_EGRESS
        assert allows(nps, OWN_MEMGOV, CONTROLLER, 8083)


class TestDisabled:
    def test_no_policies_when_disabled(self) -> None:
        """networkPolicy.enabled=false renders no NetworkPolicy at all."""
        assert policies(cases.NETWORK_POLICIES_OFF) == []


def _np(namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": namespace}, "spec": spec}


class TestEvaluator:
    @pytest.mark.parametrize(
        ("spec", "src", "dst", "port", "expected"),
        [
            ({"podSelector": {}}, RANDOM, MEMGOV, 80, False),
            ({"podSelector": {"matchLabels": {"x": "y"}}}, RANDOM, MEMGOV, 80, True),
            ({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}, RANDOM, MEMGOV, 80, True),
            ({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}, BRIDGE, MEMGOV, 80, False),
            ({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}, BRIDGE, MEMGOV, 80, True),
            ({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}, INTERNET, MEMGOV, 80, False),
            ({"podSelector": {}, "ingress": [{"ports": [{"port": 1, "endPort": 100}]}]}, INTERNET, MEMGOV, 80, True),
            ({"podSelector": {}, "ingress": [{"ports": [{"port": 1, "endPort": 79}]}]}, INTERNET, MEMGOV, 80, False),
            (
                {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "198.51.100.0/24"}}]}]},
                INTERNET,
                MEMGOV,
                80,
                True,
            ),
            (
                {
                    "podSelector": {},
                    "ingress": [{"from": [{"ipBlock": {"cidr": "198.51.100.0/24", "except": ["198.51.100.0/28"]}}]}],
                },
                INTERNET,
                MEMGOV,
                80,
                False,
            ),
            ({"podSelector": {}, "policyTypes": ["Egress"]}, INTERNET, MEMGOV, 80, True),
        ],
        ids=[
            "selected-without-rules-denies",
            "unselected-pod-is-open",
            "pod-selector-is-namespace-local",
            "pod-selector-excludes-other-namespaces",
            "empty-namespace-selector-is-every-namespace",
            "selectors-never-match-outside-addresses",
            "port-range-includes",
            "port-range-excludes",
            "ip-block-includes",
            "ip-block-except-excludes",
            "egress-only-policy-leaves-ingress-open",
        ],
    )
    def test_semantics(self, spec: dict[str, Any], src: Endpoint, dst: Endpoint, port: int, expected: bool) -> None:
        """The evaluator follows the networking.k8s.io/v1 rules the proofs above depend on."""
        assert allows([_np("kagent", spec)], src, dst, port) is expected

    def test_udp_needs_a_udp_port(self) -> None:
        """A TCP port entry does not admit UDP to the same port."""
        nps = [_np("kagent", {"podSelector": {}, "ingress": [{"ports": [{"port": 53}]}]})]
        assert allows(nps, RANDOM, MEMGOV, 53, "TCP")
        assert not allows(nps, RANDOM, MEMGOV, 53, "UDP")
