"""The runbook's kubectl commands, run as written against the real API server.

The server has no nodes, so what these commands read is the pod object the chart's Deployment makes
(pending, never scheduled): the command lines, the namespace and pod they name, and what they print
about the pod are what an operator meets; the status of a crash loop needs a cluster.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from typing import Any

from tests.chart import cases
from tests.chart.helm import REPO, render, with_state
from tests.support.kube import KubeApi, pod_from

RUNBOOK = REPO / "docs" / "runbook.md"
KUBECTL = REPO / ".tools" / "bin" / "kubectl"


def _section(name: str) -> str:
    return RUNBOOK.read_text().split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]


def _of(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == kind)


class TestMemgovDown:
    def test_the_commands_list_and_describe_memgovs_pod(self, kube: KubeApi) -> None:
        """`kubectl -n <namespace> get pods` lists memgov's pod; `kubectl -n <namespace> describe pod <pod>`
        shows its containers and their probes."""
        commands = re.findall(r"`(kubectl [^`]+)`", _section("MemgovDown"))
        assert len(commands) == 2
        namespace = "runbook-down"
        kube.create_namespace(namespace)
        manifests = render(with_state({**cases.GATEWAY_DEFAULT, "kagent": {"namespace": namespace}}), namespace)
        account = _of(manifests, "ServiceAccount")
        kube.create({**account, "metadata": {**account["metadata"], "namespace": namespace}}).ok()
        pod = kube.create(pod_from(_of(manifests, "Deployment"), namespace)).ok()
        name = pod["metadata"]["name"]
        outputs = []
        for command in commands:
            argv = shlex.split(command.replace("<namespace>", namespace).replace("<pod>", name))
            assert argv[0] == "kubectl"
            done = subprocess.run(
                [str(KUBECTL), *argv[1:]],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env={**os.environ, "KUBECONFIG": str(kube.kubeconfig)},
            )
            assert done.returncode == 0, done.stderr
            outputs.append(done.stdout)
        listed, described = outputs
        assert re.search(rf"^{re.escape(name)}\s+0/\d+\s+Pending", listed, re.MULTILINE), listed
        assert f"Namespace:        {namespace}" in described and "Liveness:" in described
        assert "memgov:" in described and "/healthz" in described
