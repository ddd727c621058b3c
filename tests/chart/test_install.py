"""The chart on a real API server: install, upgrade, rollback and uninstall in namespaces enforcing the
restricted Pod Security Standard, every pod it would start admitted, kagent's patched controller pod,
the prometheus-operator resources, the chart as a subchart and the migration hook Job.

Nothing runs pods here (no kubelet, no controllers): a pod is "admitted" when the server accepts it
in a server-side dry run, with its defaulting, PodSecurity and ServiceAccount admission. Where a
controller's work is needed - a hook Job finishing - the test does it through the API, in the open.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import cases
from tests.chart.helm import CHART, REPO, umbrella, with_state
from tests.chart.jobs import JobController
from tests.support.kube import KubeApi, collection, pod_from

CRDS = REPO / ".tools" / "crds" / "prometheus-operator"
VENDOR = Path(os.environ.get("MEMGOV_VENDOR_DIR") or REPO.parent / "shared" / "vendor")
KAGENT_CHART = VENDOR / "kagent-v0.9.11-helm.tar.gz"
POSTGRES: dict[str, Any] = {
    "state": {"postgresql": {"existingSecret": "memgov-state"}},
    "networkPolicy": {"postgresql": {"to": [cases.POSTGRES_PEER]}},
}
_names = itertools.count(1)
KUBE = "1.36.3"  # the API server's version, for `helm template` (which asks no server)


def _namespace(kube: KubeApi, hint: str) -> str:
    name = f"{re.sub(r'[^a-z0-9-]', '-', hint.lower())[:40].strip('-')}-{next(_names)}"
    kube.create_namespace(name)
    return name


def _in(namespace: str, values: dict[str, Any]) -> dict[str, Any]:
    """values for a release in this namespace (memgov refuses any other than kagent.namespace)."""
    kagent = {**(values.get("kagent") or {}), "namespace": namespace}
    return {**with_state(values), "kagent": kagent}


def _helm(kube: KubeApi, *args: str, values: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="memgov-values-") as fh:
        extra: tuple[str, ...] = ()
        if values is not None:
            json.dump(values, fh)
            fh.flush()
            extra = ("--values", fh.name)
        return kube.helm(*args, *extra)


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # The namespace warns on the restricted level too: helm prints the server's warnings.
    assert "PodSecurity" not in proc.stderr, proc.stderr
    return proc.stdout


def _items(kube: KubeApi, path: str) -> list[dict[str, Any]]:
    return list(kube.get(path).ok()["items"])


def _assert_pods_admitted(kube: KubeApi, namespace: str, owners: list[dict[str, Any]]) -> None:
    for owner in owners:
        reply = kube.create(pod_from(owner, namespace), dry_run=True)
        assert reply.status == 201, f"{owner['metadata']['name']}: {reply.body.get('message')}"
        assert reply.warnings == [], reply.warnings


def _assert_release_stored(kube: KubeApi, namespace: str) -> None:
    """Every object of the release's manifest is on the server, as the server defaulted it."""
    manifest = _ok(kube.helm("get", "manifest", "memgov", "--namespace", namespace))
    objects = [d for d in yaml.safe_load_all(manifest) if d]
    assert objects
    for obj in objects:
        reply = kube.get(f"{collection(obj, namespace)}/{obj['metadata']['name']}")
        assert reply.status == 200, f"{obj['kind']} {obj['metadata']['name']}: {reply.body.get('message')}"


def _deployments(kube: KubeApi, namespace: str) -> list[dict[str, Any]]:
    return _items(kube, f"/apis/apps/v1/namespaces/{namespace}/deployments")


@pytest.fixture
def prometheus_crds(kube: KubeApi) -> None:
    """prometheus-operator's ServiceMonitor and PrometheusRule CRDs (`make tools` fetches them)."""
    assert CRDS.exists(), f"{CRDS} is missing: run `make tools`"
    kube.install_crds(CRDS)


VALUE_SETS = [
    *cases.MATRIX.items(),
    ("gateway-persistent-sqlite", {"state": {"persistence": {"enabled": True}}}),
    ("sidecar-persistent-sqlite", {**cases.SIDECAR, "state": {"persistence": {"enabled": True}}}),
    (
        "gateway-platform",
        {
            **POSTGRES,
            "autoscaling": {"enabled": True},
            "podDisruptionBudget": {"enabled": True},
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.org:3128"}],
            "extraVolumes": [{"name": "pg-ca", "configMap": {"name": "pg-ca"}}],
            "extraVolumeMounts": [{"name": "pg-ca", "mountPath": "/etc/memgov-ca", "readOnly": True}],
            "listen": {"hosts": ["0.0.0.0", "::"]},
            "policy": {
                "engine": "opa",
                "opa": {"container": {"enabled": True, "image": {"digest": "sha256:" + "cd" * 32}}},
            },
        },
    ),
]


class TestLifecycle:
    @pytest.mark.parametrize(("name", "values"), VALUE_SETS, ids=[n for n, _ in VALUE_SETS])
    def test_install_upgrade_rollback_uninstall_in_a_restricted_namespace(
        self, kube: KubeApi, prometheus_crds: None, name: str, values: dict[str, Any]
    ) -> None:
        ns = _namespace(kube, name)
        release = ("memgov", str(CHART), "--namespace", ns)
        # With PostgreSQL state a hook Job migrates before install and upgrade, and another checks the schema
        # before the rollback: they must be admitted too.
        with JobController(kube, ns) as jobs:
            for stage, action in (("prepare", "install"), ("enforce", "upgrade")):
                staged = _in(ns, {**values, "rollout": {"stage": stage}})
                _ok(_helm(kube, action, *release, values=staged))
                deployments = _deployments(kube, ns)
                assert len(deployments) == (0 if values.get("mode") == "sidecar" else 1)
                _assert_pods_admitted(kube, ns, deployments)
                _assert_release_stored(kube, ns)
            _ok(kube.helm("rollback", "memgov", "1", "--namespace", ns))
        assert jobs.refused == []
        history = json.loads(_ok(kube.helm("history", "memgov", "--namespace", ns, "--output", "json")))
        assert [h["revision"] for h in history] == [1, 2, 3] and history[-1]["status"] == "deployed"
        config = kube.get(f"/api/v1/namespaces/{ns}/configmaps/memgov-kagent").ok()
        assert config["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        _assert_pods_admitted(kube, ns, _deployments(kube, ns))
        _ok(kube.helm("uninstall", "memgov", "--namespace", ns))
        assert _deployments(kube, ns) == []
        assert (
            _items(kube, f"/api/v1/namespaces/{ns}/configmaps?labelSelector=app.kubernetes.io/instance%3Dmemgov") == []
        )
        claims = [c["metadata"]["name"] for c in _items(kube, f"/api/v1/namespaces/{ns}/persistentvolumeclaims")]
        # A claim holding SQLite state outlives the release (helm.sh/resource-policy: keep).
        assert claims == (["memgov-state"] if "persistence" in (values.get("state") or {}) else [])

    def test_monitoring_resources_meet_the_prometheus_operator_crds(self, kube: KubeApi, prometheus_crds: None) -> None:
        ns = _namespace(kube, "monitoring")
        values = _in(
            ns,
            {
                "serviceMonitor": {"enabled": True},
                "prometheusRule": cases.PROMETHEUS_RULE,
                "grafanaDashboard": {"enabled": True},
            },
        )
        rendered = [
            m
            for m in yaml.safe_load_all(
                _ok(
                    _helm(
                        kube, "template", "memgov", str(CHART), "--namespace", ns, "--kube-version", KUBE, values=values
                    )
                )
            )
            if m
        ]
        _ok(_helm(kube, "install", "memgov", str(CHART), "--namespace", ns, values=values))
        for kind, plural in (("ServiceMonitor", "servicemonitors"), ("PrometheusRule", "prometheusrules")):
            (want,) = [m for m in rendered if m["kind"] == kind]
            stored = kube.get(f"/apis/monitoring.coreos.com/v1/namespaces/{ns}/{plural}/memgov").ok()
            # The CRD's structural schema prunes unknown fields: the stored spec equals the rendered one.
            assert stored["spec"] == want["spec"], kind
        broken = next(m for m in rendered if m["kind"] == "ServiceMonitor")
        broken["metadata"] = {"name": "broken", "namespace": ns}
        broken["spec"] = {**broken["spec"], "endpoints": [{"port": "ops", "interval": "thirty seconds"}]}
        refused = kube.create(broken, dry_run=True)
        assert refused.status == 422, "the CRD schema accepted an invalid interval"


SIDECAR_STATES = {
    "ephemeral": {"ephemeral": True},
    "persistent": {"persistence": {"enabled": True}},
    "postgresql": POSTGRES["state"],
}


class TestKagentController:
    @pytest.mark.parametrize("state", list(SIDECAR_STATES))
    def test_the_patched_controller_pod_is_admitted(self, kube: KubeApi, state: str) -> None:
        """kagent's own controller Deployment, rendered by kagent's chart with memgov's kagent values,
        patched by the server with memgov's strategic-merge patch, gives a Deployment the server
        validates (Recreate without rollingUpdate on a claim) and a pod the namespace admits."""
        assert KAGENT_CHART.exists(), f"{KAGENT_CHART} is missing (set MEMGOV_VENDOR_DIR)"
        ns = _namespace(kube, f"sidecar-kagent-{state}")
        values = {**cases.SIDECAR, "state": SIDECAR_STATES[state]}
        if state == "postgresql":
            values["networkPolicy"] = {**cases.SIDECAR["networkPolicy"], **POSTGRES["networkPolicy"]}
        with JobController(kube, ns) as jobs:
            _ok(_helm(kube, "install", "memgov", str(CHART), "--namespace", ns, values=_in(ns, values)))
        assert jobs.refused == []
        files = kube.get(f"/api/v1/namespaces/{ns}/configmaps/memgov-kagent").ok()["data"]
        deployment = _kagent_controller(kube, ns, yaml.safe_load(files["kagent-values.yaml"]))
        kube.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kagent-controller", "namespace": ns}}
        ).ok()
        kube.create(deployment).ok()
        patch = yaml.safe_load(files["controller-patch.yaml"])
        patched = kube.request(
            "PATCH",
            f"/apis/apps/v1/namespaces/{ns}/deployments/kagent-controller",
            patch,
            dry_run=True,
            content_type="application/strategic-merge-patch+json",
        ).ok()
        containers = [c["name"] for c in patched["spec"]["template"]["spec"]["containers"]]
        # memgov's containers come first (the patch adds them): kubectl logs/exec default to kagent's.
        assert {"controller", "memgov", "opa"} <= set(containers) and containers[0] != "controller"
        assert patched["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == (
            "controller"
        )
        assert patched["spec"]["replicas"] == 1
        if state == "persistent":
            assert patched["spec"]["strategy"] == {"type": "Recreate"}
            (claim,) = [v for v in patched["spec"]["template"]["spec"]["volumes"] if v["name"] == "memgov-state"]
            assert claim["persistentVolumeClaim"] == {"claimName": "memgov-state"}
        else:
            assert patched["spec"]["strategy"]["type"] == "RollingUpdate"
        _assert_pods_admitted(kube, ns, [patched])


def _kagent_controller(kube: KubeApi, namespace: str, kagent_values: dict[str, Any]) -> dict[str, Any]:
    """kagent's controller Deployment as kagent v0.9.11's chart renders it with these values."""
    with tempfile.TemporaryDirectory(prefix="kagent-chart-") as scratch:
        subprocess.run(["tar", "-xzf", str(KAGENT_CHART), "-C", scratch], check=True)
        chart = Path(scratch) / "helm" / "kagent"
        # The release's Chart.yaml is generated from this template; its subcharts are not needed for
        # the controller Deployment.
        meta = yaml.safe_load(
            (chart / "Chart-template.yaml").read_text().replace("${VERSION}", "0.9.11").replace("${", "x{")
        )
        meta.pop("dependencies", None)
        (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
        out = _ok(
            _helm(
                kube,
                "template",
                "kagent",
                str(chart),
                "--namespace",
                namespace,
                "--kube-version",
                KUBE,
                "--show-only",
                "templates/controller-deployment.yaml",
                values=kagent_values,
            )
        )
    return dict(yaml.safe_load(out))


class TestSubchartAndHooks:
    def test_the_chart_installs_as_a_subchart(self, kube: KubeApi) -> None:
        ns = _namespace(kube, "umbrella")
        with tempfile.TemporaryDirectory(prefix="memgov-umbrella-") as scratch:
            root = umbrella(
                Path(scratch), {"state": {"ephemeral": True}, "kagent": {"namespace": ns}, "fullnameOverride": "memgov"}
            )
            _ok(kube.helm("install", "platform", str(root), "--namespace", ns))
        (deployment,) = _deployments(kube, ns)
        assert deployment["metadata"]["labels"]["app.kubernetes.io/instance"] == "platform"
        _assert_pods_admitted(kube, ns, [deployment])
        _ok(kube.helm("uninstall", "platform", "--namespace", ns))

    def test_the_migration_job_runs_before_install_and_upgrade(self, kube: KubeApi) -> None:
        ns = _namespace(kube, "migrate")
        values = _in(ns, {**POSTGRES, "state": {**POSTGRES["state"], "migrationJob": {"enabled": True}}})
        with JobController(kube, ns) as jobs:
            _ok(_helm(kube, "install", "memgov", str(CHART), "--namespace", ns, values=values))
            _ok(_helm(kube, "upgrade", "memgov", str(CHART), "--namespace", ns, values=values))
        assert jobs.refused == []
        assert jobs.admitted == ["memgov-migrate", "memgov-migrate"]
        # hook-succeeded: helm deleted each finished Job.
        assert _items(kube, f"/apis/batch/v1/namespaces/{ns}/jobs") == []
        _assert_pods_admitted(kube, ns, _deployments(kube, ns))

    def test_an_unfinished_migration_fails_the_install(self, kube: KubeApi) -> None:
        """Without a Job controller the hook never completes: helm gives up and the release failed."""
        ns = _namespace(kube, "migrate-stuck")
        values = _in(ns, {**POSTGRES, "state": {**POSTGRES["state"], "migrationJob": {"enabled": True}}})
        proc = _helm(kube, "install", "memgov", str(CHART), "--namespace", ns, "--timeout", "5s", values=values)
        assert proc.returncode != 0
        assert _deployments(kube, ns) == []
