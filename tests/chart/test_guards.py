"""Broken values fail the install with a message that names what to change."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import cases
from tests.chart.helm import HelmFailed, render, render_error, run_helm

PG = {"to": [cases.POSTGRES_PEER]}


class TestSchemaGuards:
    @pytest.mark.parametrize(
        ("values", "message"),
        [
            ({"replicaCont": 2}, "additional properties 'replicaCont' not allowed"),
            ({"networkPolicy": {"agent": {}}}, "additional properties 'agent' not allowed"),
            ({"policy": {"opa": {"container": {"image": {"tagg": "1"}}}}}, "additional properties 'tagg' not allowed"),
            ({"mode": "proxy"}, "mode"),
            ({"policy": {"engine": "rego"}}, "engine"),
            ({"securityContext": {"allowPrivilegeEscalation": True}}, "allowPrivilegeEscalation"),
            ({"podSecurityContext": {"runAsNonRoot": False}}, "runAsNonRoot"),
            ({"agents": {"helper": {"disabledVariant": "helper-nomem", "ghost": "@a:b"}}}, "helper"),
            ({"policy": {"pack": {"files": {"limits.yaml": "max_days: 7\n"}}}}, "limits.yaml"),
            ({"networkPolicy": {"controllerClients": []}}, "additional properties 'controllerClients' not allowed"),
            ({"rollout": {"stage": "now"}}, "stage"),
        ],
        ids=[
            "top-level-typo",
            "nested-typo",
            "deep-typo",
            "unknown-mode",
            "unknown-engine",
            "privilege-escalation",
            "root",
            "agent-without-namespace",
            "pack-file-outside-cedar-rego-data",
            "no-direct-controller-clients",
            "unknown-rollout-stage",
        ],
    )
    def test_schema_refuses_values(self, values: dict[str, Any], message: str) -> None:
        """values.schema.json refuses misspelt keys, unknown choices and weakened pod security, naming the key."""
        error = render_error(values)
        assert "values don't meet the specifications of the schema" in error
        assert message in error

    def test_lint_reports_a_typo(self) -> None:
        """helm lint fails on a misspelt key and names it."""
        with pytest.raises(Exception, match="replicaCont"):
            run_helm("lint", {"replicaCont": 2})


class TestCombinationGuards:
    @pytest.mark.parametrize(
        ("values", "message"),
        [
            ({"replicaCount": 2}, "replicaCount=2 needs PostgreSQL state"),
            ({"policy": {"engine": "opa"}}, "policy.engine=opa needs an OPA server"),
            ({"policy": {"engine": "shadow"}}, "policy.engine=shadow needs an OPA server"),
            (
                {"policy": {"engine": "opa", "opa": {"container": {"enabled": True}, "url": "http://opa:8181"}}},
                "both set",
            ),
            ({"policy": {"opa": {"container": {"enabled": True}}}}, "policy.engine=cedar never asks it"),
            ({"erasure": {"adapter": "kagent-db"}}, "erasure.adapter=kagent-db needs"),
            ({"upstream": {"embeddingUrl": "https://e.example/v1"}}, "networkPolicy.embedding.to is empty"),
            ({"state": {"postgresql": {"existingSecret": "s"}}}, "networkPolicy.postgresql.to is empty"),
            (
                {"erasure": {"adapter": "kagent-db", "kagentDb": {"existingSecret": "s"}}},
                "networkPolicy.postgresql.to is empty",
            ),
            ({"policy": {"engine": "opa", "opa": {"url": "http://opa:8181"}}}, "networkPolicy.opa.to is empty"),
            (
                {"policy": {"pack": {"files": {"cedar/a.cedar": "permit(principal, action, resource);\n"}}}},
                "no data/limits.yaml",
            ),
            (
                {
                    "policy": {
                        "engine": "opa",
                        "opa": {"container": {"enabled": True}},
                        "pack": {"files": {"data/limits.yaml": "max_days: 7\n"}},
                    }
                },
                "no rego/ files",
            ),
            (
                {"policy": {"pack": {"files": {"data/limits.yaml": "", "data/a__b.yaml": "", "data/a/b.yaml": ""}}}},
                "collides",
            ),
            ({"mode": "sidecar", "kagent": {"ui": {"gatewayAccess": "port-forward"}}}, "gateway mode only"),
            ({"tracing": {"enabled": True}, "networkPolicy": {"enabled": False}}, "needs tracing.endpoint"),
            (
                {"tracing": {"enabled": True, "endpoint": "http://c:4318/v1/traces"}},
                "networkPolicy.tracing.to is empty",
            ),
        ],
        ids=[
            "sqlite-with-two-replicas",
            "opa-without-opa",
            "shadow-without-opa",
            "two-opa-servers",
            "opa-that-nobody-asks",
            "kagent-db-without-secret",
            "embedding-blocked-by-egress",
            "state-postgresql-blocked-by-egress",
            "kagent-db-blocked-by-egress",
            "external-opa-blocked-by-egress",
            "pack-without-limits",
            "opa-without-rego",
            "pack-key-collision",
            "port-forward-ui-in-sidecar-mode",
            "tracing-without-endpoint",
            "tracing-blocked-by-egress",
        ],
    )
    def test_impossible_combinations_fail(self, values: dict[str, Any], message: str) -> None:
        """Values that could never work fail the render with a message naming the values to change."""
        assert message in render_error(values)

    def test_every_problem_is_reported_at_once(self) -> None:
        """Several impossible combinations are listed together, so one failed install shows them all."""
        error = render_error({"replicaCount": 2, "policy": {"engine": "opa"}, "erasure": {"adapter": "kagent-db"}})
        assert "replicaCount=2" in error
        assert "policy.engine=opa" in error
        assert "erasure.adapter=kagent-db" in error

    def test_sidecar_outside_kagents_namespace_fails(self) -> None:
        """In sidecar mode memgov runs in kagent's controller pod, so its release lives in kagent's namespace."""
        message = render_error({"mode": "sidecar"}, namespace="memgov")
        assert 'in sidecar mode memgov must be installed in kagent\'s namespace "kagent"' in message

    def test_gateway_in_a_namespace_of_its_own(self) -> None:
        """In gateway mode memgov may live elsewhere: kagent's namespace gets an alias of its Service for the agents."""
        manifests = render({"rollout": cases.ENFORCE}, "memgov")
        alias = next(m for m in manifests if m["kind"] == "Service" and m["metadata"]["namespace"] == "kagent")
        assert alias["metadata"]["name"] == "memgov"
        assert alias["spec"] == {"type": "ExternalName", "externalName": "memgov.memgov.svc.cluster.local"}
        where = {(m["kind"], m["metadata"]["name"]): m["metadata"].get("namespace") for m in manifests}
        assert where[("Deployment", "memgov")] == where[("NetworkPolicy", "memgov")] == "memgov"
        assert where[("NetworkPolicy", "memgov-kagent-controller")] == "kagent"
        hook = next(m for m in manifests if m["kind"] == "Pod")
        assert hook["metadata"]["namespace"] == "kagent"  # it stands in for an agent

    @pytest.mark.parametrize(
        "values",
        [
            {"replicaCount": 2, "state": {"postgresql": {"existingSecret": "s"}}, "networkPolicy": {"postgresql": PG}},
            {"replicaCount": 2, "state": {"postgresql": {"existingSecret": "s"}}, "networkPolicy": {"enabled": False}},
            {"mode": "sidecar", "upstream": {"embeddingUrl": "https://e.example/v1"}},
        ],
        ids=["replicas-with-postgresql", "egress-guards-off-without-policies", "sidecar-has-no-egress-policy"],
    )
    def test_working_combinations_render(self, values: dict[str, Any]) -> None:
        """The guards refuse only what cannot work: the fixed versions of the broken values render."""
        assert run_helm("template", values)


class TestKubeVersion:
    @pytest.mark.parametrize(("version", "accepted"), [("1.29.9", False), ("1.30.0", True), ("1.33.0", True)])
    def test_needs_a_cluster_with_prestop_sleep(self, version: str, accepted: bool) -> None:
        """The chart needs Kubernetes 1.30 (preStop sleep); `helm template` takes the cluster's --kube-version."""
        if accepted:
            assert run_helm("template", {}, kube_version=version)
        else:
            with pytest.raises(HelmFailed, match="chart requires kubeVersion: >=1.30.0-0"):
                run_helm("template", {}, kube_version=version)
