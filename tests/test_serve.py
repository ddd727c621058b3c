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

from sidecar.dev.devstack.pg import free_port
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
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(config), "--workers", str(workers)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ},
    )
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


def _workers_of(pid: int) -> list[int]:
    """The gateway workers a supervisor started (its spawned children other than helpers)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"multiprocessing.spawn" in cmdline and b"resource_tracker" not in cmdline:
                found.append(int(child))
    return found


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.fixture
def two_workers(tmp_path: Path):
    ops = free_port()
    config = tmp_path / "memgov.yaml"
    config.write_text(
        f"listen:\n  data: 127.0.0.1:{free_port()}\n  control: 127.0.0.1:{free_port()}\n  ops: 127.0.0.1:{ops}\n"
        f"  workers: 2\nstate:\n  url: sqlite:///{tmp_path}/state.db\npolicy:\n  reload_interval_s: 0\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(config)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        _wait(lambda: _ready(f"http://127.0.0.1:{ops}").get("ready") and len(_workers_of(proc.pid)) == 2)
        yield proc, _workers_of(proc.pid)
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=30)


class TestWorkers:
    def test_a_dead_worker_stops_the_whole_gateway(self, two_workers):
        """When one worker dies the supervisor stops the other and exits 1, for the orchestrator to restart."""
        proc, (first, second) = two_workers
        os.kill(first, signal.SIGKILL)
        assert proc.wait(timeout=60) == 1
        _wait(lambda: _gone(second))

    def test_workers_die_with_a_killed_supervisor(self, two_workers):
        """A supervisor killed outright leaves no worker behind holding the ports."""
        proc, workers = two_workers
        proc.kill()
        proc.wait(timeout=10)
        _wait(lambda: all(_gone(w) for w in workers))

    def test_sigterm_stops_every_worker_cleanly(self, two_workers):
        """SIGTERM to the supervisor is passed on; every worker shuts down and the supervisor exits 0."""
        proc, workers = two_workers
        proc.terminate()
        assert proc.wait(timeout=60) == 0
        assert all(_gone(w) for w in workers)
