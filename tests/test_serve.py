"""`memgov serve` as a process: it starts from a config file and reloads its policy pack on SIGHUP."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from sidecar.devstack.pg import free_port
from sidecar.settings import PACKAGED_POLICY_DIR


def _ready(ops: str) -> dict:
    try:
        with urllib.request.urlopen(ops + "/readyz", timeout=2) as resp:
            return json.loads(resp.read())
    except OSError:
        return {}


def _reloads(ops: str, outcome: str) -> float:
    with urllib.request.urlopen(ops + "/metrics", timeout=2) as resp:
        text = resp.read().decode()
    prefix = f'memgov_policy_reloads_total{{outcome="{outcome}"}}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def _wait(predicate, timeout_s: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = predicate()
        if state:
            return state
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


@pytest.fixture(params=[1, 2], ids=["one-worker", "two-workers"])
def served(tmp_path: Path, request: pytest.FixtureRequest):
    pack = tmp_path / "pack"
    shutil.copytree(PACKAGED_POLICY_DIR, pack)
    ops = free_port()
    config = tmp_path / "memgov.yaml"
    config.write_text(
        f"listen:\n  data: 127.0.0.1:{free_port()}\n  control: 127.0.0.1:{free_port()}\n  ops: 127.0.0.1:{ops}\n"
        f"state:\n  url: sqlite:///{tmp_path}/state.db\npolicy:\n  dir: {pack}\n  reload_interval_s: 0\n"
    )
    workers = request.param
    proc = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--config", str(config), "--workers",
                             str(workers)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ})
    try:
        yield proc, pack, f"http://127.0.0.1:{ops}", workers
    finally:
        proc.terminate()
        proc.wait(timeout=20)


class TestServe:
    def test_sighup_reloads_a_valid_pack_and_keeps_the_old_one_on_a_broken_one(self, served):
        """kill -HUP swaps in an edited pack; a broken edit is refused and the live pack keeps serving.

        With two workers the supervisor passes each signal on to both, and the merged metrics count
        every worker's reloads (the first load of each included)."""
        proc, pack, ops, workers = served
        first = _wait(lambda: (r := _ready(ops)).get("ready") and r)["checks"]["policy"]["revision"]
        _wait(lambda: _reloads(ops, "loaded") >= workers)  # every worker is up
        consent = pack / "cedar" / "consent.cedar"
        consent.write_text(consent.read_text() + "\n// reviewed again\n")
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: _reloads(ops, "loaded") >= 2 * workers)  # every worker loaded the edit
        second = _ready(ops)["checks"]["policy"]["revision"]
        assert second != first
        consent.write_text(consent.read_text() + "\nforbid (principal, action, resource) when { this is not cedar };\n")
        proc.send_signal(signal.SIGHUP)
        _wait(lambda: _reloads(ops, "rejected") >= workers)  # the refused reload has happened everywhere
        after = _ready(ops)
        assert after["ready"] is True and after["checks"]["policy"]["revision"] == second
        assert proc.poll() is None
