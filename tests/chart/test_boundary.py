"""Who reaches kagent's controller, computed by cyclonus over memgov's policies and kagent's own install."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.boundary.doctor import bypasses
from sidecar.boundary.model import policy_name
from tests.chart.helm import render
from tests.support.boundary import (
    HOSTILE,
    MODES,
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


def case(mode: str, stage: str, pods: dict[str, dict[str, str]], **extra: Any) -> Case:
    values = values_for(mode, stage, **extra)
    policies = [m for m in render(values) if m["kind"] == "NetworkPolicy"]
    return Case(mode, stage, install_for(values, pods), policies)


class TestKagentInstall:
    def test_kagent_chart_runs_controller_ui_tools_and_agents(self, pods: dict[str, dict[str, str]]) -> None:
        """The model holds every pod kagent v0.9.11's chart installs: controller, UI, tools, database, ten agents."""
        assert {"kagent/kagent-controller", "kagent/kagent-ui", "kagent/kagent-querydoc"} <= set(pods)
        assert len([p for p in pods.values() if p.get("app") == "kagent"]) == 10


class TestEnforced:
    @pytest.mark.parametrize("mode", MODES)
    def test_only_memgov_reaches_the_controller_api(self, mode: str, pods: dict[str, dict[str, str]]) -> None:
        """Enforced, only memgov's pods reach 8083 (in sidecar mode nobody: memgov dials loopback)."""
        result = reach(case(mode, "enforce", pods))
        reachers = {name for name, targets in result.items() if "controller:8083" in targets}
        assert reachers == ({"kagent/memgov"} if mode == "gateway" else set())

    @pytest.mark.parametrize("mode", MODES)
    def test_nothing_reaches_pprof(self, mode: str, pods: dict[str, dict[str, str]]) -> None:
        """Enforced with default values, no pod of the install reaches kagent's pprof on 6060."""
        result = reach(case(mode, "enforce", pods))
        assert not {name for name, targets in result.items() if "controller:6060" in targets}

    @pytest.mark.parametrize("mode", MODES)
    def test_doctor_finds_no_path(self, mode: str, pods: dict[str, dict[str, str]]) -> None:
        """The doctor's analysis (with a witness for every ingress rule) finds nothing around memgov."""
        c = case(mode, "enforce", pods)
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
    @pytest.mark.parametrize("mode", MODES)
    def test_prepare_stage_leaves_the_controller_open(self, mode: str, pods: dict[str, dict[str, str]]) -> None:
        """Before enforce every pod reaches the controller, which the install notes warn about."""
        result = reach(case(mode, "prepare", pods))
        # memgov's own egress is restricted from the first install: the controller's API only.
        assert result.pop("kagent/memgov", {"controller:8083"}) == {"controller:8083"}
        assert all({"controller:8083", "controller:6060"} <= targets for targets in result.values())


#: What each hostile neighbour policy reopens once enforced: "api" a direct path to 8083, "pprof" to
#: 6060, "ui" a path through kagent's UI, whose nginx proxies /api/ to the controller.
EXPECTED: dict[tuple[str, str], set[str]] = {
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


class TestHostileNeighbours:
    @pytest.mark.parametrize(("hostile", "mode"), sorted(EXPECTED), ids=lambda v: str(v))
    def test_what_each_policy_reopens(self, hostile: str, mode: str, pods: dict[str, dict[str, str]]) -> None:
        """Added alone next to the chart's policies, each hostile policy reopens exactly what docs/boundary.md says."""
        c = case(mode, "enforce", pods)
        policy = HOSTILE[hostile]
        found = bypasses(c.install, [*c.policies, policy], cyclonus())
        kinds = {"ui" if b.via_ui else {8083: "api", 6060: "pprof"}[b.flow.port] for b in found}
        assert kinds == EXPECTED[(hostile, mode)]
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
        expected = matrix_markdown([case(m, s, pods) for m in MODES for s in STAGES])
        assert doc_section() == expected, "paste this into docs/boundary.md:\n" + expected
