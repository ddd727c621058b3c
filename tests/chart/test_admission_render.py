"""The ValidatingAdmissionPolicy as rendered: when it is there, what it binds to, what it may refuse."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import cases
from tests.chart.helm import find, render, render_error

POLICY = "memgov-kagent-boundary"


def admission(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The admission objects rendered for these values."""
    return [m for m in render(values) if m["kind"].startswith("ValidatingAdmissionPolicy")]


class TestWhen:
    @pytest.mark.parametrize("mode", ["gateway", "sidecar"])
    def test_on_by_default_once_enforced(self, mode: str) -> None:
        """At the enforce stage the policy and its binding are rendered in both modes, not before."""
        assert {m["kind"] for m in admission({"mode": mode, "rollout": cases.ENFORCE})} == {
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        }
        assert admission({"mode": mode}) == []

    def test_optional(self) -> None:
        """admissionPolicy.enabled=false leaves it out."""
        assert admission({"rollout": cases.ENFORCE, "admissionPolicy": {"enabled": False}}) == []

    def test_refuses_to_render_with_open_controller_ports(self) -> None:
        """The switch that opens every controller port cannot be combined with the policy that refuses it."""
        message = render_error({"rollout": cases.ENFORCE, "networkPolicy": {"allowOtherControllerPorts": True}})
        assert "networkPolicy.allowOtherControllerPorts=true" in message and "admissionPolicy" in message


class TestScope:
    def test_binding_denies_in_kagents_namespace_only(self) -> None:
        """The binding denies (not warns) and only for NetworkPolicies of the release's namespace."""
        binding = find(render({"rollout": cases.ENFORCE}), "ValidatingAdmissionPolicyBinding", POLICY)
        assert binding["spec"]["policyName"] == POLICY
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"] == {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kagent"}}
        }

    def test_policy_fails_closed_on_networkpolicy_writes(self) -> None:
        """The policy judges every create and update of a NetworkPolicy and fails closed."""
        spec = find(render({"rollout": cases.ENFORCE}), "ValidatingAdmissionPolicy", POLICY)["spec"]
        assert spec["failurePolicy"] == "Fail"
        assert spec["matchConstraints"]["resourceRules"] == [
            {
                "apiGroups": ["networking.k8s.io"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["networkpolicies"],
            }
        ]

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
