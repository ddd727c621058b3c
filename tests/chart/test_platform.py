"""Settings a platform team expects: subchart use, affinity, autoscaling, extra env and volumes, image
digests, OpenShift ids, listen addresses, a proxy for the provider, DNS peers, probes, trace attributes."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import cases
from tests.chart.helm import (
    RELEASE,
    HelmFailed,
    config_file,
    find,
    kagent_files,
    kinds,
    notes,
    pod_spec,
    render,
    render_error,
    run_helm,
    umbrella,
)

POSTGRES: dict[str, Any] = {
    "state": {"postgresql": {"existingSecret": "memgov-state"}},
    "networkPolicy": {"postgresql": {"to": [cases.POSTGRES_PEER]}},
}
NODE_LOCAL_DNS = {"ipBlock": {"cidr": "169.254.20.10/32"}}


def _memgov(values: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod_spec(render(values))["containers"] if c["name"] == "memgov"]
    return container


class TestSubchart:
    def test_global_values_are_accepted(self) -> None:
        assert "Deployment" in kinds(render({"global": {"imageRegistry": "registry.example.com"}}))

    def test_the_chart_renders_and_lints_as_a_subchart(self) -> None:
        with tempfile.TemporaryDirectory(prefix="memgov-umbrella-") as scratch:
            root = umbrella(Path(scratch), {"state": {"ephemeral": True}, "fullnameOverride": "memgov"})
            out = run_helm("template", {}, chart=root, choose_state=False)
            manifests = [m for m in yaml.safe_load_all(out) if m]
            assert find(manifests, "Deployment", "memgov")["spec"]["replicas"] == 1
            assert "0 chart(s) failed" in run_helm("lint", {}, chart=root, choose_state=False)

    def test_a_subchart_without_a_state_choice_is_refused(self) -> None:
        with tempfile.TemporaryDirectory(prefix="memgov-umbrella-") as scratch:
            root = umbrella(Path(scratch), {})
            with pytest.raises(HelmFailed, match="no state store chosen"):
                run_helm("template", {}, chart=root, choose_state=False)


class TestScheduling:
    def test_affinity_reaches_the_pod(self) -> None:
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["agents"]}]}
                    ]
                }
            }
        }
        assert pod_spec(render({"affinity": affinity}))["affinity"] == affinity
        assert "affinity" not in pod_spec(render({}))

    def test_the_autoscaler_owns_the_replica_count(self) -> None:
        manifests = render({**POSTGRES, "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 5}})
        hpa = find(manifests, "HorizontalPodAutoscaler", RELEASE)["spec"]
        assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 5)
        assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": RELEASE}
        assert hpa["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 70}
        assert "replicas" not in find(manifests, "Deployment")["spec"]
        assert "HorizontalPodAutoscaler" not in kinds(render(POSTGRES))

    @pytest.mark.parametrize(
        "values",
        [{"autoscaling": {"enabled": True}}, {**cases.SIDECAR, **POSTGRES, "autoscaling": {"enabled": True}}],
        ids=["sqlite", "sidecar"],
    )
    def test_autoscaling_needs_gateway_mode_and_postgresql(self, values: dict[str, Any]) -> None:
        assert "autoscaling.enabled=true needs gateway mode and PostgreSQL state" in render_error(values)

    def test_min_above_max_is_refused(self) -> None:
        values = {**POSTGRES, "autoscaling": {"enabled": True, "minReplicas": 4, "maxReplicas": 3}}
        assert "autoscaling.minReplicas=4 is above autoscaling.maxReplicas=3." in render_error(values)

    def test_autoscaled_pods_spread_even_with_replica_count_one(self) -> None:
        """With an autoscaler replicaCount (1 by default) says nothing about how many pods run: they still prefer
        distinct nodes and zones."""
        spec = pod_spec(render({**POSTGRES, "autoscaling": {"enabled": True}}))
        topology = [c["topologyKey"] for c in spec["topologySpreadConstraints"]]
        assert topology == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]


#: Every pod the chart runs in gateway mode with PostgreSQL, at enforce: the gateway, both hook Jobs, the test pod.
def _pod_specs(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    specs = {}
    for m in render({**POSTGRES, "rollout": cases.ENFORCE, **values}):
        if m["kind"] in ("Deployment", "Job"):
            specs[f"{m['kind']}/{m['metadata']['name']}"] = m["spec"]["template"]["spec"]
        elif m["kind"] == "Pod":
            specs[f"Pod/{m['metadata']['name']}"] = m["spec"]
    return specs


NAMED_KAGENT: dict[str, Any] = {"kagent": {"controller": {"name": "platform-kagent-controller"}}}


class TestKagentControllerName:
    def test_memgov_forwards_to_the_named_service(self) -> None:
        """The default upstream names kagent's controller Service by kagent.controller.name."""
        controller_url = config_file(render(NAMED_KAGENT))["upstream"]["controller_url"]
        assert controller_url == "http://platform-kagent-controller.kagent.svc:8083"

    def test_the_notes_and_the_patch_name_the_deployment(self) -> None:
        """In sidecar mode the notes and the patch's own comment patch the named Deployment."""
        values = {**cases.SIDECAR, **NAMED_KAGENT}
        assert "patch deployment platform-kagent-controller --patch-file" in notes(values)
        manifests = render(values)
        assert "kagent-controller " not in yaml.safe_dump(find(manifests, "ConfigMap", f"{RELEASE}-kagent"))

    def test_no_template_names_kagents_controller_itself(self) -> None:
        """kagent-controller appears in the chart only as the value's default, never in a template."""
        chart = Path(__file__).resolve().parents[2] / "charts" / "memgov"
        named = [
            p.name for p in (chart / "templates").rglob("*") if p.is_file() and "kagent-controller" in p.read_text()
        ]
        # The controller's NetworkPolicy is memgov's own object, "<memgov>-kagent-controller".
        assert named == ["networkpolicy-controller.yaml"]
        assert '{{ include "memgov.fullname" . }}-kagent-controller' in (chart / "templates" / named[0]).read_text()


class TestImagePullSecrets:
    @pytest.mark.parametrize(
        ("values", "names"),
        [
            ({"global": {"imagePullSecrets": ["platform-registry"]}}, ["platform-registry"]),
            ({"global": {"imagePullSecrets": [{"name": "platform-registry"}]}}, ["platform-registry"]),
            (
                {
                    "global": {"imagePullSecrets": ["platform-registry", "memgov-registry"]},
                    "imagePullSecrets": [{"name": "memgov-registry"}, {"name": "own"}],
                },
                ["platform-registry", "memgov-registry", "own"],
            ),
            ({"imagePullSecrets": [{"name": "own"}]}, ["own"]),
        ],
        ids=["global-names", "global-objects", "both-once-each", "local"],
    )
    def test_every_pod_pulls_with_global_and_own_secrets(self, values: dict[str, Any], names: list[str]) -> None:
        """global.imagePullSecrets (an umbrella's, names or objects) and imagePullSecrets reach the gateway, the hook
        Jobs and the test pod, each name once."""
        specs = _pod_specs(values)
        assert len(specs) == 4
        for where, spec in specs.items():
            assert spec["imagePullSecrets"] == [{"name": n} for n in names], where

    def test_the_sidecar_patch_adds_them_to_kagents_pod(self) -> None:
        """memgov's containers in kagent's pod pull with them too (a strategic merge by name)."""
        values = {**cases.SIDECAR, "global": {"imagePullSecrets": ["platform-registry"]}}
        patch = kagent_files(render(values))["controller-patch.yaml"]["spec"]["template"]["spec"]
        assert patch["imagePullSecrets"] == [{"name": "platform-registry"}]

    def test_none_by_default(self) -> None:
        assert all("imagePullSecrets" not in spec for spec in _pod_specs({}).values())


CA_VOLUME: dict[str, Any] = {"name": "pg-ca", "configMap": {"name": "pg-ca"}}
CA_MOUNT: dict[str, Any] = {"name": "pg-ca", "mountPath": "/etc/memgov-ca", "readOnly": True}
PROXY: dict[str, Any] = {"name": "HTTPS_PROXY", "value": "http://proxy.example.org:3128"}
NULL_IDS: dict[str, Any] = {"podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None}}


class TestExtras:
    @pytest.mark.parametrize("base", [{}, cases.SIDECAR], ids=["gateway", "sidecar"])
    def test_extra_env_volumes_and_mounts_reach_memgov(self, base: dict[str, Any]) -> None:
        values = {**base, "extraEnv": [PROXY], "extraVolumes": [CA_VOLUME], "extraVolumeMounts": [CA_MOUNT]}
        assert CA_VOLUME in pod_spec(render(values))["volumes"]
        memgov = _memgov(values)
        assert CA_MOUNT in memgov["volumeMounts"]
        assert PROXY in memgov["env"]

    def test_opa_image_digest_wins_over_its_tag(self) -> None:
        digest = "sha256:" + "cd" * 32
        values = {"policy": {"engine": "opa", "opa": {"container": {"enabled": True, "image": {"digest": digest}}}}}
        (opa,) = [c for c in pod_spec(render(values))["containers"] if c["name"] == "opa"]
        assert opa["image"] == f"openpolicyagent/opa@{digest}"

    def test_a_malformed_digest_is_refused(self) -> None:
        values = {"policy": {"opa": {"container": {"image": {"digest": "latest"}}}}}
        assert "digest" in render_error(values)


class TestOpenShiftIds:
    @pytest.mark.parametrize("base", [{}, cases.SIDECAR], ids=["gateway", "sidecar"])
    def test_null_ids_are_left_to_the_platform(self, base: dict[str, Any]) -> None:
        manifests = render({**base, **NULL_IDS})
        spec = pod_spec(manifests)
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            context = container["securityContext"]
            assert "runAsUser" not in context and "runAsGroup" not in context, container["name"]
            assert context["runAsNonRoot"] is True
        assert "fsGroup" not in (spec.get("securityContext") or {})

    def test_the_ids_are_set_by_default(self) -> None:
        spec = pod_spec(render({}))
        assert spec["securityContext"]["runAsUser"] == 10001 and spec["securityContext"]["fsGroup"] == 10001
        assert spec["containers"][0]["securityContext"]["runAsUser"] == 10001


class TestListenAndProxy:
    def test_default_listeners_stay_ipv4(self) -> None:
        listen = config_file(render({}))["listen"]
        assert (listen["data"], listen["control"], listen["ops"]) == ("0.0.0.0:8080", "0.0.0.0:8081", "0.0.0.0:9090")

    def test_dual_stack_lists_both_addresses_on_every_listener(self) -> None:
        listen = config_file(render({"listen": {"hosts": ["0.0.0.0", "::"]}}))["listen"]
        assert listen["data"] == "0.0.0.0:8080,[::]:8080"
        assert listen["control"] == "0.0.0.0:8081,[::]:8081"
        assert listen["ops"] == "0.0.0.0:9090,[::]:9090"

    def test_ipv6_only(self) -> None:
        assert config_file(render({"listen": {"hosts": ["::"]}}))["listen"]["data"] == "[::]:8080"

    def test_the_provider_proxy_is_opt_in(self) -> None:
        assert "embedding_trust_env" not in config_file(render({}))["upstream"]
        upstream = config_file(render({"upstream": {"embeddingTrustEnv": True}}))["upstream"]
        assert upstream["embedding_trust_env"] is True


class TestDns:
    def test_node_local_dns_cache_can_be_allowed(self) -> None:
        dns = {"to": [NODE_LOCAL_DNS, cases.POSTGRES_PEER], "ports": [{"port": 53, "protocol": "UDP"}]}
        policy = find(render({"networkPolicy": {"dns": dns}}), "NetworkPolicy", RELEASE)
        (rule,) = [r for r in policy["spec"]["egress"] if NODE_LOCAL_DNS in r["to"]]
        assert rule == {"to": dns["to"], "ports": dns["ports"]}

    def test_default_dns_is_kube_dns_on_udp_and_tcp(self) -> None:
        policy = find(render({}), "NetworkPolicy", RELEASE)
        (rule,) = [r for r in policy["spec"]["egress"] if r["ports"][0]["port"] == 53]
        assert rule["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
        assert rule["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]


class TestPodDetails:
    def test_kubectl_defaults_to_kagents_controller_in_sidecar_mode(self) -> None:
        patch = kagent_files(render(cases.SIDECAR))["controller-patch.yaml"]
        annotations = patch["spec"]["template"]["metadata"]["annotations"]
        assert annotations["kubectl.kubernetes.io/default-container"] == "controller"
        renamed = kagent_files(render({**cases.SIDECAR, "kagent": {"controller": {"container": "kagent"}}}))
        meta = renamed["controller-patch.yaml"]["spec"]["template"]["metadata"]
        assert meta["annotations"]["kubectl.kubernetes.io/default-container"] == "kagent"

    def test_a_startup_probe_holds_the_liveness_probe_back(self) -> None:
        memgov = _memgov({"startupProbe": {"periodSeconds": 2, "failureThreshold": 90}})
        probe = memgov["startupProbe"]
        assert probe["httpGet"] == {"path": "/healthz", "port": 9090}
        assert (probe["periodSeconds"], probe["failureThreshold"]) == (2, 90)
        assert "initialDelaySeconds" not in memgov["livenessProbe"]

    @pytest.mark.parametrize("base", [{}, cases.SIDECAR], ids=["gateway", "sidecar"])
    def test_spans_carry_the_pod_namespace_and_node(self, base: dict[str, Any]) -> None:
        env = {e["name"]: e for e in _memgov(base)["env"]}
        assert env["OTEL_RESOURCE_ATTRIBUTES"]["value"] == (
            "k8s.pod.name=$(OTEL_K8S_POD_NAME),k8s.namespace.name=$(OTEL_K8S_NAMESPACE),"
            "k8s.node.name=$(OTEL_K8S_NODE_NAME)"
        )
        fields = {name: env[name]["valueFrom"]["fieldRef"]["fieldPath"] for name in env if name.startswith("OTEL_K8S_")}
        assert fields == {
            "OTEL_K8S_POD_NAME": "metadata.name",
            "OTEL_K8S_NAMESPACE": "metadata.namespace",
            "OTEL_K8S_NODE_NAME": "spec.nodeName",
        }
        # Kubernetes expands $(VAR) only from variables defined earlier in the list.
        names = list(env)
        assert names.index("OTEL_RESOURCE_ATTRIBUTES") > max(names.index(n) for n in fields)
