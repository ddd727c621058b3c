"""Reading kagent definitions as kagent's Go decoder reads them, and what they claim of memgov's boundary."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.decide.definitions import Boundary, Target, Unreadable, read
from sidecar.settings import BoundarySettings
from sidecar.wire import dumps

SETTINGS = BoundarySettings(
    selectors=[
        {"app.kubernetes.io/name": "memgov", "app.kubernetes.io/instance": "rel"},
        {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "controller"},
    ],
    marker_keys=["memgov/boundary-exception", "example.org/open-door"],
    service_accounts=["rel-memgov"],
    secrets=["rel-memgov-session-key", "memgov-bridge"],
    names=["rel-memgov", "claimed-state"],
    name_prefixes=["rel-memgov-"],
    kagent_namespace="kagent",
)
BOUNDARY = Boundary.of(SETTINGS)
BARE = Boundary.of(BoundarySettings())


#: A pod anti-affinity away from memgov's pods: the deepest field a definition has, and no claim.
AFFINITY = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 1,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["db"]}]},
                },
            }
        ]
    }
}


def byo(deployment: dict[str, Any] | None = None, *, name: str = "chat", **meta: Any) -> dict[str, Any]:
    """A BYO agent definition as kagent's API takes it."""
    spec: dict[str, Any] = {
        "type": "BYO",
        "byo": {"deployment": {"image": "ghcr.io/example/chat:1", **(deployment or {})}},
    }
    return {"metadata": {"name": name, "namespace": "team", **meta}, "spec": spec}


def in_deployment(members: bytes) -> bytes:
    """A BYO agent's body text whose deployment object holds ``members`` verbatim."""
    return b'{"metadata": {"name": "chat"}, "spec": {"byo": {"deployment": {' + members + b"}}}}"


def raw(value: Any) -> bytes:
    return json.dumps(value).encode()


def claims_of(
    body: bytes | Any, kind: str = "agents", method: str = "POST", boundary: Boundary = BOUNDARY
) -> list[str]:
    """What memgov finds in a definition write, read the way the gateway reads it."""
    data = body if isinstance(body, bytes) else raw(body)
    d = read(kind, method, {"kind": kind}, data, "kagent")  # type: ignore[arg-type]
    return list(boundary.claims(d.body, d.targets))


class TestLegitimate:
    @pytest.mark.parametrize(
        "body",
        [
            byo(),
            byo({"labels": {"team": "search", "app.kubernetes.io/instance": "other"}, "annotations": {"a": "b"}}),
            byo({"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "chat-token", "key": "t"}}}]}),
            byo({"serviceAccountName": "chat"}),
            byo({"labels": {"kagent": "chat"}}),
            byo(annotations={"description": "memgov-bridge is a word in a sentence"}),
            byo({"affinity": AFFINITY}),
        ],
        ids=[
            "plain",
            "own-labels",
            "own-secret",
            "own-service-account",
            "own-kagent-label",
            "secret-name-in-text",
            "deepest-field",
        ],
    )
    def test_an_ordinary_definition_claims_nothing(self, body):
        """Labels, Secrets and service accounts of its own are none of memgov's business."""
        assert claims_of(body) == []

    def test_what_is_forwarded_is_what_was_read(self):
        """The body memgov serializes parses back to the very value the claims were read from."""
        d = read("agents", "POST", {"kind": "agents"}, raw(byo({"labels": {"team": "x"}})), "kagent")
        assert d.body is not None and json.loads(dumps(d.body)) == d.body


class TestLabels:
    @pytest.mark.parametrize(
        "labels",
        [
            {"app.kubernetes.io/name": "memgov"},
            {"app.kubernetes.io/instance": "rel"},
            {"app.kubernetes.io/component": "controller"},
            {"memgov/boundary-exception": "true"},
            {"MEMGOV/anything": "x"},
            {"example.org/open-door": "yes"},
            {"kagent": "helper"},
        ],
        ids=[
            "name",
            "instance",
            "controller-pods",
            "exception-marker",
            "memgov-prefix-any-case",
            "marker",
            "other-agent",
        ],
    )
    @pytest.mark.parametrize(
        "place",
        [
            lambda labels: byo({"labels": labels}),
            lambda labels: byo({"serviceAccountConfig": {"labels": labels}}),
            lambda labels: {
                "metadata": {"name": "chat", "namespace": "team"},
                "spec": {"declarative": {"deployment": {"labels": labels}}},
            },
            lambda labels: {"metadata": {"name": "chat", "namespace": "team", "labels": labels}},
            lambda labels: byo({"extraContainers": [{"name": "x", "podTemplate": {"podLabels": labels}}]}),
        ],
        ids=["byo-deployment", "service-account", "declarative-deployment", "own-metadata", "nested-pod-labels"],
    )
    def test_a_selector_label_anywhere_is_claimed(self, labels, place):
        """memgov's selector labels, its markers and another agent's name are claimed wherever they sit."""
        assert claims_of(place(labels)) == ["label"]

    @pytest.mark.parametrize(
        "spelling",
        ['"Labels"', '"LABELS"', '"labelS"'],
    )
    def test_every_case_spelling_go_reads_is_read(self, spelling):
        """Go matches struct fields case-insensitively: `Spec`, `BYO`, `Deployment`, `Labels` all reach labels."""
        text = (
            '{"Metadata": {"Name": "chat", "NAMESPACE": "team"}, "SPEC": {"Byo": {"DEPLOYMENT": '
            f'{{"image": "i", {spelling}: {{"app.kubernetes.io/name": "memgov"}}}}}}}}}}'
        )
        assert claims_of(text.encode()) == ["label"]

    @pytest.mark.parametrize(
        "text",
        [
            # the later key wins in Go: an innocent spelling first, the claim second
            in_deployment(b'"labels": {}, "Labels": {"memgov/x": "1"}'),
            in_deployment(b'"labels": {}, "labels": {"memgov/x": "1"}'),
            b'{"metadata": {"name": "c"}, "spec": {}, "Spec": {"byo": {"deployment": {"labels": {"memgov/x": "1"}}}}}',
            # a map's keys are exact in Go, and the later duplicate wins
            in_deployment(b'"labels": {"kagent": "chat", "kagent": "helper"}'),
            in_deployment(b'"labels": {"App": "a", "app": "b"}'),
        ],
        ids=[
            "case-variant-later",
            "exact-duplicate",
            "top-level-case-variant",
            "duplicate-label-key",
            "label-keys-by-case",
        ],
    )
    def test_duplicates_and_case_variants_are_refused(self, text):
        """Two keys Go would read as one field (or one map key) make the body unreadable: refused, not guessed."""
        with pytest.raises(Unreadable):
            claims_of(text)

    @pytest.mark.parametrize("key", ["ſpec", "metadata\u0131", "annotat\u0131ons", "\u212aagent"])
    def test_keys_go_folds_onto_ascii_are_refused(self, key):
        """`ſ`, dotless `ı` and the Kelvin sign fold onto ASCII letters in Go: any non-ASCII key is refused."""
        with pytest.raises(Unreadable):
            claims_of({"metadata": {"name": "chat"}, key: {"labels": {"memgov/x": "1"}}})

    def test_arrays_are_walked(self):
        """Labels inside list items (containers, templates) are read like any other."""
        body = byo({"extraContainers": [{"name": "a"}, {"name": "b", "metadata": {"labels": {"memgov/x": "1"}}}]})
        assert claims_of(body) == ["label"]

    def test_deep_nesting_is_refused_not_crashed_on(self):
        """A body nested deeper than any definition is unreadable (the walks stay bounded)."""
        deep: Any = {"labels": {"memgov/x": "1"}}
        for _ in range(60):
            deep = {"x": deep}
        with pytest.raises(Unreadable):
            claims_of({"metadata": {"name": "chat"}, "spec": deep})

    def test_without_configuration_the_generic_markers_still_hold(self):
        """No boundary settings: `app.kubernetes.io/name: memgov`, `memgov/` keys and the name memgov are refused."""
        assert claims_of(byo({"labels": {"app.kubernetes.io/name": "memgov"}}), boundary=BARE) == ["label"]
        assert claims_of(byo({"annotations": {"memgov/boundary-exception": "true"}}), boundary=BARE) == ["annotation"]
        assert claims_of(byo(name="memgov"), boundary=BARE) == ["name"]
        assert claims_of(byo({"labels": {"app.kubernetes.io/instance": "rel"}}), boundary=BARE) == []


class TestAnnotations:
    @pytest.mark.parametrize(
        "place",
        [
            lambda a: {"metadata": {"name": "chat", "namespace": "team", "annotations": a}},
            lambda a: byo({"annotations": a}),
            lambda a: byo({"deploymentAnnotations": a}),
            lambda a: byo({"serviceAccountConfig": {"annotations": a}}),
        ],
        ids=["agent-metadata", "pod-template", "deployment-v0.10", "service-account"],
    )
    def test_a_marker_annotation_is_claimed(self, place):
        """kagent copies the Agent's own annotations onto its Deployment and Service: markers there are claims."""
        assert claims_of(place({"memgov/boundary-exception": "true"})) == ["annotation"]


class TestServiceAccount:
    @pytest.mark.parametrize(
        "body",
        [
            byo({"serviceAccountName": "rel-memgov"}),
            byo({"ServiceAccountName": "rel-memgov"}),
            {
                "metadata": {"name": "chat"},
                "spec": {"declarative": {"deployment": {"serviceAccountName": "rel-memgov"}}},
            },
            byo({"extraContainers": [{"name": "x"}], "podTemplate": {"spec": {"serviceAccount": "rel-memgov"}}}),
        ],
        ids=["byo", "case-variant", "declarative", "deprecated-field"],
    )
    def test_running_as_memgov_is_claimed(self, body):
        """A pod running as memgov's service account would be memgov to every check that trusts it."""
        assert claims_of(body) == ["service_account"]

    def test_a_definition_named_like_memgovs_service_account_is_claimed(self):
        """With no serviceAccountName kagent runs the agent as a service account named after it."""
        assert claims_of(byo(name="rel-memgov")) == ["name"]


class TestSecrets:
    @pytest.mark.parametrize(
        "deployment",
        [
            {"volumes": [{"name": "k", "secret": {"secretName": "rel-memgov-session-key"}}]},
            {"volumes": [{"name": "k", "projected": {"sources": [{"secret": {"name": "rel-memgov-session-key"}}]}}]},
            {"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "rel-memgov-session-key", "key": "k"}}}]},
            {"envFrom": [{"secretRef": {"name": "memgov-bridge"}}]},
            {"imagePullSecrets": [{"name": "memgov-bridge"}]},
            {"extraContainers": [{"name": "x", "envFrom": [{"secretRef": {"name": "memgov-bridge"}}]}]},
        ],
        ids=["volume", "projected", "env-secret-key-ref", "env-from", "image-pull-secrets", "extra-container"],
    )
    def test_a_pod_mounting_memgovs_secret_is_claimed(self, deployment):
        """Every way a pod spec can hand a container one of memgov's Secrets is a claim."""
        assert claims_of(byo(deployment)) == ["secret"]

    def test_kagent_resolving_memgovs_secret_for_a_prompt_is_claimed(self):
        """systemMessageFrom and headersFrom make kagent's controller read the Secret itself."""
        body = {
            "metadata": {"name": "chat", "namespace": "team"},
            "spec": {
                "declarative": {
                    "systemMessageFrom": {"type": "Secret", "name": "rel-memgov-session-key", "key": "k"},
                    "tools": [
                        {"headersFrom": [{"name": "H", "valueFrom": {"type": "Secret", "name": "memgov-bridge"}}]}
                    ],
                }
            },
        }
        assert claims_of(body) == ["secret"]

    @pytest.mark.parametrize(
        ("kind", "body"),
        [
            ("modelconfigs", {"ref": "team/m", "spec": {"apiKeySecret": "rel-memgov-session-key"}}),
            (
                "modelconfigs",
                {"ref": "team/m", "spec": {}, "secrets": [{"name": "memgov-bridge", "key": "k", "value": "v"}]},
            ),
            ("modelconfigs", {"ref": "team/m", "spec": {"tls": {"caCertSecretRef": "kagent/memgov-bridge"}}}),
            (
                "toolservers",
                {
                    "type": "MCPServer",
                    "mcpServer": {
                        "metadata": {"name": "t"},
                        "spec": {"deployment": {"secretRefs": [{"name": "memgov-bridge"}]}},
                    },
                },
            ),
        ],
        ids=["api-key", "companion-secret", "namespaced-ref", "mcp-server"],
    )
    def test_other_definitions_referring_to_memgovs_secrets_are_claimed(self, kind, body):
        """ModelConfigs and tool servers are checked the same way as agents."""
        assert claims_of(body, kind=kind) == ["secret"]


class TestHostPath:
    @pytest.mark.parametrize(
        "deployment",
        [
            {"volumes": [{"name": "node", "hostPath": {"path": "/var/lib/kubelet/pods"}}]},
            {"Volumes": [{"name": "node", "HOSTPATH": {"path": "/"}}]},
            {"extraContainers": [{"name": "x"}], "volumes": [{"name": "n", "hostPath": {"path": "/var/lib"}}]},
        ],
        ids=["kubelet-dir", "case-variant", "beside-extra-container"],
    )
    def test_a_volume_of_the_nodes_files_is_claimed(self, deployment):
        """The node keeps every pod's Secrets on disk: a hostPath volume reaches memgov's wherever it runs."""
        assert claims_of(byo(deployment)) == ["host_path"]


class TestNames:
    @pytest.mark.parametrize(
        ("kind", "body"),
        [
            ("agents", byo(name="rel-memgov")),
            ("agents", byo(name="memgov")),
            ("sandboxagents", byo(name="rel-memgov-config")),
            ("agents", byo(name="claimed-state")),
            ("modelconfigs", {"ref": "kagent/rel-memgov-session-key", "spec": {}}),
            ("toolservers", {"type": "RemoteMCPServer", "remoteMCPServer": {"metadata": {"name": "rel-memgov"}}}),
            ("prompttemplates", {"namespace": "kagent", "name": "rel-memgov-policies", "data": {"a": "b"}}),
        ],
        ids=[
            "service",
            "generic-name",
            "config-map",
            "named-claim",
            "secret-by-ref",
            "tool-server",
            "policy-config-map",
        ],
    )
    def test_taking_one_of_memgovs_names_is_claimed(self, kind, body):
        """kagent names what it creates after the definition and takes over an existing object of that name."""
        assert "name" in claims_of(body, kind=kind)

    def test_an_update_in_the_path_is_named_too(self):
        """PUT /api/prompttemplates/kagent/rel-memgov-policies replaces that ConfigMap's data: claimed."""
        d = read(
            "prompttemplates",
            "PUT",
            {"kind": "prompttemplates", "ns": "kagent", "name": "rel-memgov-policies"},
            raw({"data": {"a": "b"}}),
            "kagent",
        )
        assert BOUNDARY.claims(d.body, d.targets) == ["name"]


class TestTargets:
    @pytest.mark.parametrize(
        ("kind", "method", "params", "body", "expected"),
        [
            ("agents", "POST", {}, byo(), ["team/chat"]),
            ("agents", "POST", {}, {"metadata": {"name": "chat"}}, ["kagent/chat"]),
            ("agents", "PUT", {}, {"metadata": {"name": "team/helper", "namespace": "other"}}, ["team/helper"]),
            ("agents", "DELETE", {"ns": "team", "name": "helper"}, None, ["team/helper"]),
            (
                "sandboxagents",
                "PUT",
                {"ns": "team", "name": "a"},
                {"metadata": {"name": "b", "namespace": "team"}},
                ["team/a", "team/b"],
            ),
            ("modelconfigs", "POST", {}, {"ref": "emb"}, ["kagent/emb"]),
            ("modelconfigs", "PUT", {"ns": "team", "name": "emb"}, {"spec": {}}, ["team/emb"]),
            (
                "toolservers",
                "POST",
                {},
                {
                    "remoteMCPServer": {"metadata": {"name": "r", "namespace": "t"}},
                    "mcpServer": {"metadata": {"name": "m"}},
                },
                ["t/r", "kagent/m"],
            ),
            ("prompttemplates", "POST", {}, {"namespace": "team", "name": "p", "data": {}}, ["team/p"]),
        ],
        ids=[
            "body",
            "default-namespace",
            "ref-in-name",
            "delete-path",
            "path-and-body",
            "modelconfig-ref",
            "modelconfig-path",
            "both-tool-kinds",
            "prompt-template",
        ],
    )
    def test_targets_are_resolved_as_kagent_resolves_them(self, kind, method, params, body, expected):
        """Path and body names, `ns/name` in a name field and kagent's own namespace as the default."""
        d = read(kind, method, {"kind": kind, **params}, raw(body) if body is not None else None, "kagent")
        assert [t.ref for t in d.targets] == expected

    @pytest.mark.parametrize("name", ["a/b/c", "/b", "a/", ""])
    def test_a_name_kagent_cannot_resolve_is_unreadable(self, name):
        """Two slashes or an empty part: kagent would refuse or misread it, memgov refuses it first."""
        with pytest.raises(Unreadable):
            read("agents", "POST", {"kind": "agents"}, raw({"metadata": {"name": name}}), "kagent")

    @pytest.mark.parametrize("body", [b"", b"[]", b'{"a": 1} {"b": 2}', b'{"a": NaN}', b"\xff"])
    def test_a_body_that_is_not_one_json_object_is_unreadable(self, body):
        """kagent's decoder ignores what follows the first value; memgov reads only a single clean object."""
        with pytest.raises(Unreadable):
            read("agents", "POST", {"kind": "agents"}, body, "kagent")

    def test_a_delete_reads_no_body(self):
        """kagent's delete handlers read only the path; so does memgov."""
        d = read("agents", "DELETE", {"kind": "agents", "ns": "team", "name": "x"}, b"not json", "kagent")
        assert (d.body, d.targets) == (None, [Target("team", "x")])
