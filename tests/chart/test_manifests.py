"""Rendered manifests: valid Kubernetes objects, restricted pods, probes, Service wiring, per-mode kinds."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.chart import cases
from tests.chart.helm import KUBE_VERSION, RELEASE, config_file, find, kinds, pod_spec, render

MATRIX = list(cases.MATRIX.items())
IDS = list(cases.MATRIX)

# The ServiceMonitor is a CRD that kubernetes-validate does not bundle. Its spec is checked
# structurally against the monitoring.coreos.com/v1 fields the chart uses (unknown fields refused),
# and its metadata against Kubernetes' ObjectMeta.
_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
SERVICE_MONITOR_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["selector", "endpoints"],
    "properties": {
        "selector": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}},
        },
        "namespaceSelector": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}, "any": {"type": "boolean"}},
        },
        "endpoints": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["port"],
                "properties": {
                    "port": {"type": "string"},
                    "path": {"type": "string", "pattern": "^/"},
                    "interval": {"type": "string", "pattern": _DURATION},
                    "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                },
            },
        },
    },
}

STAND_IN_CONTROLLER = {"name": "controller", "image": "cr.kagent.dev/kagent-dev/kagent/controller:0.9.11"}


def _validate(manifest: dict[str, Any]) -> None:
    if manifest["kind"] == "ServiceMonitor":
        assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": manifest["metadata"]}, KUBE_VERSION, strict=True
        )
        jsonschema.validate(manifest["spec"], SERVICE_MONITOR_SPEC)
        return
    kubernetes_validate.validate(manifest, KUBE_VERSION, strict=True)


class TestKubernetesSchemas:
    @pytest.mark.parametrize(("name", "values"), MATRIX, ids=IDS)
    def test_every_manifest_is_a_valid_object(self, name: str, values: dict[str, Any]) -> None:
        """Every rendered manifest passes the Kubernetes schema of its kind with unknown fields refused."""
        for manifest in render(values):
            _validate(manifest)

    def test_sidecar_patch_makes_a_valid_controller_pod(self) -> None:
        """The sidecar containers and volumes form a valid Deployment beside kagent's controller container."""
        spec = pod_spec(render(cases.SIDECAR))
        spec["containers"] = [STAND_IN_CONTROLLER, *spec["containers"]]
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "kagent-controller", "namespace": "kagent"},
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "template": {"metadata": {"labels": {"app": "x"}}, "spec": spec},
            },
        }
        _validate(deployment)

    def test_structural_check_refuses_unknown_service_monitor_fields(self) -> None:
        """A ServiceMonitor with a misspelt endpoint field fails the structural check."""
        monitor = find(render(cases.GATEWAY_PRODUCTION), "ServiceMonitor")
        monitor["spec"]["endpoints"][0]["intervall"] = "30s"
        with pytest.raises(jsonschema.ValidationError):
            _validate(monitor)


#: The four admission guards and their bindings, in the order kinds() sorts them.
GUARDS = ["ValidatingAdmissionPolicy"] * 4 + ["ValidatingAdmissionPolicyBinding"] * 4


class TestRenderedKinds:
    @pytest.mark.parametrize(
        ("values", "expected"),
        [
            (
                cases.GATEWAY_DEFAULT,
                [
                    "ClusterRole",
                    "ConfigMap",
                    "ConfigMap",
                    "Deployment",
                    "NetworkPolicy",
                    "PodDisruptionBudget",
                    "Service",
                    "ServiceAccount",
                ],
            ),
            (
                cases.GATEWAY_PRODUCTION,
                [
                    "ClusterRole",
                    "ConfigMap",
                    "ConfigMap",
                    "ConfigMap",
                    "Deployment",
                    "Job",
                    "Job",
                    "NetworkPolicy",
                    "NetworkPolicy",
                    "NetworkPolicy",
                    "Pod",
                    "PodDisruptionBudget",
                    "Service",
                    "ServiceAccount",
                    "ServiceAccount",
                    "ServiceMonitor",
                    *GUARDS,
                ],
            ),
            (
                cases.SIDECAR,
                [
                    "ClusterRole",
                    "ConfigMap",
                    "ConfigMap",
                    "ConfigMap",
                    "NetworkPolicy",
                    "Pod",
                    "Service",
                    *GUARDS,
                ],
            ),
            ({"mode": "sidecar"}, ["ClusterRole", "ConfigMap", "ConfigMap", "Service"]),
        ],
        ids=["gateway", "gateway-production", "sidecar", "sidecar-prepare"],
    )
    def test_each_mode_renders_its_objects(self, values: dict[str, Any], expected: list[str]) -> None:
        """Gateway mode owns a Deployment, PDB and ServiceAccount; sidecar mode only patches kagent's pod.

        The pack is in memgov's image, so no pack ConfigMap is rendered; kagent's pods get policies,
        the admission guards (four policies and their bindings) and the `helm test` pod (and its script's
        ConfigMap) only at the enforce stage; the ClusterRole that grants passage through the guards from the start.
        PostgreSQL state adds the hook Jobs (migrate, schema check) with their ServiceAccount and egress policy.
        """
        assert kinds(render(values)) == expected


class TestPodSecurity:
    @pytest.mark.parametrize(("name", "values"), MATRIX, ids=IDS)
    def test_every_container_is_restricted(self, name: str, values: dict[str, Any]) -> None:
        """Every memgov and OPA container runs non-root, read-only, seccomp RuntimeDefault, with ALL dropped."""
        for container in pod_spec(render(values))["containers"]:
            sc = container["securityContext"]
            assert sc["runAsNonRoot"] is True
            assert sc["runAsUser"] > 0
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}

    @pytest.mark.parametrize(("name", "values"), MATRIX, ids=IDS)
    def test_every_container_has_requests_and_limits(self, name: str, values: dict[str, Any]) -> None:
        """Every container declares CPU and memory requests and limits."""
        for container in pod_spec(render(values))["containers"]:
            for kind in ("requests", "limits"):
                assert set(container["resources"][kind]) >= {"cpu", "memory"}

    def test_gateway_pod_carries_no_api_token(self) -> None:
        """The gateway pod is restricted at pod level and mounts no Kubernetes API token."""
        spec = pod_spec(render(cases.GATEWAY_DEFAULT))
        assert spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}

    def test_opa_container_appears_only_when_enabled(self) -> None:
        """The OPA container is added for the in-pod OPA and absent otherwise."""
        names = {n: [c["name"] for c in pod_spec(render(v))["containers"]] for n, v in cases.MATRIX.items()}
        assert names["gateway-production"] == ["memgov", "opa"]
        assert names["gateway-external-opa"] == ["memgov"]
        assert names["gateway-default"] == ["memgov"]


def _memgov(values: dict[str, Any]) -> dict[str, Any]:
    return pod_spec(render(values))["containers"][0]


def _port(container: dict[str, Any], name: str) -> int:
    return next(p["containerPort"] for p in container["ports"] if p["name"] == name)


class TestProbesAndService:
    @pytest.mark.parametrize(("name", "values"), MATRIX, ids=IDS)
    def test_probes_use_readyz_and_healthz_on_the_ops_port(self, name: str, values: dict[str, Any]) -> None:
        """Readiness asks /readyz and liveness /healthz, both on the operations port 9090."""
        memgov = _memgov(values)
        assert memgov["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 9090}
        assert memgov["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 9090}
        assert _port(memgov, "ops") == 9090

    @pytest.mark.parametrize(("name", "values"), MATRIX, ids=IDS)
    def test_service_publishes_the_data_plane_on_8083(self, name: str, values: dict[str, Any]) -> None:
        """The Service maps 8083 to the data plane and also publishes the control and metrics ports."""
        memgov = _memgov(values)
        service = find(render(values), "Service", RELEASE)
        ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
        assert ports == {
            "http": (8083, int(config_file(render(values))["listen"]["data"].rsplit(":", 1)[1])),
            "control": (8081, _port(memgov, "control")),
            "ops": (9090, _port(memgov, "ops")),
        }

    @pytest.mark.parametrize(
        ("values", "selects"),
        [(cases.GATEWAY_DEFAULT, "memgov pods"), (cases.SIDECAR, "controller pods")],
        ids=["gateway", "sidecar"],
    )
    def test_service_selects_the_pods_running_memgov(self, values: dict[str, Any], selects: str) -> None:
        """The Service targets memgov's own pods in gateway mode and kagent's controller pods in sidecar mode."""
        manifests = render(values)
        selector = find(manifests, "Service", RELEASE)["spec"]["selector"]
        if selects == "memgov pods":
            assert selector.items() <= find(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
        else:
            assert selector == {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "controller"}

    def test_service_monitor_scrapes_the_ops_port(self) -> None:
        """The ServiceMonitor scrapes /metrics through the Service's ops port."""
        manifests = render(cases.GATEWAY_PRODUCTION)
        endpoint = find(manifests, "ServiceMonitor")["spec"]["endpoints"][0]
        service = find(manifests, "Service", RELEASE)
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["path"] == "/metrics"
