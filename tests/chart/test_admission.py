"""The admission guards on a real kube-apiserver: nothing redraws the boundary around memgov.

The chart's ValidatingAdmissionPolicies, bindings and grant ClusterRole are created as `helm install`
would create them, one setup per mode (and with memgov in a namespace of its own); then each object
below is sent to the server, as a user the test names, and admitted or refused by the server's own
CEL evaluation and RBAC. The users: ``mallory`` may edit everything in the namespaces and holds no
grant (as kagent's controller, or anyone who writes an Agent through it); ``platform-admin`` has the
same rights and the chart's ClusterRole bound in kagent's namespace; the cluster's own controllers
act under their bootstrap identities; the test's admin certificate is system:masters.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.chart.helm import CHART, REPO, render
from tests.support.boundary import HOSTILE
from tests.support.kube import KubeApi, Reply, pod_from

EXCEPTION_LABEL = "memgov/boundary-exception"
SETTLE_S = 60.0
CILIUM_CRDS = REPO / ".tools" / "crds" / "cilium"
MALLORY = "mallory"
ADMIN = "platform-admin"
RS_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
DEPLOYMENT_CONTROLLER = "system:serviceaccount:kube-system:deployment-controller"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
AGENT_LABELS = {"app": "kagent", "kagent": "helper", "app.kubernetes.io/name": "helper"}
MEMGOV_LABELS = {"app.kubernetes.io/name": "memgov", "app.kubernetes.io/instance": "memgov"}
CONTROLLER_LABELS = {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "controller"}
GRANT = {"group": "memgov", "resource": "boundaries", "name": "memgov"}

Obj = dict[str, Any]

#: Numbers each setup's namespace: pytest may set a module-scoped fixture up again for the same
#: parameter when a worker's tests interleave, and a namespace (and its cluster-scoped policy,
#: named after it) can be created only once per server.
_setups = itertools.count(1)


@dataclass(frozen=True)
class Setup:
    """A chart configuration whose guards differ: mode, kagent.ui.gatewayAccess, memgov in its own namespace."""

    mode: str
    access: str = "none"
    own_namespace: bool = False

    def __str__(self) -> str:
        return f"{self.mode}-{self.access}" + ("-own-namespace" if self.own_namespace else "")


SETUPS = [Setup("gateway"), Setup("gateway", "port-forward"), Setup("sidecar"), Setup("gateway", own_namespace=True)]


@dataclass(frozen=True)
class Identity:
    """Pods the boundary trusts: who they are, their namespace and the labels they are selected by."""

    what: str
    namespace: str
    labels: dict[str, str]


@dataclass
class Guarded:
    """One setup with the chart's guards in force: kagent's and memgov's namespaces, the rendered chart."""

    setup: Setup
    kagent: str
    memgov: str
    manifests: list[Obj]

    @property
    def mode(self) -> str:
        return self.setup.mode

    def rendered(self, kind: str) -> list[Obj]:
        """The chart's objects of a kind, each with its namespace."""
        out = [copy.deepcopy(m) for m in self.manifests if m["kind"] == kind]
        for obj in out:
            obj["metadata"].setdefault("namespace", self.memgov)
        return out

    @property
    def identities(self) -> list[Identity]:
        """memgov's pods (gateway mode) and kagent's controller pods, which memgov runs in in sidecar mode."""
        controller = Identity("kagent's controller", self.kagent, CONTROLLER_LABELS)
        if self.mode == "sidecar":
            return [controller]
        return [Identity("memgov", self.memgov, MEMGOV_LABELS), controller]


def values(setup: Setup, kagent: str) -> dict[str, Any]:
    """The chart's values for one setup, enforced, with kagent in namespace kagent."""
    return {
        "mode": setup.mode,
        "rollout": {"stage": "enforce"},
        "kagent": {"namespace": kagent, "ui": {"gatewayAccess": setup.access}},
    }


def in_namespace(obj: Obj, namespace: str, **labels: str) -> Obj:
    """A copy of an object placed in namespace, with extra labels."""
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = namespace
    if labels:
        out["metadata"]["labels"] = {**out["metadata"].get("labels", {}), **labels}
    return out


def send(kube: KubeApi, obj: Obj, *, as_user: str | None = None) -> Reply:
    """Create the object with a server-side dry run: admission runs, nothing is stored."""
    return kube.create(obj, dry_run=True, as_user=as_user)


def refused(reply: Reply, rule: str) -> bool:
    """Whether the server refused with the named guard (not with RBAC or validation)."""
    return reply.status == 403 and f"memgov-boundary/{rule}:" in reply.body.get("message", "")


def until(what: str, check: Callable[[], bool]) -> None:
    """Wait until the server's informers have picked up a policy or binding (no timed assertion)."""
    deadline = time.monotonic() + SETTLE_S
    while not check():
        assert time.monotonic() < deadline, f"{what} never took effect"
        time.sleep(0.5)


def ensure(kube: KubeApi, obj: Obj) -> None:
    """Create an object shared by every setup of the server (already there is fine)."""
    reply = kube.create(obj)
    assert reply.status in (201, 409), reply.body.get("message")


def binding(kind: str, name: str, role_kind: str, role: str, users: list[str], namespace: str | None = None) -> Obj:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users],
    }


def editors(kube: KubeApi) -> None:
    """mallory and platform-admin may write everything the tests send, everywhere (the server runs no
    controller manager, so the built-in ``edit`` and ``admin`` roles, which are aggregated, are empty)."""
    groups = ["", "apps", "networking.k8s.io", "policy", "cilium.io"]
    rules = [{"apiGroups": groups, "resources": ["*"], "verbs": ["*"]}]
    ensure(
        kube, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", **_meta("editor"), "rules": rules}
    )
    ensure(kube, binding("ClusterRoleBinding", "editors", "ClusterRole", "editor", [MALLORY, ADMIN]))


def grant_users(kube: KubeApi, kagent: str, namespaces: list[str], admin_role: str) -> None:
    """mallory and platform-admin may edit the namespaces and Cilium policies; platform-admin holds the grant."""
    editors(kube)
    kube.create(binding("RoleBinding", "boundary-admins", "ClusterRole", admin_role, [ADMIN], kagent)).ok()
    grant = {**GRANT, "namespace": kagent, "verb": "maintain"}
    until("the grant", lambda: kube.allowed(ADMIN, grant) and not kube.allowed(MALLORY, grant))
    edit = {"namespace": namespaces[-1], "verb": "create", "resource": "pods"}
    until("the edit rights", lambda: kube.allowed(MALLORY, edit) and kube.allowed(ADMIN, edit))


def _meta(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


@pytest.fixture(scope="module")
def cilium(kube: KubeApi) -> None:
    """Cilium's policy CRDs on the server (`make tools` fetches them)."""
    assert CILIUM_CRDS.exists(), f"{CILIUM_CRDS} is missing: run `make tools`"
    kube.install_crds(CILIUM_CRDS)


@pytest.fixture(scope="module", params=SETUPS, ids=str)
def guarded(request: pytest.FixtureRequest, kube: KubeApi, cilium: None) -> Iterator[Guarded]:
    """Namespaces per setup with the chart's own objects stored and its guards in force."""
    setup: Setup = request.param
    kagent = f"vap-{setup}-{next(_setups)}"
    memgov = f"{kagent}-memgov" if setup.own_namespace else kagent
    namespaces = sorted({kagent, memgov})
    for ns in namespaces:
        kube.create_namespace(ns, pod_security=None)
    g = Guarded(setup, kagent, memgov, render(values(setup, kagent), memgov))
    # memgov's own objects, stored before the guards exist (as an upgrade to enforce finds them).
    for kind in ("ServiceAccount", "Service", "ConfigMap", "NetworkPolicy"):
        for obj in g.rendered(kind):
            kube.create(obj).ok()
    session_key = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "memgov-session-key"}}
    kube.create(in_namespace(session_key, memgov)).ok()
    guards = [m for m in g.manifests if m["kind"].startswith("ValidatingAdmissionPolicy")]
    assert len(guards) == 8
    (admin_role,) = g.rendered("ClusterRole")
    for obj in [admin_role, *guards]:
        kube.create(obj).ok()
    grant_users(kube, kagent, namespaces, admin_role["metadata"]["name"])
    # The server compiled every expression on create (a CEL error is a 422 there); its informers pick
    # the policies and bindings up asynchronously: wait until each refuses what it must.
    identity = g.identities[0]
    until(
        "the NetworkPolicy guard",
        lambda: refused(send(kube, in_namespace(HOSTILE["allow-all-ingress"], kagent)), "controller-ingress"),
    )
    until(
        "the identity guard",
        lambda: refused(send(kube, pod(identity.namespace, identity.labels), as_user=MALLORY), "identity"),
    )
    own = g.rendered("NetworkPolicy")[0]
    until("the own-object guard", lambda: refused(kube.delete(own, dry_run=True, as_user=MALLORY), "own-object"))
    until(
        "the Cilium guard",
        lambda: refused(send(kube, cnp(kagent, {"endpointSelector": {}, "ingress": [{}]})), "cilium-ingress"),
    )
    yield g


# --- objects the tests send --------------------------------------------------------------------


def pod(namespace: str, labels: dict[str, str], *, owner: str | None = None, name: str = "probe") -> Obj:
    """A minimal pod with these labels, optionally owned (as its controller) by a ReplicaSet or a Job."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        api = "batch/v1" if owner == "Job" else "apps/v1"
        ref = {"apiVersion": api, "kind": owner, "name": "owner", "uid": "0c0ffee0-0000-4000-8000-000000000001"}
        meta["ownerReferences"] = [{**ref, "controller": True, "blockOwnerDeletion": True}]
    spec = {"containers": [{"name": "main", "image": "registry.example.com/app:1"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def workload(kind: str, namespace: str, labels: dict[str, str], *, owner: str | None = None) -> Obj:
    """A Deployment or ReplicaSet (optionally owned by a Deployment) whose pods carry these labels."""
    template = {"metadata": {"labels": dict(labels)}, "spec": pod(namespace, labels)["spec"]}
    meta: dict[str, Any] = {"name": "probe", "namespace": namespace}
    if owner is not None:
        ref = {"apiVersion": "apps/v1", "kind": owner, "name": "owner", "uid": "0c0ffee0-0000-4000-8000-000000000002"}
        meta["ownerReferences"] = [{**ref, "controller": True}]
    spec = {"replicas": 1, "selector": {"matchLabels": dict(labels)}, "template": template}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


def cnp(namespace: str | None, spec: Obj, *, name: str = "neighbour", key: str = "spec", **labels: str) -> Obj:
    """A CiliumNetworkPolicy in namespace, or a CiliumClusterwideNetworkPolicy without one."""
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    if labels:
        meta["labels"] = labels
    kind = "CiliumNetworkPolicy" if namespace else "CiliumClusterwideNetworkPolicy"
    return {"apiVersion": "cilium.io/v2", "kind": kind, "metadata": meta, key: spec if key == "spec" else [spec]}


def own_workload(g: Guarded) -> Obj:
    """The Deployment whose pods carry the first identity: memgov's rendered one, or kagent's controller's."""
    if g.mode == "gateway":
        (deployment,) = g.rendered("Deployment")
        return deployment
    return workload("Deployment", g.kagent, CONTROLLER_LABELS) | {
        "metadata": {"name": "kagent-controller", "namespace": g.kagent}
    }


# --- NetworkPolicies that open the controller ----------------------------------------------------


class TestNetworkPolicies:
    @pytest.mark.parametrize("hostile", ["allow-same-namespace", "allow-from-namespace-selector", "allow-all-ingress"])
    def test_policies_that_reopen_the_controller(self, kube: KubeApi, guarded: Guarded, hostile: str) -> None:
        """Each hostile neighbour that reopens the controller is refused, a cluster admin's too, naming the rule."""
        reply = send(kube, in_namespace(HOSTILE[hostile], guarded.kagent))
        assert refused(reply, "controller-ingress"), reply.body
        assert HOSTILE[hostile]["metadata"]["name"] in reply.body["message"]

    def test_a_policy_opening_the_ui_in_gateway_mode(self, kube: KubeApi, guarded: Guarded) -> None:
        """In gateway mode kagent's UI proxies to the controller, so opening it is refused too."""
        reply = send(kube, in_namespace(HOSTILE["ui-open"], guarded.kagent))
        if guarded.mode == "gateway":
            assert refused(reply, "ui-ingress"), reply.body
        else:
            # Sidecar mode: the UI's calls land on memgov like any other client's.
            assert reply.status == 201, reply.body

    def test_a_port_named_instead_of_numbered(self, kube: KubeApi, guarded: Guarded) -> None:
        """Opening the controller's container port by name is refused like opening it by number."""
        named = in_namespace(HOSTILE["allow-all-ingress"], guarded.kagent)
        named["metadata"]["name"] = "open-http-by-name"
        named["spec"]["ingress"] = [{"ports": [{"port": "http", "protocol": "TCP"}]}]
        assert refused(send(kube, named), "controller-ingress")

    def test_an_update_that_reopens_the_controller(self, kube: KubeApi, guarded: Guarded) -> None:
        """A harmless policy stored first cannot later be changed into a hostile one."""
        harmless = in_namespace(HOSTILE["egress-only"], guarded.kagent)
        harmless["metadata"]["name"] = "grows-later"
        kube.create(harmless).ok()
        hostile = copy.deepcopy(harmless)
        hostile["spec"] = {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}
        assert refused(kube.apply(hostile, as_user=MALLORY), "controller-ingress")

    def test_the_charts_own_policies(self, kube: KubeApi, guarded: Guarded) -> None:
        """Every NetworkPolicy the chart renders for this setup passes its own admission policy."""
        own = guarded.rendered("NetworkPolicy")
        expected = 3 if guarded.setup.access == "port-forward" else 1 if guarded.mode == "sidecar" else 2
        assert len(own) == expected
        for policy in own:
            reply = kube.apply(policy, dry_run=True, as_user=ADMIN)
            assert reply.status == 200, (policy["metadata"]["name"], reply.body)

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
    def test_policies_that_cannot_reach_the_controller(self, kube: KubeApi, guarded: Guarded, spec: Obj) -> None:
        """Policies that admit nothing to the controller or UI pods are none of the admission policy's business."""
        policy = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "neighbour", "namespace": guarded.kagent},
            "spec": spec,
        }
        reply = send(kube, policy, as_user=MALLORY)
        assert reply.status == 201, reply.body

    def test_memgovs_labels_are_memgov_only_where_memgov_lives(self, kube: KubeApi, guarded: Guarded) -> None:
        """A rule admitting memgov's labels from kagent's namespace admits memgov, unless memgov lives elsewhere."""
        policy = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "from-memgov-labels", "namespace": guarded.kagent},
            "spec": {
                "podSelector": {"matchLabels": CONTROLLER_LABELS},
                "ingress": [{"from": [{"podSelector": {"matchLabels": MEMGOV_LABELS}}], "ports": [{"port": 8083}]}],
            },
        }
        reply = send(kube, policy, as_user=MALLORY)
        if guarded.setup.own_namespace or guarded.mode == "sidecar":
            assert refused(reply, "controller-ingress"), reply.body
        else:
            assert reply.status == 201, reply.body

    def test_other_namespaces_are_not_judged(self, kube: KubeApi, guarded: Guarded) -> None:
        """The binding covers kagent's namespace only: the same policy elsewhere is admitted."""
        elsewhere = f"{guarded.kagent}-elsewhere"
        kube.create_namespace(elsewhere, pod_security=None)
        assert send(kube, in_namespace(HOSTILE["allow-all-ingress"], elsewhere)).status == 201


class TestException:
    @pytest.mark.parametrize(
        ("user", "label", "admitted"),
        [
            (ADMIN, "true", True),
            (MALLORY, "true", False),
            (ADMIN, None, False),
            (ADMIN, "yes", False),
        ],
        ids=["granted-and-labelled", "labelled-without-the-grant", "granted-without-the-label", "other-label-value"],
    )
    def test_an_exception_needs_the_label_and_the_grant(
        self, kube: KubeApi, guarded: Guarded, user: str, label: str | None, admitted: bool
    ) -> None:
        """Only a policy labelled memgov/boundary-exception=true, by someone granted "exempt", opens the controller."""
        labels = {EXCEPTION_LABEL: label} if label else {}
        reply = send(kube, in_namespace(HOSTILE["allow-all-ingress"], guarded.kagent, **labels), as_user=user)
        if admitted:
            assert reply.status == 201, reply.body
        else:
            assert refused(reply, "controller-ingress"), reply.body
            said = "It is labelled" if label == "true" else "An intended exception carries the label"
            assert said in reply.body["message"]


# --- memgov's own objects ------------------------------------------------------------------------


def _select_nothing(policy: Obj) -> Obj:
    # A name no pod has: it cannot select the controller or UI either, so only the own-object guard objects.
    policy["spec"]["podSelector"] = {"matchLabels": {"app.kubernetes.io/name": "nothing"}}
    return policy


def _egress_only(policy: Obj) -> Obj:
    policy["spec"]["policyTypes"] = ["Egress"]
    policy["spec"].pop("ingress", None)
    return policy


class TestOwnObjects:
    @pytest.mark.parametrize(("user", "admitted"), [(MALLORY, False), (ADMIN, True)], ids=["ungranted", "granted"])
    @pytest.mark.parametrize("change", ["delete", "select-nothing", "egress-only"])
    def test_memgovs_policies(self, kube: KubeApi, guarded: Guarded, change: str, user: str, admitted: bool) -> None:
        """Deleting memgov's NetworkPolicies, or making them select nothing or admit no ingress, needs the grant."""
        for policy in guarded.rendered("NetworkPolicy"):
            if change == "delete":
                reply = kube.delete(policy, dry_run=True, as_user=user)
            else:
                edit = _select_nothing if change == "select-nothing" else _egress_only
                reply = kube.apply(edit(policy), dry_run=True, as_user=user)
            if admitted:
                assert reply.status == 200, (policy["metadata"]["name"], reply.body)
            else:
                assert refused(reply, "own-object"), (policy["metadata"]["name"], reply.body)
                assert f"{user} is not granted verb maintain" in reply.body["message"]

    @pytest.mark.parametrize(("user", "admitted"), [(MALLORY, False), (ADMIN, True)], ids=["ungranted", "granted"])
    def test_memgovs_service_selector(self, kube: KubeApi, guarded: Guarded, user: str, admitted: bool) -> None:
        """Pointing memgov's Service elsewhere (what kagent does to a Service named like an agent) needs the grant."""
        for service in guarded.rendered("Service"):
            if service["spec"].get("type") == "ExternalName":
                service["spec"]["externalName"] = "elsewhere.example.org"
            else:
                service["spec"]["selector"] = {"app": "kagent", "kagent": "memgov"}
            reply = kube.apply(service, dry_run=True, as_user=user)
            assert (reply.status == 200) if admitted else refused(reply, "own-object"), reply.body

    def test_memgovs_secrets_and_configmaps(self, kube: KubeApi, guarded: Guarded) -> None:
        """The session key Secret and memgov's ConfigMaps are overwritten only with the grant."""
        key = in_namespace(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "memgov-session-key"}}, guarded.memgov
        )
        key["stringData"] = {"session-key": "known-to-the-attacker"}
        assert refused(kube.apply(key, dry_run=True, as_user=MALLORY), "own-object")
        assert kube.apply(key, dry_run=True, as_user=ADMIN).status == 200
        # The `helm test` hook's ConfigMap is helm's to replace, and holds only the check script.
        configs = [
            c for c in guarded.rendered("ConfigMap") if "helm.sh/hook" not in c["metadata"].get("annotations", {})
        ]
        assert configs
        for config in configs:
            config["data"] = {"config.yaml": "{}"}
            assert refused(kube.apply(config, dry_run=True, as_user=MALLORY), "own-object")

    def test_other_objects_are_not_judged(self, kube: KubeApi, guarded: Guarded) -> None:
        """A ConfigMap that is not memgov's is changed and deleted without any grant."""
        other = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "agent-notes", "namespace": guarded.memgov},
        }
        kube.create(other).ok()
        assert kube.apply({**other, "data": {"a": "b"}}, dry_run=True, as_user=MALLORY).status == 200
        assert kube.delete(other, dry_run=True, as_user=MALLORY).status == 200


# --- pods and workloads that claim an identity ---------------------------------------------------


#: (case, user, what is sent: "pod" / "Deployment" / "ReplicaSet", its controller owner, admitted)
IDENTITY_CASES = [
    ("pod-by-a-user", MALLORY, "pod", None, False),
    ("deployment-by-a-user", MALLORY, "Deployment", None, False),
    ("replicaset-by-a-user", MALLORY, "ReplicaSet", None, False),
    ("pod-by-the-job-controller", JOB_CONTROLLER, "pod", "Job", False),
    ("pod-by-the-replicaset-controller-owned-by-a-job", RS_CONTROLLER, "pod", "Job", False),
    ("replicaset-by-the-deployment-controller-unowned", DEPLOYMENT_CONTROLLER, "ReplicaSet", None, False),
    ("pod-by-the-replicaset-controller-from-a-replicaset", RS_CONTROLLER, "pod", "ReplicaSet", True),
    (
        "replicaset-by-the-deployment-controller-from-a-deployment",
        DEPLOYMENT_CONTROLLER,
        "ReplicaSet",
        "Deployment",
        True,
    ),
    ("deployment-by-the-grant-holder", ADMIN, "Deployment", None, True),
    ("pod-by-the-grant-holder", ADMIN, "pod", None, True),
]


class TestIdentity:
    @pytest.mark.parametrize(
        ("user", "sent", "owner", "admitted"), [c[1:] for c in IDENTITY_CASES], ids=[c[0] for c in IDENTITY_CASES]
    )
    def test_who_may_run_pods_with_a_trusted_identity(
        self, kube: KubeApi, guarded: Guarded, user: str, sent: str, owner: str | None, admitted: bool
    ) -> None:
        """Pods with memgov's or kagent's controller labels come only from the grant holder or a guarded template."""
        for identity in guarded.identities:
            obj = (
                pod(identity.namespace, identity.labels, owner=owner)
                if sent == "pod"
                else workload(sent, identity.namespace, identity.labels, owner=owner)
            )
            reply = send(kube, obj, as_user=user)
            if admitted:
                assert reply.status == 201, (identity.what, reply.body)
            else:
                assert refused(reply, "identity"), (identity.what, reply.body)
                assert f"{identity.what} is selected by" in reply.body["message"]

    def test_ordinary_pods_pass(self, kube: KubeApi, guarded: Guarded) -> None:
        """An agent's pod, with kagent's own labels, is none of the guard's business."""
        for ns in {guarded.kagent, guarded.memgov}:
            assert send(kube, pod(ns, AGENT_LABELS), as_user=MALLORY).status == 201

    def test_memgovs_own_rendered_pods_are_admitted(self, kube: KubeApi, guarded: Guarded) -> None:
        """The rendered Deployment (grant holder), its ReplicaSet and its pod (their controllers) are admitted."""
        deployment = own_workload(guarded)
        ns = deployment["metadata"]["namespace"]
        assert send(kube, deployment, as_user=ADMIN).status == 201
        replicaset = copy.deepcopy(deployment) | {"kind": "ReplicaSet"}
        replicaset["spec"].pop("strategy", None)
        replicaset["metadata"] = workload("ReplicaSet", ns, {}, owner="Deployment")["metadata"]
        reply = send(kube, replicaset, as_user=DEPLOYMENT_CONTROLLER)
        assert reply.status == 201, reply.body
        made = pod_from(deployment, ns)
        made["metadata"]["ownerReferences"] = pod(ns, {}, owner="ReplicaSet")["metadata"]["ownerReferences"]
        reply = send(kube, made, as_user=RS_CONTROLLER)
        assert reply.status == 201, reply.body
        # Without the guard's judgment this proves nothing: the same pod from a user is refused.
        assert refused(send(kube, made, as_user=MALLORY), "identity")

    def test_a_takeover_of_the_deployment_is_refused(self, kube: KubeApi, guarded: Guarded) -> None:
        """Replacing the pod spec of memgov's Deployment (kagent does, for a same-named agent) needs the grant."""
        stored = own_workload(guarded)
        stored["metadata"]["name"] = "stored-identity"
        kube.create(stored).ok()
        takeover = copy.deepcopy(stored)
        # kagent merges the agent's labels over the old ones (an agent named memgov keeps memgov's name label).
        takeover["spec"]["template"]["metadata"]["labels"].update({"app": "kagent", "kagent": "memgov"})
        takeover["spec"]["template"]["spec"] = pod(guarded.kagent, {})["spec"] | {"serviceAccountName": "default"}
        assert refused(kube.apply(takeover, dry_run=True, as_user=MALLORY), "identity")
        assert kube.apply(takeover, dry_run=True, as_user=ADMIN).status == 200
        scaled = copy.deepcopy(stored)
        scaled["spec"]["replicas"] = 3
        assert kube.apply(scaled, dry_run=True, as_user=MALLORY).status == 200

    def test_a_pod_cannot_take_the_labels_later(self, kube: KubeApi, guarded: Guarded) -> None:
        """An agent pod relabelled with a trusted identity is refused like one created with it."""
        identity = guarded.identities[0]
        stored = pod(identity.namespace, AGENT_LABELS, name="relabelled")
        kube.create(stored).ok()
        relabelled = copy.deepcopy(stored)
        relabelled["metadata"]["labels"].update(identity.labels)
        assert refused(kube.apply(relabelled, dry_run=True, as_user=MALLORY), "identity")

    def test_memgovs_labels_in_kagents_namespace(self, kube: KubeApi, guarded: Guarded) -> None:
        """memgov's labels in kagent's namespace are memgov's identity only where memgov lives there (gateway mode)."""
        reply = send(kube, pod(guarded.kagent, MEMGOV_LABELS), as_user=MALLORY)
        # In sidecar mode memgov's identity is the controller's, judged above.
        if guarded.setup.own_namespace or guarded.mode == "sidecar":
            assert reply.status == 201, reply.body
        else:
            assert refused(reply, "identity"), reply.body


# --- Cilium --------------------------------------------------------------------------------------


#: (case, namespaced?, spec key, rule, refused)
CILIUM_CASES = [
    ("allow-all", True, "spec", {"endpointSelector": {}, "ingress": [{}]}, True),
    (
        "controller-by-k8s-label",
        True,
        "spec",
        {
            "endpointSelector": {"matchLabels": {"k8s:app.kubernetes.io/component": "controller"}},
            "ingress": [{"fromEntities": ["world"]}],
        },
        True,
    ),
    ("in-a-specs-list", True, "specs", {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{}]}]}, True),
    ("clusterwide", False, "spec", {"endpointSelector": {}, "ingress": [{"fromEntities": ["cluster"]}]}, True),
    (
        "other-pods",
        True,
        "spec",
        {
            "endpointSelector": {"matchLabels": {"app.kubernetes.io/name": "querydoc"}},
            "ingress": [{"fromEntities": ["cluster"]}],
        },
        False,
    ),
    (
        "rules-out-controller-and-ui",
        True,
        "spec",
        {
            "endpointSelector": {
                "matchExpressions": [
                    {"key": "k8s:app.kubernetes.io/component", "operator": "NotIn", "values": ["controller", "ui"]}
                ]
            },
            "ingress": [{"fromEntities": ["cluster"]}],
        },
        False,
    ),
    ("deny-only", True, "spec", {"endpointSelector": {}, "ingressDeny": [{"fromEntities": ["world"]}]}, False),
    ("egress-only", True, "spec", {"endpointSelector": {}, "egress": [{"toEntities": ["world"]}]}, False),
    (
        "clusterwide-elsewhere",
        False,
        "spec",
        {
            "endpointSelector": {"matchLabels": {"k8s:io.kubernetes.pod.namespace": "somewhere-else"}},
            "ingress": [{"fromEntities": ["cluster"]}],
        },
        False,
    ),
]


class TestCilium:
    @pytest.mark.parametrize(
        ("namespaced", "key", "rule", "refuse"), [c[1:] for c in CILIUM_CASES], ids=[c[0] for c in CILIUM_CASES]
    )
    def test_cilium_policies(
        self, kube: KubeApi, guarded: Guarded, namespaced: bool, key: str, rule: Obj, refuse: bool
    ) -> None:
        """A Cilium policy that may select kagent's controller and allows ingress is refused; deny, egress pass."""
        policy = cnp(guarded.kagent if namespaced else None, rule, key=key, name=f"neighbour-{guarded.kagent}")
        reply = send(kube, policy, as_user=MALLORY)
        if refuse:
            assert refused(reply, "cilium-ingress"), reply.body
        else:
            assert reply.status == 201, reply.body

    @pytest.mark.parametrize(("user", "admitted"), [(MALLORY, False), (ADMIN, True)], ids=["ungranted", "granted"])
    def test_a_labelled_cilium_exception(self, kube: KubeApi, guarded: Guarded, user: str, admitted: bool) -> None:
        """A labelled Cilium policy opens the controller only when its writer is granted "exempt"."""
        policy = cnp(guarded.kagent, {"endpointSelector": {}, "ingress": [{}]}, **{EXCEPTION_LABEL: "true"})
        reply = send(kube, policy, as_user=user)
        assert (reply.status == 201) if admitted else refused(reply, "cilium-ingress"), reply.body


# --- helm itself ---------------------------------------------------------------------------------


class TestHelmInstall:
    def test_install_upgrade_and_hook_pod_on_a_real_server(self, kube: KubeApi) -> None:
        """`helm install` at enforce creates the guards, which then refuse a neighbour; `helm upgrade` still
        passes them; and the `helm test` pod is admitted by the restricted Pod Security level."""
        namespace = "boundary-install"
        kube.create_namespace(namespace)
        args = ["memgov", str(CHART), "-n", namespace, "--set", f"kagent.namespace={namespace}"]
        args += ["--set", "rollout.stage=enforce", "--set", "state.ephemeral=true"]
        installed = kube.helm("install", *args)
        assert installed.returncode == 0, installed.stderr
        stored = kube.get(f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies").ok()
        assert sorted(p["metadata"]["name"] for p in stored["items"]) == ["memgov", "memgov-kagent-controller"]
        canary = in_namespace(HOSTILE["allow-same-namespace"], namespace)
        until("the installed guard", lambda: refused(send(kube, canary), "controller-ingress"))
        upgraded = kube.helm("upgrade", *args, "--set", "networkPolicy.monitoring.podSelector.matchLabels.app=prom")
        assert upgraded.returncode == 0, upgraded.stderr
        hook = next(m for m in render(values(Setup("gateway"), namespace), namespace) if m["kind"] == "Pod")
        admitted = kube.create(hook, dry_run=True)
        assert admitted.status == 201, admitted.body
        assert admitted.warnings == []

    def test_upgrade_and_uninstall_need_the_grant(self, kube: KubeApi) -> None:
        """Someone with every right in memgov's and kagent's namespaces but no grant cannot upgrade memgov (here in a
        namespace of its own); the grant holder upgrades and uninstalls it."""
        kagent, memgov = "helm-grant", "helm-grant-memgov"
        for ns in (kagent, memgov):
            kube.create_namespace(ns)
        args = ["memgov", str(CHART), "-n", memgov, "--set", f"kagent.namespace={kagent}"]
        args += ["--set", "rollout.stage=enforce", "--set", "state.ephemeral=true"]
        installed = kube.helm("install", *args)
        assert installed.returncode == 0, installed.stderr
        role = "memgov-helm-grant-memgov-boundary-admin"
        editors(kube)
        kube.create(binding("RoleBinding", "boundary-admins", "ClusterRole", role, [ADMIN], kagent)).ok()
        # helm reads the release's cluster-scoped objects to compute its patches, patches them and, uninstalling,
        # deletes them: the platform admin may, mallory only reads.
        writes = ["patch", "update", "delete"]
        for name, verbs, users in (("helm-reader", [], [MALLORY, ADMIN]), ("helm-writer", writes, [ADMIN])):
            rules = [
                {"apiGroups": [group], "resources": [resource], "verbs": ["get", "list", "watch", *verbs]}
                for group, resource in (
                    ("admissionregistration.k8s.io", "*"),
                    ("rbac.authorization.k8s.io", "clusterroles"),
                )
            ]
            kube.create(
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", **_meta(name), "rules": rules}
            ).ok()
            kube.create(binding("ClusterRoleBinding", name, "ClusterRole", name, users)).ok()
        grant = {**GRANT, "namespace": kagent, "verb": "maintain"}
        until("the grant", lambda: kube.allowed(ADMIN, grant))
        canary = in_namespace(HOSTILE["allow-all-ingress"], kagent)
        until("the installed guard", lambda: refused(send(kube, canary), "controller-ingress"))
        change = ("--set", "log.level=debug")
        denied = kube.helm("upgrade", *args, *change, "--kube-as-user", MALLORY)
        assert denied.returncode != 0 and "memgov-boundary/" in denied.stderr, denied.stderr
        upgraded = kube.helm("upgrade", *args, *change, "--kube-as-user", ADMIN)
        assert upgraded.returncode == 0, upgraded.stderr
        removed = kube.helm("uninstall", "memgov", "-n", memgov, "--kube-as-user", ADMIN)
        assert removed.returncode == 0, removed.stderr
        left = kube.get(f"/apis/networking.k8s.io/v1/namespaces/{kagent}/networkpolicies").ok()
        assert left["items"] == []
        # The grant outlives the release (helm deletes side by side), for the operator to remove.
        assert kube.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}").status == 200
