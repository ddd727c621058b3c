"""The wheel, built from the tree and installed non-editable into a fresh venv, runs memgov with no source tree.

The wheel is the runtime only: the dev tooling (sidecar/dev/) stays in the checkout, and serve, the
control API, erasure and a drill against a deployment all work without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sidecar.dev.devstack.deployment import memory_agents, pack_with_limits, write_keys
from sidecar.dev.devstack.stack import start_devstack
from sidecar.dev.drill_devstack import AGENTS, BOT, CAP, EMBEDDING_MODEL, SERVER
from sidecar.policy.pack import read_pack
from tests.support.once import once
from tests.support.smoke import production_config, serving, smoke, url, wait_ready, write_config

REPO = Path(__file__).resolve().parents[2]
SOURCE_REVISION = read_pack(REPO / "policies").revision


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, **kwargs)  # type: ignore[call-overload]  # the caller's keyword arguments


def _build_wheel(work: Path) -> None:
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work), str(REPO)])
    assert built.returncode == 0, built.stderr


def _install(work: Path, wheel: Path) -> None:
    made = _run([sys.executable, "-m", "venv", str(work / "venv")])
    assert made.returncode == 0, made.stderr
    installed = _run([str(work / "venv" / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)])
    assert installed.returncode == 0, installed.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """memgov's wheel, built from this tree (once per test run)."""
    (found,) = once(tmp_path_factory, "wheel", _build_wheel).glob("memgov-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv with memgov installed from that wheel, dependencies from the index (once per test run)."""
    return once(tmp_path_factory, "wheel-venv", lambda work: _install(work, wheel)) / "venv"


@pytest.fixture
def outside(tmp_path: Path) -> dict[str, object]:
    """Run from a folder outside the tree, with the pinned opa and regal on PATH and no memgov settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMGOV_", "PYTHON"))}
    env["PATH"] = f"{REPO / '.tools' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return {"cwd": tmp_path, "env": env}


class TestInstalledWheel:
    def test_memgov_and_its_pack_come_from_the_venv(self, venv: Path, outside: dict[str, object]) -> None:
        """The installed package, not the source tree, is imported; its pack and Regal settings travel with it."""
        probe = (
            "import json, sidecar; from sidecar.settings import PACKAGED_POLICY_DIR as p; "
            "from sidecar.policy.pack import read_pack; from sidecar.policy.check import regal_config; "
            "print(json.dumps([sidecar.__file__, str(p), read_pack(p).revision, str(regal_config(p))]))"
        )
        proc = _run([str(venv / "bin" / "python"), "-c", probe], **outside)
        assert proc.returncode == 0, proc.stderr
        module, pack, revision, regal = json.loads(proc.stdout)
        assert all(Path(path).is_relative_to(venv) for path in (module, pack, regal))
        assert not Path(pack).is_symlink()
        assert revision == SOURCE_REVISION

    def test_policy_check_passes(self, venv: Path, outside: dict[str, object]) -> None:
        """`memgov policy check` validates the packaged pack (parse, schema, format, opa, regal: none skipped)."""
        proc = _run([str(venv / "bin" / "memgov"), "policy", "check", "--require-tools"], **outside)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "FAIL" not in proc.stdout and proc.stdout.count("ok  ") >= 7

    def test_policy_test_passes_on_both_engines(self, venv: Path, outside: dict[str, object]) -> None:
        """`memgov policy test` runs the packaged case tables on Cedar and on a real OPA serving the pack."""
        proc = _run([str(venv / "bin" / "memgov"), "policy", "test"], **outside)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert proc.stdout.rstrip().splitlines()[-1].startswith("ok: ")
        assert "2 engine(s), 0 disagreement(s)" in proc.stdout

    async def test_serve_governs_a_request(self, venv: Path, tmp_path: Path, outside: dict[str, object]) -> None:
        """`memgov serve` from the venv gets ready on the packaged pack, governs a search and relays a call."""
        dev = await start_devstack()
        try:
            config = production_config(tmp_path, dev.kagent_url)
            path = write_config(tmp_path / "memgov.yaml", config)
            log = tmp_path / "serve.log"
            with serving([str(venv / "bin" / "memgov"), "--config", str(path), "serve"], log=log, **outside) as proc:
                ready = await wait_ready(proc, url(config, "ops"), log)
                seen = await smoke(url(config, "data"), url(config, "ops"), "cedar")
        finally:
            await dev.stop()
        assert ready["checks"]["policy"]["revision"] == SOURCE_REVISION
        assert seen.readyz["ready"] is True

    def test_dev_tooling_is_left_out(self, wheel: Path, venv: Path, outside: dict[str, object]) -> None:
        """No sidecar/dev in the wheel; its command line offers the runtime's commands and no dev ones."""
        names = zipfile.ZipFile(wheel).namelist()
        assert "sidecar/server.py" in names and not [n for n in names if n.startswith("sidecar/dev/")]
        proc = _run([str(venv / "bin" / "memgov"), "--help"], **outside)
        assert proc.returncode == 0, proc.stderr
        listed = proc.stdout.split()
        assert {"serve", "policy", "state", "scope", "drill", "doctor"} <= set(listed)
        assert not {"bench", "devstack", "demo", "fuzz"} & set(listed)
        drill = _run([str(venv / "bin" / "memgov"), "drill"], **outside)
        assert drill.returncode == 2 and "--data-url" in drill.stderr

    def test_doctor_runs_from_the_wheel(self, venv: Path, tmp_path: Path, outside: dict[str, object]) -> None:
        """`memgov doctor` from the wheel (cyclonus on PATH) finds the path a same-namespace policy opens."""
        exported = tmp_path / "netpol.yaml"
        open_all = {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}
        doc = {"kind": "NetworkPolicy", "metadata": {"name": "allow-all", "namespace": "kagent"}, "spec": open_all}
        exported.write_text(json.dumps(doc))
        proc = _run([str(venv / "bin" / "memgov"), "doctor", "--policies", str(exported)], **outside)
        assert proc.returncode == 1, proc.stderr
        assert (
            "kagent/attacker -> kagent/kagent-controller:8083  opened by NetworkPolicy kagent/allow-all" in proc.stdout
        )

    async def test_drill_passes_against_the_wheels_gateway(
        self, venv: Path, tmp_path: Path, outside: dict[str, object]
    ) -> None:
        """`memgov serve` and `memgov drill` from the wheel: consent, inspect, erasure and refusals all pass."""
        keys, pack = write_keys(tmp_path), pack_with_limits(tmp_path, {"max_entries": CAP})
        dev = await start_devstack()
        try:
            config = production_config(
                tmp_path,
                dev.kagent_url,
                upstream={"embedding_url": dev.embedding_url},
                policy={"dir": str(pack)},
                secrets={"session_key_file": str(keys.session_file)},
                trust={"bridge_key_file": str(keys.bridge_file), "operator_key_file": str(keys.operator_file)},
                matrix={"server_name": SERVER, "bridge_bot": BOT},
                # Pinned like the drill's own devstack, so forget-one rotates (exact over REST).
                agents=memory_agents(AGENTS, model=EMBEDDING_MODEL),
            )
            path = write_config(tmp_path / "memgov.yaml", config)
            log = tmp_path / "serve.log"
            argv = [
                str(venv / "bin" / "memgov"),
                "drill",
                "--data-url",
                url(config, "data"),
                "--control-url",
                url(config, "control"),
                "--ops-url",
                url(config, "ops"),
                "--bridge-key-file",
                str(keys.bridge_file),
                "--operator-key-file",
                str(keys.operator_file),
                "--session-key-file",
                str(keys.session_file),
                "--server-name",
                SERVER,
                "--bridge-bot",
                BOT,
                "--agent",
                AGENTS[0][0],
                "--ghost",
                AGENTS[0][1],
                "--policy-dir",
                str(pack),
                "--output",
                str(tmp_path / "bundle"),
            ]
            with serving([str(venv / "bin" / "memgov"), "--config", str(path), "serve"], log=log, **outside) as proc:
                await wait_ready(proc, url(config, "ops"), log)
                drill = await asyncio.to_thread(_run, argv, **outside)
        finally:
            await dev.stop()
        assert drill.returncode == 0, drill.stdout + drill.stderr
        assert "0 failed" in drill.stdout
