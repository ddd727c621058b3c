"""The Job controller's and the kubelet's part for helm's hook Jobs on an API server that runs nothing.

`JobController` watches a namespace's Jobs. For each new one it creates the Pod the Job controller
would (a server-side dry run: admission, PodSecurity, ServiceAccount), notes which hook objects of the
release existed at that moment, and then finishes the Job through its status subresource, which is
what helm waits for. By default every admitted Job succeeds. Given a `runner`, the Job's container
command is run for real on this machine (`run_container`) and its exit code decides: 0 completes the
Job, anything else fails it, so helm sees the outcome of the actual command.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.kube import KubeApi, pod_from

REPO = Path(__file__).resolve().parents[2]


def items(kube: KubeApi, path: str) -> list[dict[str, Any]]:
    return list(kube.get(path).ok()["items"])


@dataclass
class JobRun:
    """One hook Job as the controller met it: its name, hook, image, command, what existed, how it ended."""

    name: str
    hook: str
    image: str
    command: list[str]
    existing: set[str]
    exit_code: int = 0
    output: str = ""


Runner = Callable[[KubeApi, str, dict[str, Any]], tuple[int, str]]


def run_container(kube: KubeApi, namespace: str, job: dict[str, Any]) -> tuple[int, str]:
    """Run the Job's (one) container command with this checkout's memgov, as its pod would: the container's
    env, and each Secret volume it mounts written from the API into a local folder at its mount path's place
    (the only substitution). Returns the exit code and what it printed."""
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    command = list(container["command"])
    assert command[0] == "memgov", command
    secrets = {v["name"]: v["secret"] for v in spec.get("volumes", []) if "secret" in v}
    with tempfile.TemporaryDirectory(prefix="memgov-job-") as scratch:
        mounts: dict[str, str] = {}
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in secrets:
                continue
            volume = secrets[mount["name"]]
            data = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{volume['secretName']}").ok()["data"]
            local = Path(scratch) / mount["name"]
            local.mkdir()
            for item in volume["items"]:
                (local / item["path"]).write_bytes(base64.b64decode(data[item["key"]]))
            mounts[mount["mountPath"]] = str(local)
        env = {"PATH": os.environ["PATH"], "HOME": scratch}
        for var in container.get("env", []):
            value = var["value"]
            for path, local_path in mounts.items():
                value = value.replace(path, local_path)
            env[var["name"]] = value
        proc = subprocess.run(
            [sys.executable, "-m", "sidecar", *command[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
            cwd=REPO,
        )
    return proc.returncode, proc.stdout + proc.stderr


@dataclass
class JobController:
    """Finishes each new Job of ``namespace`` once its pod is admitted (see the module docstring)."""

    kube: KubeApi
    namespace: str
    runner: Runner | None = None
    runs: list[JobRun] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def admitted(self) -> list[str]:
        return [r.name for r in self.runs]

    def __enter__(self) -> JobController:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _existing(self) -> set[str]:
        """The release's ServiceAccounts and NetworkPolicies present now, as "Kind/name"."""
        found = set()
        for kind, path in (("ServiceAccount", "serviceaccounts"), ("NetworkPolicy", "networkpolicies")):
            group = "/api/v1" if kind == "ServiceAccount" else "/apis/networking.k8s.io/v1"
            for obj in items(self.kube, f"{group}/namespaces/{self.namespace}/{path}"):
                found.add(f"{kind}/{obj['metadata']['name']}")
        return found

    def _run(self) -> None:
        done: set[str] = set()
        while not self._stop.is_set():
            for job in items(self.kube, f"/apis/batch/v1/namespaces/{self.namespace}/jobs"):
                uid = job["metadata"]["uid"]
                if uid in done:
                    continue
                done.add(uid)
                existing = self._existing()
                reply = self.kube.create(pod_from(job, self.namespace), dry_run=True)
                name = job["metadata"]["name"]
                if reply.status != 201 or reply.warnings:
                    self.refused.append(f"{name}: {reply.body.get('message')} {reply.warnings}")
                    continue
                (container,) = job["spec"]["template"]["spec"]["containers"]
                run = JobRun(
                    name,
                    job["metadata"].get("annotations", {}).get("helm.sh/hook", ""),
                    container["image"],
                    list(container["command"]),
                    existing,
                )
                if self.runner is not None:
                    run.exit_code, run.output = self.runner(self.kube, self.namespace, job)
                self.runs.append(run)
                self._finish(job, succeeded=run.exit_code == 0)
            time.sleep(0.2)

    def _finish(self, job: dict[str, Any], *, succeeded: bool) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        kinds = ("SuccessCriteriaMet", "Complete") if succeeded else ("FailureTarget", "Failed")
        conditions = [
            {"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now, "reason": "Test"}
            for kind in kinds
        ]
        status: dict[str, Any] = {"startTime": now, "conditions": conditions}
        status.update({"completionTime": now, "succeeded": 1} if succeeded else {"failed": 1})
        path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{job['metadata']['name']}/status"
        reply = self.kube.request("PATCH", path, {"status": status}, content_type="application/merge-patch+json")
        if reply.status != 200:
            self.refused.append(f"{job['metadata']['name']} status: {reply.body.get('message')}")
