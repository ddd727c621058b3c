"""The install model's pure parts: label selectors, witnesses built to match each ingress peer, stand-ins for
targets whose labels are not all known."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
import yaml

from sidecar.boundary.model import (
    CHART_DEFAULTS,
    BoundaryInputError,
    Install,
    Peer,
    normalize_policies,
    satisfying,
    selects,
    stand_ins,
    witnesses,
)
from tests.support.boundary import REPO


class TestSelectors:
    @pytest.mark.parametrize(
        "selector",
        [
            {},
            {"matchLabels": {"a": "1"}},
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["2", "3"]}]},
            {"matchExpressions": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "DoesNotExist"}]},
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["2"]}]},
        ],
    )
    def test_satisfying_labels_are_selected(self, selector: dict[str, Any]) -> None:
        """The labels built for a selector are matched by it."""
        labels = satisfying(selector)
        assert labels is not None and selects(selector, labels)

    def test_contradiction_has_no_labels(self) -> None:
        """A selector no pod can match yields no witness labels."""
        selector = {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}
        assert satisfying(selector) is None


def _policy(peer: dict[str, Any]) -> dict[str, Any]:
    doc = {
        "kind": "NetworkPolicy",
        "metadata": {"name": "p"},
        "spec": {"podSelector": {}, "ingress": [{"from": [peer]}]},
    }
    return normalize_policies([doc], "kagent")[0]


class TestWitnesses:
    def test_ip_block_witness_avoids_exceptions(self) -> None:
        """An ipBlock witness lies inside the CIDR and outside every exception."""
        block = {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/16", "10.1.0.0/16"]}
        (peer,) = witnesses([_policy({"ipBlock": block})])
        addr = ipaddress.ip_address(peer.ip)
        assert peer.namespace is None and addr in ipaddress.ip_network("10.0.0.0/8")
        assert not any(addr in ipaddress.ip_network(c) for c in block["except"])

    def test_namespace_selector_witness_lives_in_a_matching_namespace(self) -> None:
        """A namespaceSelector peer's witness carries the namespace (and name) the selector asks for."""
        ns = {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}
        (peer,) = witnesses([_policy({"namespaceSelector": ns, "podSelector": {"matchLabels": {"app": "x"}}})])
        assert (peer.namespace, dict(peer.labels)) == ("ingress-nginx", {"app": "x"})

    def test_pod_selector_witness_stays_home(self) -> None:
        """A podSelector-only peer's witness lives in the policy's own namespace."""
        (peer,) = witnesses([_policy({"podSelector": {"matchLabels": {"app": "x"}}})])
        assert peer.namespace == "kagent"

    def test_policy_types_default_like_the_api_server(self) -> None:
        """Without policyTypes a policy is Ingress, plus Egress when it has egress rules."""
        doc = {"kind": "NetworkPolicy", "metadata": {"name": "p"}, "spec": {"podSelector": {}, "egress": []}}
        assert normalize_policies([doc], "kagent")[0]["spec"]["policyTypes"] == ["Ingress", "Egress"]

    def test_everything_else_is_refused(self) -> None:
        """A Secret in the export is an input error, not something to skip silently."""
        with pytest.raises(BoundaryInputError):
            normalize_policies([{"kind": "Secret", "metadata": {"name": "s"}}], "kagent")


def _selecting(selector: dict[str, Any], namespace: str = "kagent", types: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": selector, "ingress": [{}]}
    if types is not None:
        spec["policyTypes"] = types
    return normalize_policies(
        [{"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": namespace}, "spec": spec}], "kagent"
    )[0]


class TestStandIns:
    CONTROLLER = Install.from_values({}).controller

    def test_the_values_controller_has_unknown_labels(self) -> None:
        """The controller built from the chart's selector may carry more labels; a real pod's are all known."""
        assert not self.CONTROLLER.labels_known
        assert Peer("kagent/real", "10.0.0.1", "kagent", {"a": "b"}).labels_known

    @pytest.mark.parametrize(
        ("selector", "extra"),
        [
            ({"matchLabels": {"app.kubernetes.io/instance": "kagent"}}, {"app.kubernetes.io/instance": "kagent"}),
            ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}]}, {"team": "ml"}),
            (
                {"matchLabels": {"app.kubernetes.io/component": "controller", "team": "ml"}},
                {"team": "ml"},
            ),
        ],
        ids=["other-label", "in-expression", "known-and-unknown"],
    )
    def test_a_selector_asking_for_unknown_labels_gets_a_stand_in(
        self, selector: dict[str, Any], extra: dict[str, str]
    ) -> None:
        """A stand-in carries the known labels and what the selector asks for besides, and the selector selects it."""
        (stand_in,) = stand_ins(self.CONTROLLER, [_selecting(selector)])
        assert dict(stand_in.labels) == {**self.CONTROLLER.labels, **extra}
        assert selects(selector, stand_in.labels) and stand_in.name.startswith("kagent/kagent-controller[")

    @pytest.mark.parametrize(
        "policy",
        [
            _selecting({"matchLabels": {"app.kubernetes.io/component": "ui", "team": "ml"}}),
            _selecting({"matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "DoesNotExist"}]}),
            _selecting({"matchLabels": {"team": "ml"}}, namespace="elsewhere"),
            _selecting({"matchLabels": {"team": "ml"}}, types=["Egress"]),
            _selecting({}),
        ],
        ids=["contradicts-a-known-label", "excludes-a-known-label", "other-namespace", "egress-only", "selects-anyway"],
    )
    def test_no_stand_in_where_the_known_labels_decide(self, policy: dict[str, Any]) -> None:
        """Contradicting or excluding known labels, another namespace, egress only, or selecting anyway: no stand-in."""
        assert stand_ins(self.CONTROLLER, [policy]) == []

    def test_known_labels_need_no_stand_in(self) -> None:
        """A pod whose labels are all known (from --pods) is judged by them alone."""
        real = Peer("kagent/real", "10.0.0.1", "kagent", dict(self.CONTROLLER.labels))
        assert stand_ins(real, [_selecting({"matchLabels": {"team": "ml"}})]) == []


class TestChartDefaults:
    def test_model_defaults_are_the_charts(self) -> None:
        """The values the model reads default to exactly what charts/memgov/values.yaml says."""
        chart = yaml.safe_load((REPO / "charts" / "memgov" / "values.yaml").read_text())

        def pick(defaults: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
            return {k: pick(v, values[k]) if isinstance(v, dict) and v else values[k] for k, v in defaults.items()}

        assert pick(CHART_DEFAULTS, chart) == CHART_DEFAULTS
