"""The admission policy on a real kube-apiserver: every NetworkPolicy that reopens kagent's controller is refused.

The chart's ValidatingAdmissionPolicy and binding are created as `helm install` would create them,
one namespace per mode; then each policy below is sent to the server and admitted or refused by
the server's own CEL evaluation.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chart.helm import CHART, render
from tests.support.boundary import HOSTILE
from tests.support.kube import KubeApi, Reply

EXCEPTION_LABEL = "memgov/boundary-exception"
SETTLE_S = 60.0


#: Numbers each setup's namespace: pytest may set a module-scoped fixture up again for the same
#: parameter when a worker's tests interleave, and a namespace (and its cluster-scoped policy,
#: named after it) can be created only once per server.
_setups = itertools.count(1)

#: The chart configurations whose admission policies differ: (mode, kagent.ui.gatewayAccess).
SETUPS = [("gateway", "none"), ("gateway", "port-forward"), ("sidecar", "none")]


def values(mode: str, access: str, namespace: str) -> dict[str, Any]:
    """The chart's values for one setup, enforced, installed in namespace."""
    kagent = {"namespace": namespace, "ui": {"gatewayAccess": access}}
    return {"mode": mode, "rollout": {"stage": "enforce"}, "kagent": kagent}


def in_namespace(policy: dict[str, Any], namespace: str, **labels: str) -> dict[str, Any]:
    """A copy of a NetworkPolicy placed in namespace, with extra labels."""
    out = copy.deepcopy(policy)
    out["metadata"]["namespace"] = namespace
    if labels:
        out["metadata"]["labels"] = {**out["metadata"].get("labels", {}), **labels}
    return out


def send(kube: KubeApi, policy: dict[str, Any]) -> Reply:
    """Create the policy with a server-side dry run: admission runs, nothing is stored."""
    return kube.create(policy, dry_run=True)


@pytest.fixture(scope="module", params=SETUPS, ids=lambda s: "-".join(s))
def guarded(request: pytest.FixtureRequest, kube: KubeApi) -> Iterator[tuple[str, str]]:
    """A namespace per setup with the chart's admission policy and binding in force: (mode, namespace)."""
    mode, access = request.param
    namespace = f"vap-{mode}-{access}-{next(_setups)}"
    kube.create_namespace(namespace, pod_security=None)
    manifests = render(values(mode, access, namespace), namespace)
    admission = [m for m in manifests if m["kind"].startswith("ValidatingAdmissionPolicy")]
    assert len(admission) == 2
    for obj in admission:
        kube.create(obj).ok()
    # The server compiled every expression on create (a CEL error is a 422 there); its informers
    # pick the policy and binding up asynchronously: wait until a policy that must be refused is.
    canary = in_namespace(HOSTILE["allow-all-ingress"], namespace)
    deadline = time.monotonic() + SETTLE_S
    while send(kube, canary).status != 403:
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(0.5)
    yield mode, namespace


class TestRefused:
    @pytest.mark.parametrize("hostile", ["allow-same-namespace", "allow-from-namespace-selector", "allow-all-ingress"])
    def test_policies_that_reopen_the_controller(self, kube: KubeApi, guarded: tuple[str, str], hostile: str) -> None:
        """Each hostile neighbour that reopens the controller is refused, and the answer names the rule."""
        _, namespace = guarded
        reply = send(kube, in_namespace(HOSTILE[hostile], namespace))
        assert reply.status == 403, reply.body
        assert "memgov-boundary/controller-ingress" in reply.body["message"]
        assert HOSTILE[hostile]["metadata"]["name"] in reply.body["message"]

    def test_a_policy_opening_the_ui_in_gateway_mode(self, kube: KubeApi, guarded: tuple[str, str]) -> None:
        """In gateway mode kagent's UI proxies to the controller, so opening it is refused too."""
        mode, namespace = guarded
        reply = send(kube, in_namespace(HOSTILE["ui-open"], namespace))
        if mode == "gateway":
            assert reply.status == 403 and "memgov-boundary/ui-ingress" in reply.body["message"]
        else:
            # Sidecar mode: the UI's calls land on memgov like any other client's.
            assert reply.status == 201, reply.body

    def test_a_port_named_instead_of_numbered(self, kube: KubeApi, guarded: tuple[str, str]) -> None:
        """Opening the controller's container port by name is refused like opening it by number."""
        _, namespace = guarded
        named = in_namespace(HOSTILE["allow-all-ingress"], namespace)
        named["metadata"]["name"] = "open-http-by-name"
        named["spec"]["ingress"] = [{"ports": [{"port": "http", "protocol": "TCP"}]}]
        assert send(kube, named).status == 403

    def test_an_update_that_reopens_the_controller(self, kube: KubeApi, guarded: tuple[str, str]) -> None:
        """A harmless policy stored first cannot later be changed into a hostile one."""
        _, namespace = guarded
        harmless = in_namespace(HOSTILE["egress-only"], namespace)
        harmless["metadata"]["name"] = "grows-later"
        kube.create(harmless).ok()
        hostile = copy.deepcopy(harmless)
        hostile["spec"] = {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}
        reply = kube.apply(hostile)
        assert reply.status == 403 and "memgov-boundary/controller-ingress" in reply.body["message"]


class TestAdmitted:
    def test_the_charts_own_policies(self, kube: KubeApi, guarded: tuple[str, str]) -> None:
        """Every NetworkPolicy the chart renders for this setup passes its own admission policy."""
        mode, namespace = guarded
        access = namespace.removeprefix(f"vap-{mode}-").rsplit("-", 1)[0]  # less the setup number
        own = [m for m in render(values(mode, access, namespace), namespace) if m["kind"] == "NetworkPolicy"]
        expected = {("gateway", "none"): 2, ("gateway", "port-forward"): 3, ("sidecar", "none"): 1}[(mode, access)]
        assert len(own) == expected
        for policy in own:
            reply = send(kube, policy)
            assert reply.status == 201, (policy["metadata"]["name"], reply.body)

    def test_a_labelled_exception(self, kube: KubeApi, guarded: tuple[str, str]) -> None:
        """An operator's policy labelled memgov/boundary-exception=true is let through."""
        _, namespace = guarded
        reply = send(kube, in_namespace(HOSTILE["allow-all-ingress"], namespace, **{EXCEPTION_LABEL: "true"}))
        assert reply.status == 201, reply.body

    def test_any_other_label_value_is_no_exception(self, kube: KubeApi, guarded: tuple[str, str]) -> None:
        """Only the value "true" makes an exception."""
        _, namespace = guarded
        reply = send(kube, in_namespace(HOSTILE["allow-all-ingress"], namespace, **{EXCEPTION_LABEL: "yes"}))
        assert reply.status == 403

    @pytest.mark.parametrize(
        "spec",
        [
            HOSTILE["egress-only"]["spec"],
            # A policy for other pods that rules the controller and UI out by their component label.
            {
                "podSelector": {
                    "matchLabels": {"app.kubernetes.io/name": "kagent"},
                    "matchExpressions": [
                        {"key": "app.kubernetes.io/component", "operator": "NotIn", "values": ["controller", "ui"]}
                    ],
                },
                "policyTypes": ["Ingress"],
                "ingress": [{}],
            },
            # kagent's tools: another app name, so never the controller.
            {
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "querydoc"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"namespaceSelector": {}}]}],
            },
        ],
        ids=["egress-only", "rules-out-controller-and-ui", "tools"],
    )
    def test_policies_that_cannot_reach_the_controller(
        self, kube: KubeApi, guarded: tuple[str, str], spec: dict[str, Any]
    ) -> None:
        """Policies that admit nothing to the controller or UI pods are none of the admission policy's business."""
        _, namespace = guarded
        policy = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "neighbour", "namespace": namespace},
            "spec": spec,
        }
        reply = send(kube, policy)
        assert reply.status == 201, reply.body

    def test_other_namespaces_are_not_judged(self, kube: KubeApi, guarded: tuple[str, str]) -> None:
        """The binding covers kagent's namespace only: the same policy elsewhere is admitted."""
        _, namespace = guarded
        elsewhere = f"{namespace}-elsewhere"
        kube.create_namespace(elsewhere, pod_security=None)
        assert send(kube, in_namespace(HOSTILE["allow-all-ingress"], elsewhere)).status == 201


class TestHelmInstall:
    def test_install_upgrade_and_hook_pod_on_a_real_server(self, kube: KubeApi) -> None:
        """`helm install` at enforce creates the policy, which then refuses a neighbour; `helm upgrade` still
        passes it; and the `helm test` pod is admitted by the restricted Pod Security level."""
        namespace = "boundary-install"
        kube.create_namespace(namespace)
        args = ["memgov", str(CHART), "-n", namespace, "--set", f"kagent.namespace={namespace}"]
        args += ["--set", "rollout.stage=enforce", "--set", "state.ephemeral=true"]
        installed = kube.helm("install", *args)
        assert installed.returncode == 0, installed.stderr
        stored = kube.get(f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies").ok()
        assert sorted(p["metadata"]["name"] for p in stored["items"]) == ["memgov", "memgov-kagent-controller"]
        canary = in_namespace(HOSTILE["allow-same-namespace"], namespace)
        deadline = time.monotonic() + SETTLE_S
        while (reply := send(kube, canary)).status != 403:
            assert time.monotonic() < deadline, reply.body
            time.sleep(0.5)
        assert "memgov-boundary/controller-ingress" in reply.body["message"]
        upgraded = kube.helm("upgrade", *args, "--set", "networkPolicy.monitoring.podSelector.matchLabels.app=prom")
        assert upgraded.returncode == 0, upgraded.stderr
        hook = next(m for m in render(values("gateway", "none", namespace), namespace) if m["kind"] == "Pod")
        admitted = kube.create(hook, dry_run=True)
        assert admitted.status == 201, admitted.body
        assert admitted.warnings == []
