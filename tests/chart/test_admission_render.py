"""The admission guards as rendered: when they are there, what they bind to, what they may refuse, and the grant."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.chart import cases
from tests.chart.helm import find, notes, render, render_error

POLICY = "memgov-kagent-boundary"
GUARDS = [POLICY, f"{POLICY}-own", f"{POLICY}-identity", f"{POLICY}-cilium"]
GRANT = re.compile(
    r"authorizer\.group\('([^']*)'\)\.resource\('([^']*)'\)\.namespace\('([^']*)'\)\.name\('([^']*)'\)"
    r"\.check\('([^']*)'\)\.allowed\(\)"
)


def admission(values: dict[str, Any], namespace: str = "kagent") -> list[dict[str, Any]]:
    """The admission objects rendered for these values."""
    return [m for m in render(values, namespace) if m["kind"].startswith("ValidatingAdmissionPolicy")]


def expressions(policy: dict[str, Any]) -> str:
    """Every CEL expression of a policy, one per line."""
    spec = policy["spec"]
    parts = [c["expression"] for c in spec.get("matchConditions", [])]
    parts += [v["expression"] for v in spec.get("variables", [])]
    parts += [v["expression"] for v in spec["validations"]]
    return "\n".join(parts)


class TestWhen:
    @pytest.mark.parametrize("mode", ["gateway", "sidecar"])
    def test_on_by_default_once_enforced(self, mode: str) -> None:
        """At the enforce stage the four guards and their bindings are rendered in both modes, not before."""
        rendered = admission({"mode": mode, "rollout": cases.ENFORCE})
        assert sorted((m["kind"], m["metadata"]["name"]) for m in rendered) == sorted(
            (kind, name)
            for name in GUARDS
            for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        )
        assert admission({"mode": mode}) == []

    def test_optional(self) -> None:
        """admissionPolicy.enabled=false leaves the guards and the grant out."""
        values = {"rollout": cases.ENFORCE, "admissionPolicy": {"enabled": False}}
        assert admission(values) == []
        assert not [m for m in render(values) if m["kind"] == "ClusterRole"]

    def test_refuses_to_render_with_open_controller_ports(self) -> None:
        """The switch that opens every controller port cannot be combined with the policy that refuses it."""
        message = render_error({"rollout": cases.ENFORCE, "networkPolicy": {"allowOtherControllerPorts": True}})
        assert "networkPolicy.allowOtherControllerPorts=true" in message and "admissionPolicy" in message


class TestScope:
    @pytest.mark.parametrize("namespace", ["kagent", "memgov"], ids=["kagents-namespace", "own-namespace"])
    def test_each_binding_denies_where_its_objects_live(self, namespace: str) -> None:
        """Every binding denies (not warns); the own-object and identity guards cover memgov's own namespace too."""
        for guard in GUARDS:
            name = guard.replace("memgov-kagent", f"memgov-{namespace}")
            binding = find(admission({"rollout": cases.ENFORCE}, namespace), "ValidatingAdmissionPolicyBinding", name)
            assert binding["spec"]["policyName"] == name
            assert binding["spec"]["validationActions"] == ["Deny"]
            expected = ["kagent"] if guard in (POLICY, f"{POLICY}-cilium") else sorted({"kagent", namespace})
            (term,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
            assert (term["key"], term["operator"]) == ("kubernetes.io/metadata.name", "In")
            assert sorted(term["values"]) == expected, name

    @pytest.mark.parametrize(
        ("guard", "rules"),
        [
            (POLICY, [("networking.k8s.io", ["networkpolicies"], ["CREATE", "UPDATE"])]),
            (
                f"{POLICY}-own",
                [
                    ("networking.k8s.io", ["networkpolicies"], ["UPDATE", "DELETE"]),
                    ("", ["services", "serviceaccounts", "configmaps", "secrets"], ["UPDATE", "DELETE"]),
                ],
            ),
            (
                f"{POLICY}-identity",
                [("", ["pods"], ["CREATE", "UPDATE"]), ("apps", ["deployments", "replicasets"], ["CREATE", "UPDATE"])],
            ),
            (
                f"{POLICY}-cilium",
                [("cilium.io", ["ciliumnetworkpolicies", "ciliumclusterwidenetworkpolicies"], ["CREATE", "UPDATE"])],
            ),
        ],
    )
    def test_each_guard_fails_closed_on_its_writes(
        self, guard: str, rules: list[tuple[str, list[str], list[str]]]
    ) -> None:
        """Each guard judges exactly the writes of its kinds and fails closed."""
        spec = find(render({"rollout": cases.ENFORCE}), "ValidatingAdmissionPolicy", guard)["spec"]
        assert spec["failurePolicy"] == "Fail"
        got = [(r["apiGroups"][0], r["resources"], r["operations"]) for r in spec["matchConstraints"]["resourceRules"]]
        assert got == rules

    @pytest.mark.parametrize(
        ("mode", "rules"),
        [
            ("gateway", ["memgov-boundary/controller-ingress", "memgov-boundary/ui-ingress"]),
            ("sidecar", ["memgov-boundary/controller-ingress"]),
        ],
    )
    def test_each_validation_names_its_rule(self, mode: str, rules: list[str]) -> None:
        """Every refusal message starts with the rule's name; the UI rule exists in gateway mode only."""
        spec = find(render({"mode": mode, "rollout": cases.ENFORCE}), "ValidatingAdmissionPolicy", POLICY)["spec"]
        named = [v["messageExpression"].split(":")[0].strip('"') for v in spec["validations"]]
        assert named == rules


class TestGrant:
    @pytest.mark.parametrize("stage", ["prepare", "enforce"])
    def test_the_clusterrole_is_there_before_the_guards(self, stage: str) -> None:
        """The grant's ClusterRole renders from the first stage, so admins can be bound before enforcing."""
        role = find(render({"rollout": {"stage": stage}}), "ClusterRole", f"{POLICY}-admin")
        assert role["rules"] == [
            {
                "apiGroups": ["memgov"],
                "resources": ["boundaries"],
                "resourceNames": ["memgov"],
                "verbs": ["maintain", "exempt"],
            }
        ]

    @pytest.mark.parametrize("namespace", ["kagent", "memgov"], ids=["kagents-namespace", "own-namespace"])
    def test_every_check_asks_for_what_the_clusterrole_grants(self, namespace: str) -> None:
        """Each authorizer check names the ClusterRole's group, resource and name, in kagent's namespace."""
        manifests = render({"rollout": cases.ENFORCE}, namespace)
        (rule,) = find(manifests, "ClusterRole", f"memgov-{namespace}-boundary-admin")["rules"]
        asked = {
            guard: set(GRANT.findall(expressions(m)))
            for m in manifests
            if m["kind"] == "ValidatingAdmissionPolicy"
            for guard in [m["metadata"]["name"].removeprefix(f"memgov-{namespace}-boundary")]
        }
        granted = {
            (rule["apiGroups"][0], rule["resources"][0], "kagent", rule["resourceNames"][0], v) for v in rule["verbs"]
        }
        assert {g for checks in asked.values() for g in checks} == granted
        assert {c[4] for c in asked[""]} == {"exempt"}
        assert {c[4] for c in asked["-cilium"]} == {"exempt"}
        assert {c[4] for c in asked["-own"]} == {"maintain"}
        assert {c[4] for c in asked["-identity"]} == {"maintain"}

    def test_the_mounted_secrets_are_memgovs_own(self) -> None:
        """The own-object guard knows memgov's Secrets by name: every Secret the pods mount."""
        values = {"rollout": cases.ENFORCE, "trust": {"bridgeKey": {"existingSecret": "memgov-bridge"}}}
        guard = find(render(values), "ValidatingAdmissionPolicy", f"{POLICY}-own")
        (own,) = [c["expression"] for c in guard["spec"]["matchConditions"] if c["name"] == "memgovs-own"]
        assert '["memgov-session-key","memgov-bridge"]' in own

    def test_key_folder_secrets_are_memgovs_own_too(self) -> None:
        """A Secret mounted as a key folder (trust.bridgeKeys) is guarded like a mounted key file."""
        values = {"rollout": cases.ENFORCE, "trust": {"bridgeKeys": {"existingSecret": "memgov-bridge-keys"}}}
        guard = find(render(values), "ValidatingAdmissionPolicy", f"{POLICY}-own")
        (own,) = [c["expression"] for c in guard["spec"]["matchConditions"] if c["name"] == "memgovs-own"]
        assert '["memgov-session-key","memgov-bridge-keys"]' in own


class TestNotes:
    def test_the_notes_say_to_grant_before_enforcing(self) -> None:
        """Before the enforce stage the install notes give the RoleBinding that grants the boundary verbs."""
        text = notes({})
        assert "create rolebinding memgov-boundary-admins \\\n     --clusterrole=memgov-kagent-boundary-admin" in text
        assert "create rolebinding" not in notes({"rollout": cases.ENFORCE})

    def test_kagent_commands_name_kagents_namespace(self) -> None:
        """With memgov in its own namespace, the notes run kagent's commands in kagent's namespace."""
        text = notes({}, "memgov")
        assert "in namespace memgov (kagent's: kagent)" in text
        assert "helm upgrade kagent <kagent chart> -n kagent" in text
        assert "kubectl -n kagent rollout restart deployment -l app=kagent,kagent" in text
        assert "kubectl -n memgov get configmap memgov-kagent" in text
        assert "(http://memgov.kagent:8083)" in text
