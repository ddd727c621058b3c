"""The real API server the chart is installed on: its version, and that it enforces Pod Security."""

from __future__ import annotations

import time
from typing import Any

from tests.support.kube import KubeApi


def _pod(name: str, namespace: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "registry.example.com/app:1", **container}], **spec},
    }


RESTRICTED_CONTAINER = {
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
}


def test_the_server_reports_the_pinned_release(kube: KubeApi) -> None:
    # helm refuses a server that reports v0.0.0-master: the build links the release's version in.
    version = kube.get("/version").ok()
    assert (version["gitVersion"], version["major"], version["minor"]) == ("v1.36.3", "1", "36")
    helm = kube.helm("version", "--short")
    assert helm.returncode == 0, helm.stderr
    listed = kube.helm("list", "--all-namespaces", "--output", "json")
    assert listed.returncode == 0, listed.stderr


def test_a_restricted_namespace_refuses_a_privileged_pod_and_admits_a_restricted_one(kube: KubeApi) -> None:
    kube.create_namespace("smoke-restricted")
    privileged = _pod("privileged", "smoke-restricted", {"securityContext": {"privileged": True}})
    refused = kube.create(privileged, dry_run=True)
    assert refused.status == 403
    assert 'violates PodSecurity "restricted:latest"' in refused.body["message"]
    assert "privileged" in refused.body["message"]

    admitted = kube.create(_pod("restricted", "smoke-restricted", RESTRICTED_CONTAINER), dry_run=True)
    body = admitted.ok()
    assert admitted.warnings == []
    # The server defaulted what the manifest left out, and the dry run stored nothing.
    assert body["spec"]["containers"][0]["terminationMessagePolicy"] == "File"
    assert kube.get("/api/v1/namespaces/smoke-restricted/pods/restricted").status == 404


def test_a_baseline_namespace_admits_the_privileged_pod_the_restricted_one_refuses(kube: KubeApi) -> None:
    # The refusal above comes from the namespace's level, not from a server that refuses every pod.
    kube.create_namespace("smoke-privileged", pod_security="privileged")
    privileged = _pod("privileged", "smoke-privileged", {"securityContext": {"privileged": True}})
    assert kube.create(privileged, dry_run=True).status == 201


def test_validating_admission_policies_are_enforced(kube: KubeApi) -> None:
    """The server runs ValidatingAdmissionPolicy (CEL), which admission policies for kagent's pods use."""
    kube.create_namespace("smoke-vap")
    kube.create(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "smoke-no-forbidden-key"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "validations": [
                    {"expression": "!has(object.data) || !('forbidden' in object.data)", "message": "no forbidden key"}
                ],
            },
        }
    ).ok()
    kube.create(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "smoke-no-forbidden-key"},
            "spec": {
                "policyName": "smoke-no-forbidden-key",
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "smoke-vap"}}},
            },
        }
    ).ok()

    def config_map(key: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": key, "namespace": "smoke-vap"},
            "data": {key: "x"},
        }

    # The policy takes effect once the server has compiled it; it then refuses on every create.
    deadline = time.monotonic() + 30
    while (refused := kube.create(config_map("forbidden"), dry_run=True)).status == 201:
        assert time.monotonic() < deadline, "the ValidatingAdmissionPolicy never took effect"
        time.sleep(0.5)
    assert refused.status == 422 and "no forbidden key" in refused.body["message"]
    assert kube.create(config_map("allowed"), dry_run=True).status == 201
