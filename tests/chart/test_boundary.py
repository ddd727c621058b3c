"""Who reaches kagent's controller, computed by cyclonus over memgov's policies and kagent's own install.

memgov runs in kagent's namespace, or in gateway mode in a namespace of its own (``OWN_NAMESPACE``).
"""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.boundary.doctor import bypasses
from sidecar.boundary.model import policy_name
from tests.chart.helm import render
from tests.support.boundary import (
    HOSTILE,
    MODES,
    OWN_NAMESPACE,
    STAGES,
    Case,
    cyclonus,
    doc_section,
    install_for,
    matrix_markdown,
    reach,
    values_for,
)
from tests.support.kagent_chart import kagent_pods, render_kagent


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    manifests = render_kagent(tmp_path_factory)
    # kagent's own chart renders no NetworkPolicy: the chart's are all there is.
    assert not [m for m in manifests if m["kind"] == "NetworkPolicy"]
    return kagent_pods(manifests)


#: Where memgov runs: its mode, and its own namespace or kagent's.
SETUPS = {"gateway": ("gateway", False), "sidecar": ("sidecar", False), "gateway-own-namespace": ("gateway", True)}


def case(setup: str, stage: str, pods: dict[str, dict[str, str]], **extra: Any) -> Case:
    mode, own = SETUPS[setup]
    values = values_for(mode, stage, **extra)
    namespace = OWN_NAMESPACE if own else "kagent"
    policies = [m for m in render(values, namespace) if m["kind"] == "NetworkPolicy"]
    return Case(mode, stage, install_for(values, pods, namespace), policies)


class TestKagentInstall:
    def test_kagent_chart_runs_controller_ui_tools_and_agents(self, pods: dict[str, dict[str, str]]) -> None:
        """The model holds every pod kagent v0.9.11's chart installs: controller, UI, tools, database, ten agents."""
        assert {"kagent/kagent-controller", "kagent/kagent-ui", "kagent/kagent-querydoc"} <= set(pods)
        assert len([p for p in pods.values() if p.get("app") == "kagent"]) == 10


#: Who reaches 8083 once enforced: memgov, and in kagent's namespace any pod wearing its labels (which
#: the admission guard keeps from existing); nobody in sidecar mode (memgov dials loopback).
REACHERS = {
    "gateway": {"kagent/memgov", "kagent/memgov-impostor"},
    "sidecar": set(),
    "gateway-own-namespace": {f"{OWN_NAMESPACE}/memgov"},
}


class TestEnforced:
    @pytest.mark.parametrize("setup", list(SETUPS))
    def test_only_memgov_reaches_the_controller_api(self, setup: str, pods: dict[str, dict[str, str]]) -> None:
        """Enforced, only memgov's pods reach 8083, and in a namespace of its own no look-alike does."""
        result = reach(case(setup, "enforce", pods))
        assert {name for name, targets in result.items() if "controller:8083" in targets} == REACHERS[setup]

    @pytest.mark.parametrize("setup", list(SETUPS))
    def test_nothing_reaches_pprof(self, setup: str, pods: dict[str, dict[str, str]]) -> None:
        """Enforced with default values, no pod of the install reaches kagent's pprof on 6060."""
        result = reach(case(setup, "enforce", pods))
        assert not {name for name, targets in result.items() if "controller:6060" in targets}

    @pytest.mark.parametrize("setup", list(SETUPS))
    def test_doctor_finds_no_path(self, setup: str, pods: dict[str, dict[str, str]]) -> None:
        """The doctor's analysis (with a witness for every ingress rule) finds nothing around memgov."""
        c = case(setup, "enforce", pods)
        assert bypasses(c.install, c.policies, cyclonus()) == []

    def test_other_ports_switch_reopens_pprof(self, pods: dict[str, dict[str, str]]) -> None:
        """allowOtherControllerPorts=true opens pprof to the whole cluster, and the doctor names the chart's policy."""
        c = case(
            "gateway",
            "enforce",
            pods,
            networkPolicy={"allowOtherControllerPorts": True},
            admissionPolicy={"enabled": False},
        )
        found = bypasses(c.install, c.policies, cyclonus())
        assert found and {b.flow.port for b in found} == {6060}
        assert all(b.openers == ("NetworkPolicy kagent/memgov-kagent-controller",) for b in found)


class TestPrepare:
    @pytest.mark.parametrize("setup", list(SETUPS))
    def test_prepare_stage_leaves_the_controller_open(self, setup: str, pods: dict[str, dict[str, str]]) -> None:
        """Before enforce every pod reaches the controller, which the install notes warn about."""
        c = case(setup, "prepare", pods)
        result = reach(c)
        # memgov's own egress is restricted from the first install: the controller's API only. A pod
        # with its labels in its namespace is memgov to every policy, its egress policy included.
        memgov = {f"{c.install.memgov_namespace}/memgov", f"{c.install.memgov_namespace}/memgov-impostor"}
        for name in memgov:
            assert result.pop(name, {"controller:8083"}) == {"controller:8083"}
        assert all({"controller:8083", "controller:6060"} <= targets for targets in result.values())


#: What each hostile neighbour policy reopens once enforced: "api" a direct path to 8083, "pprof" to
#: 6060, "ui" a path through kagent's UI, whose nginx proxies /api/ to the controller. memgov in its
#: own namespace changes none of this: the policies select kagent's pods.
REOPENS: dict[tuple[str, str], set[str]] = {
    ("allow-same-namespace", "gateway"): {"api", "pprof", "ui"},
    ("allow-same-namespace", "sidecar"): {"api", "pprof"},
    ("allow-from-namespace-selector", "gateway"): {"api", "pprof"},
    ("allow-from-namespace-selector", "sidecar"): {"api", "pprof"},
    ("allow-all-ingress", "gateway"): {"api", "pprof", "ui"},
    ("allow-all-ingress", "sidecar"): {"api", "pprof"},
    ("ui-open", "gateway"): set(),
    ("ui-open", "sidecar"): set(),
    ("egress-only", "gateway"): set(),
    ("egress-only", "sidecar"): set(),
}
EXPECTED = {
    **REOPENS,
    **{(h, "gateway-own-namespace"): REOPENS[(h, "gateway")] for h in ("allow-all-ingress", "allow-same-namespace")},
}


class TestHostileNeighbours:
    @pytest.mark.parametrize(("hostile", "setup"), sorted(EXPECTED), ids=lambda v: str(v))
    def test_what_each_policy_reopens(self, hostile: str, setup: str, pods: dict[str, dict[str, str]]) -> None:
        """Added alone next to the chart's policies, each hostile policy reopens exactly what docs/boundary.md says."""
        c = case(setup, "enforce", pods)
        policy = HOSTILE[hostile]
        found = bypasses(c.install, [*c.policies, policy], cyclonus())
        kinds = {"ui" if b.via_ui else {8083: "api", 6060: "pprof"}[b.flow.port] for b in found}
        assert kinds == EXPECTED[(hostile, setup)]
        assert all(f"NetworkPolicy {policy_name(policy)}" in b.openers for b in found)

    def test_ui_policy_reopens_the_controller_with_port_forward_access(self, pods: dict[str, dict[str, str]]) -> None:
        """With kagent.ui.gatewayAccess=port-forward the UI reaches the controller, so opening the UI is a path."""
        c = case("gateway", "enforce", pods, kagent={"ui": {"gatewayAccess": "port-forward"}})
        assert bypasses(c.install, c.policies, cyclonus()) == []
        found = bypasses(c.install, [*c.policies, HOSTILE["ui-open"]], cyclonus())
        assert found and all(b.via_ui and b.openers == ("NetworkPolicy kagent/kagent-ui-public",) for b in found)

    @pytest.mark.parametrize("mode", MODES)
    def test_a_port_named_instead_of_numbered_is_caught(self, mode: str, pods: dict[str, dict[str, str]]) -> None:
        """A rule that opens kagent's container port by its name ("http") reopens 8083, and is reported."""
        c = case(mode, "enforce", pods)
        named = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "open-http-by-name", "namespace": "kagent"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": "http"}]}]},
        }
        found = bypasses(c.install, [*c.policies, named], cyclonus())
        assert {b.flow.port for b in found if not b.via_ui} == {8083}
        assert all(b.openers == ("NetworkPolicy kagent/open-http-by-name",) for b in found)


class TestDocumentedMatrix:
    def test_doc_matrix_is_what_cyclonus_computes(self, pods: dict[str, dict[str, str]]) -> None:
        """docs/boundary.md's connectivity matrix equals cyclonus's verdicts for every mode and stage."""
        setups = [*MODES, "gateway-own-namespace"]
        expected = matrix_markdown([case(setup, stage, pods) for setup in setups for stage in STAGES])
        assert doc_section() == expected, "paste this into docs/boundary.md:\n" + expected
