"""The chart tells memgov its own identity, so relayed kagent definitions cannot claim it (settings ``boundary``)."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.decide.definitions import Boundary
from sidecar.settings import BoundarySettings
from tests.chart import cases
from tests.chart.helm import RELEASE, config_file, find, kinds, pod_spec, render


def _boundary(values: dict[str, Any]) -> dict[str, Any]:
    section: dict[str, Any] = config_file(render(values))["boundary"]
    return section


class TestBoundary:
    @pytest.mark.parametrize(("name", "values"), list(cases.MATRIX.items()), ids=list(cases.MATRIX))
    def test_every_secret_memgov_mounts_is_one_no_definition_may_name(self, name: str, values: dict[str, Any]) -> None:
        """Each Secret the pod projects into memgov's secret folder is in boundary.secrets."""
        manifests = render(values)
        volumes = pod_spec(manifests)["volumes"]
        mounted = {
            source["secret"]["name"]
            for volume in volumes
            for source in volume.get("projected", {}).get("sources", [])
            if "secret" in source
        }
        assert mounted and mounted <= set(config_file(manifests)["boundary"]["secrets"])

    @pytest.mark.parametrize(("name", "values"), list(cases.MATRIX.items()), ids=list(cases.MATRIX))
    def test_the_names_of_memgovs_objects_are_protected(self, name: str, values: dict[str, Any]) -> None:
        """Every object the chart creates in kagent's namespace is named in boundary.names or starts with
        one of boundary.name_prefixes (kagent would take over an existing object of an agent's name)."""
        manifests = render(values)
        boundary = config_file(manifests)["boundary"]
        names, prefixes = set(boundary["names"]), tuple(boundary["name_prefixes"])
        namespaced = {
            m["metadata"]["name"]
            for m in manifests
            if m["kind"] in ("Service", "Deployment", "ConfigMap", "PersistentVolumeClaim", "Job", "ServiceAccount")
        }
        unprotected = sorted(n for n in namespaced if n not in names and not n.startswith(prefixes))
        assert namespaced and unprotected == []

    def test_memgovs_pods_its_service_account_and_kagents_pods_are_the_boundary(self) -> None:
        """memgov's selector labels and kagent's controller and UI labels are the selectors; memgov's
        ServiceAccount is its own; the exception label marks the boundary."""
        manifests = render(cases.GATEWAY_DEFAULT)
        boundary = config_file(manifests)["boundary"]
        service = find(manifests, "Service", RELEASE)
        assert service["spec"]["selector"] in boundary["selectors"]
        assert {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "controller"} in boundary[
            "selectors"
        ]
        assert pod_spec(manifests)["serviceAccountName"] in boundary["service_accounts"]
        assert boundary["marker_keys"] == ["memgov/boundary-exception"]
        assert boundary["kagent_namespace"] == "kagent"
        assert "ServiceAccount" in kinds(manifests)

    @pytest.mark.parametrize(
        "values",
        [{"serviceAccount": {"create": False}}, {"mode": "sidecar", **cases.SIDECAR}],
        ids=["no-service-account", "sidecar"],
    )
    def test_no_shared_service_account_is_ever_protected(self, values: dict[str, Any]) -> None:
        """Without its own ServiceAccount memgov protects none: never 'default', which every plain pod runs as."""
        assert _boundary(values)["service_accounts"] == []

    def test_the_rendered_section_is_what_memgov_reads(self) -> None:
        """memgov's settings accept the rendered section, and its checker refuses memgov's own labels by it."""
        boundary = Boundary.of(BoundarySettings.model_validate(_boundary(cases.GATEWAY_PRODUCTION)))
        assert ("app.kubernetes.io/instance", RELEASE) in boundary.pairs
        assert {"memgov-bridge", "memgov-operator", "memgov-state"} <= boundary.secrets


class TestGovernedModelConfigs:
    def test_the_agents_model_configs_are_guarded(self) -> None:
        """memory.modelConfig and modelConfigs become the agent's model_configs (an operator changes them)."""
        values = {
            "agents": {
                "kagent/helper": {
                    "disabledVariant": "helper-nomem",
                    "ghost": "@agent-helper:example.org",
                    "embeddingModel": "text-embedding-3-small",
                    "modelConfigs": ["default-model-config", "tools/summarizer"],
                }
            }
        }
        agent = config_file(render(values))["agents"]["kagent/helper"]
        assert agent["model_configs"] == ["default-model-config", "tools/summarizer"]
