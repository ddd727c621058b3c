"""``memgov doctor`` as an operator runs it: exported files in, one line per path out, an exit status."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.boundary import CYCLONUS, HOSTILE

#: The chart's own policies at the enforce stage in gateway mode, as `kubectl get networkpolicy -o yaml` lists them.
MEMGOV_SELECTOR = {"app.kubernetes.io/name": "memgov", "app.kubernetes.io/instance": "memgov"}
CONTROLLER_POLICY: dict[str, Any] = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "memgov-kagent-controller", "namespace": "kagent", "resourceVersion": "812"},
    "spec": {
        "podSelector": {
            "matchLabels": {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "controller"}
        },
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": MEMGOV_SELECTOR}}], "ports": [{"port": 8083}]}],
    },
}
ENFORCE = {"rollout": {"stage": "enforce"}}


def run(
    tmp_path: Path,
    policies: Any,
    values: Any = ENFORCE,
    *,
    path: str | None = None,
    raw: str | None = None,
    extra: tuple[str, ...] | list[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run `memgov doctor` on exported files, with cyclonus on PATH unless path says otherwise."""
    exported = tmp_path / "netpol.yaml"
    exported.write_text(
        raw if raw is not None else yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": policies})
    )
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    env = {**os.environ, "PATH": path if path is not None else f"{CYCLONUS.parent}:{os.environ['PATH']}"}
    doctor = ["doctor", "--policies", str(exported), "--values", str(tmp_path / "values.yaml"), *extra]
    args = [sys.executable, "-m", "sidecar", *doctor]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=120, check=False)


class TestDoctor:
    def test_chart_policies_alone_are_clear(self, tmp_path: Path) -> None:
        """The chart's enforced policies leave no path: exit 0 and one line saying so."""
        proc = run(tmp_path, [CONTROLLER_POLICY])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(
            "memgov doctor: no path around memgov (namespace kagent, gateway mode, enforce stage"
        )

    @pytest.mark.parametrize("hostile", ["allow-same-namespace", "allow-from-namespace-selector", "allow-all-ingress"])
    def test_each_hostile_policy_is_named(self, tmp_path: Path, hostile: str) -> None:
        """A neighbour policy that reopens the controller is reported with its name, and the exit status is 1."""
        policy = HOSTILE[hostile]
        proc = run(tmp_path, [CONTROLLER_POLICY, policy])
        assert proc.returncode == 1, proc.stderr
        lines = proc.stdout.splitlines()
        assert "path(s) around memgov" in lines[0]
        api = [line for line in lines[1:] if "kagent/kagent-controller:8083" in line]
        assert api and all(f"NetworkPolicy kagent/{policy['metadata']['name']}" in line for line in api)

    def test_namespace_selector_is_exercised_by_a_witness(self, tmp_path: Path) -> None:
        """A rule naming a namespace no model pod lives in is still caught, through a pod built to match it."""
        proc = run(tmp_path, [CONTROLLER_POLICY, HOSTILE["allow-from-namespace-selector"]])
        assert (
            "witness(kagent/allow-from-ingress-nginx ingress[0].from[0]) -> kagent/kagent-controller:8083"
            in proc.stdout
        )

    def test_prepare_stage_reports_the_open_controller(self, tmp_path: Path) -> None:
        """Before enforce nothing isolates the controller, and the doctor says exactly that."""
        proc = run(tmp_path, [], values={})
        assert proc.returncode == 1
        assert (
            "kagent/attacker -> kagent/kagent-controller:8083  opened by "
            "no NetworkPolicy isolating kagent/kagent-controller" in proc.stdout
        )

    def test_egress_only_policy_opens_nothing(self, tmp_path: Path) -> None:
        """An egress-only policy admits no ingress, so it is not a path."""
        assert run(tmp_path, [CONTROLLER_POLICY, HOSTILE["egress-only"]]).returncode == 0

    @pytest.mark.parametrize(
        ("selector", "stand_in"),
        [
            ({"matchLabels": {"app.kubernetes.io/instance": "kagent"}}, "app.kubernetes.io/instance=kagent"),
            ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml", "ops"]}]}, "team=ml"),
            ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, "team=present"),
        ],
        ids=["instance-label", "in", "exists"],
    )
    def test_a_selector_it_cannot_resolve_may_select(
        self, tmp_path: Path, selector: dict[str, Any], stand_in: str
    ) -> None:
        """Without --pods, labels beyond the chart's selectors are unknown: a policy asking for them may select."""
        policy = {
            "kind": "NetworkPolicy",
            "metadata": {"name": "by-other-labels", "namespace": "kagent"},
            "spec": {"podSelector": selector, "ingress": [{}]},
        }
        proc = run(tmp_path, [CONTROLLER_POLICY, policy])
        assert proc.returncode == 1, proc.stdout
        assert (
            f"kagent/attacker -> kagent/kagent-controller[{stand_in}]:8083  "
            "opened by NetworkPolicy kagent/by-other-labels" in proc.stdout
        )

    def test_a_selector_that_contradicts_the_known_labels_selects_nothing(self, tmp_path: Path) -> None:
        """A policy whose selector rules the controller and UI out by a label they are known to carry opens nothing."""
        policy = {
            "kind": "NetworkPolicy",
            "metadata": {"name": "tools", "namespace": "kagent"},
            "spec": {
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "querydoc", "team": "ml"}},
                "ingress": [{}],
            },
        }
        proc = run(tmp_path, [CONTROLLER_POLICY, policy])
        assert proc.returncode == 0, proc.stdout

    @pytest.mark.parametrize(("team", "status"), [("ml", 1), ("ops", 0)])
    def test_real_pods_bring_their_labels_and_port_names(self, tmp_path: Path, team: str, status: int) -> None:
        """With --pods the controller's real labels and port names decide: a policy naming them is a path."""
        pods = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": "kagent-controller-7d9",
                        "namespace": "kagent",
                        "labels": {**CONTROLLER_POLICY["spec"]["podSelector"]["matchLabels"], "team": team},
                    },
                    "spec": {"containers": [{"name": "controller", "ports": [{"name": "api", "containerPort": 8083}]}]},
                    "status": {"podIP": "10.1.2.3"},
                }
            ],
        }
        (tmp_path / "pods.yaml").write_text(yaml.safe_dump(pods))
        by_team = {
            "kind": "NetworkPolicy",
            "metadata": {"name": "team-ml", "namespace": "kagent"},
            "spec": {"podSelector": {"matchLabels": {"team": "ml"}}, "ingress": [{"ports": [{"port": "api"}]}]},
        }
        proc = run(tmp_path, [CONTROLLER_POLICY, by_team], extra=["--pods", str(tmp_path / "pods.yaml")])
        assert proc.returncode == status, proc.stdout
        line = "kagent/attacker -> kagent/kagent-controller-7d9:8083  opened by NetworkPolicy kagent/team-ml"
        assert (line in proc.stdout) is bool(status)

    def test_memgov_in_its_own_namespace(self, tmp_path: Path) -> None:
        """With memgov elsewhere, a policy admitting memgov's namespace is clear; one admitting its labels from
        kagent's namespace is a path."""
        own = copy.deepcopy(CONTROLLER_POLICY)
        peer = own["spec"]["ingress"][0]["from"][0]
        peer["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": "memgov"}}
        extra = ["--memgov-namespace", "memgov"]
        clear = run(tmp_path, [own], extra=extra)
        assert clear.returncode == 0, clear.stdout
        assert "memgov in namespace memgov" in clear.stdout
        proc = run(tmp_path, [CONTROLLER_POLICY], extra=extra)
        assert proc.returncode == 1
        assert (
            "kagent/memgov-impostor -> kagent/kagent-controller:8083  "
            "opened by NetworkPolicy kagent/memgov-kagent-controller" in proc.stdout
        )

    def test_missing_cyclonus_says_what_it_needs(self, tmp_path: Path) -> None:
        """Without cyclonus on PATH: exit 3 and one line naming what to install, no traceback."""
        proc = run(tmp_path, [CONTROLLER_POLICY], path=str(tmp_path / "empty"))
        assert proc.returncode == 3
        assert proc.stderr.strip().splitlines() == [
            "memgov doctor needs cyclonus v0.5.6 on PATH: "
            "go install github.com/mattfenwick/cyclonus/cmd/cyclonus@v0.5.6 (or `make tools` in a checkout)"
        ]

    def test_a_failing_cyclonus_is_one_line(self, tmp_path: Path) -> None:
        """A cyclonus that runs and fails: exit 3 and one line with its exit status and last message."""
        fake = tmp_path / "bin"
        fake.mkdir()
        (fake / "cyclonus").write_text("#!/bin/sh\necho 'analysis broke' >&2\nexit 2\n")
        (fake / "cyclonus").chmod(0o755)
        proc = run(tmp_path, [CONTROLLER_POLICY], path=f"{fake}:{os.environ['PATH']}")
        assert proc.returncode == 3
        assert proc.stderr.strip().splitlines() == ["memgov doctor: cyclonus exited 2: analysis broke"]

    @pytest.mark.parametrize(
        ("raw", "message"),
        [
            ("items: [", "--policies: "),
            ("kind: List\nitems: [{kind: Pod, metadata: {name: x}}]\n", "is not a NetworkPolicy"),
            ("kind: NetworkPolicy\nmetadata: {name: x}\nspec: {ingress: [{from: 3}]}\n", "malformed spec"),
            (
                "kind: NetworkPolicy\nmetadata: {name: x}\nspec: {ingress: [{from: [{ipBlock: {cidr: nonsense}}]}]}\n",
                "malformed",
            ),
            ("kind: NetworkPolicy\nspec: {}\n", "has no metadata.name"),
            ("a: &a [1, 2]\nb: [*a, *a]\n", "uses YAML aliases"),
        ],
        ids=["not-yaml", "not-a-policy", "bad-from", "bad-cidr", "no-name", "aliases"],
    )
    def test_bad_input_is_one_line(self, tmp_path: Path, raw: str, message: str) -> None:
        """Unreadable exports end with exit 2 and one line naming the problem, never a traceback."""
        proc = run(tmp_path, None, raw=raw)
        assert proc.returncode == 2
        assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr
        assert "Traceback" not in proc.stderr

    def test_bad_values_is_one_line(self, tmp_path: Path) -> None:
        """A values file that is not a mapping, or names an unknown mode, is refused in one line."""
        for values in (["a"], {"mode": "mesh"}, {"kagent": {"controllerSelector": 3}}):
            proc = run(tmp_path, [CONTROLLER_POLICY], values=values)
            assert proc.returncode == 2, values
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
