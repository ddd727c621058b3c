"""OPA mode as the chart runs it: the real opa and memgov started with the rendered commands, arguments and
mounted files. memgov becomes ready on the revision OPA serves, governs through both engines, records
that revision in its audit rows, and the case tables agree on Cedar and on this OPA.

The only substitutions: volumes are local folders, loopback ports are free ones, and kagent is the stand-in.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from sidecar.dev.devstack.pg import free_port
from sidecar.dev.devstack.stack import start_devstack
from sidecar.identity.keys import SessionKeys, new_scope_id
from sidecar.policy.opa_server import tool_binary
from sidecar.policy.pack import read_pack
from tests.chart import cases
from tests.chart.helm import REPO, config_file, pod_spec, render
from tests.chart.pod import PodDisk
from tests.support.smoke import SEARCH, serving, smoke, wait_ready

MEMGOV = str(Path(sys.executable).parent / "memgov")
POLICIES = REPO / "policies"
SOURCE_REVISION = read_pack(POLICIES).revision
OWN_PACK = {p.relative_to(POLICIES).as_posix(): p.read_text() for p in sorted(POLICIES.rglob("*")) if p.is_file()}

RUNS = {
    # The default production shape: Cedar enforcing, OPA compared, the pack from memgov's image.
    "gateway-shadow-image-pack": (
        {"rollout": cases.ENFORCE, "policy": {"engine": "shadow", "opa": {"container": {"enabled": True}}}},
        "cedar",
    ),
    # OPA enforcing inside kagent's controller pod, with an operator pack from a ConfigMap.
    "sidecar-opa-own-pack": (
        {**cases.SIDECAR, "policy": {**cases.SIDECAR["policy"], "pack": {"files": OWN_PACK}}},
        "opa",
    ),
}


def _argv(pod: PodDisk, container: dict[str, Any], ports: dict[int, int]) -> list[str]:
    argv = [*container.get("command", []), *container.get("args", [])]
    return [pod.rewrite(container["name"], arg, ports) for arg in argv]


async def _opa_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):  # as the kubelet's readiness probe does: ask until it answers
            assert proc.poll() is None, log.read_text()
            try:
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError("OPA never became ready")


async def _credentialed_refusal(data_url: str, pod: PodDisk) -> str:
    """A search with a session key that verifies (no consent behind it): a refusal audited with its revision."""
    secret = pod.host("memgov", "/var/run/memgov/secrets/session.key").read_bytes().strip()
    body = {**SEARCH, "user_id": SessionKeys(secret).session_key(new_scope_id(), 1)}
    async with aiohttp.ClientSession() as http, http.post(data_url + "/api/memories/search", json=body) as resp:
        assert resp.status == 200
        return resp.headers["X-Memgov-Decision"].rsplit("id=", 1)[1]


@pytest.mark.parametrize(("values", "engine"), list(RUNS.values()), ids=list(RUNS))
async def test_opa_mode_runs_as_rendered(values: dict[str, Any], engine: str, tmp_path: Path) -> None:
    """Init container, OPA and memgov from the rendered pod: ready on one revision, governing, agreeing."""
    manifests = render(values)
    pod = PodDisk(tmp_path / "pod", manifests, pod_spec(manifests))
    ports = {port: free_port() for port in (8080, 8081, 9090, 8181, 8282)}

    init = pod.container("memgov-bundle")
    written = subprocess.run(
        [MEMGOV, *_argv(pod, init, ports)[1:]], capture_output=True, text=True, timeout=120, check=False
    )
    assert written.returncode == 0, written.stdout + written.stderr

    opa = pod.container("opa")
    opa_argv = _argv(pod, opa, ports)
    assert opa_argv[0] == "run"
    probe = opa["readinessProbe"]["httpGet"]
    dev = await start_devstack()
    try:
        with serving([tool_binary("opa"), *opa_argv], log=tmp_path / "opa.log") as opa_proc:
            await _opa_ready(f"http://127.0.0.1:{ports[probe['port']]}{probe['path']}", opa_proc, tmp_path / "opa.log")

            memgov = pod.container("memgov")
            config = pod.rewrite_tree("memgov", config_file(manifests), ports)
            config["upstream"]["controller_url"] = dev.kagent_url
            (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
            argv = _argv(pod, memgov, ports)
            argv[argv.index("--config") + 1] = str(tmp_path / "config.yaml")
            ops = f"http://127.0.0.1:{ports[9090]}"
            with serving([MEMGOV, *argv[1:]], log=tmp_path / "memgov.log") as proc:
                ready = await wait_ready(proc, ops, tmp_path / "memgov.log")
                await smoke(f"http://127.0.0.1:{ports[8080]}", ops, engine)
                decision_id = await _credentialed_refusal(f"http://127.0.0.1:{ports[8080]}", pod)
                async with aiohttp.ClientSession() as http, http.get(ops + "/metrics") as resp:
                    metrics = await resp.text()

            suite = subprocess.run(
                [
                    MEMGOV,
                    "policy",
                    "test",
                    "--opa-url",
                    f"http://127.0.0.1:{ports[8181]}",
                    "--dir",
                    str(pod.host("memgov", config_file(manifests)["policy"]["dir"])),
                    "--cases",
                    str(REPO / "policy-tests"),
                ],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
    finally:
        await dev.stop()

    policy = ready["checks"]["policy"]
    assert policy["revision"] == policy["opa_revision"] == SOURCE_REVISION
    assert f'memgov_policy_opa_bundle_info{{revision="{SOURCE_REVISION}"}} 1.0' in metrics
    assert "memgov_policy_shadow_disagreements_total{" not in metrics
    state = config["state"]["url"].removeprefix("sqlite:///")
    with sqlite3.connect(state) as db:
        (revision,) = db.execute("SELECT policy_revision FROM audit WHERE decision_id = ?", (decision_id,)).fetchone()
    assert revision == SOURCE_REVISION
    assert suite.returncode == 0, suite.stdout + suite.stderr
    assert "2 engine(s), 0 disagreement(s)" in suite.stdout
