"""`memgov serve` as a process: it starts from a config file and reloads its policy pack on SIGHUP."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
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


def _logged(log: Path, event: str) -> list[dict]:
    """The supervisor's (and its workers') JSON log lines carrying ``event``."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == event:
                found.append(record)
    return found


def _start_supervisor(tmp_path: Path, state_url: str) -> tuple[subprocess.Popen, Path, int]:
    ops = free_port()
    config = tmp_path / "memgov.yaml"
    config.write_text(
        f"listen:\n  data: 127.0.0.1:{free_port()}\n  control: 127.0.0.1:{free_port()}\n  ops: 127.0.0.1:{ops}\n"
        f"  workers: 2\nstate:\n  url: {state_url}\npolicy:\n  reload_interval_s: 0\n"
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sidecar", "serve", "--config", str(config)],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ},
        )
    return proc, log, ops


def _exit_code(proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> int:
    """The supervisor's exit code; if it does not end in time, it is killed and its log shown."""
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        shown = f"the supervisor did not exit within {timeout_s:.0f} s; its log ends with:\n{tail}"
        raise AssertionError(shown) from None


@pytest.fixture
def two_workers(tmp_path: Path):
    """A supervisor whose two workers both said they serve (its ``workers.started`` line is logged)."""
    proc, log, _ = _start_supervisor(tmp_path, f"sqlite:///{tmp_path}/state.db")
    try:
        _wait(lambda: _logged(log, "workers.started") and len(_workers_of(proc.pid)) == 2, timeout_s=120)
        yield proc, _workers_of(proc.pid), log
    finally:
        if proc.poll() is None:
            proc.terminate()
        _exit_code(proc, log)


@pytest.fixture
def silent_store():
    """A PostgreSQL address that accepts connections and never answers: workers hang in start-up."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def hold() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(server.accept()[0])

    threading.Thread(target=hold, daemon=True).start()
    try:
        yield f"postgresql://memgov@127.0.0.1:{server.getsockname()[1]}/memgov", accepted
    finally:
        server.close()
        for conn in accepted:
            conn.close()


class TestWorkers:
    def test_a_dead_worker_stops_the_whole_gateway(self, two_workers):
        """When one worker dies the supervisor stops the other and exits 1, for the orchestrator to restart."""
        proc, (first, second), log = two_workers
        os.kill(first, signal.SIGKILL)
        assert _exit_code(proc, log) == 1
        _wait(lambda: _gone(second))
        assert [r.get("step") for r in _logged(log, "workers.worker_exited")] == ["serve"]

    def test_workers_die_with_a_killed_supervisor(self, two_workers):
        """A supervisor killed outright leaves no worker behind holding the ports."""
        proc, workers, _ = two_workers
        proc.kill()
        proc.wait(timeout=10)
        _wait(lambda: all(_gone(w) for w in workers))

    def test_sigterm_stops_every_worker_cleanly(self, two_workers):
        """SIGTERM to the supervisor is passed on; every worker shuts down and the supervisor exits 0."""
        proc, workers, log = two_workers
        proc.terminate()
        assert _exit_code(proc, log) == 0
        assert all(_gone(w) for w in workers)


@pytest.fixture
def starting(tmp_path: Path, silent_store):
    """A supervisor whose two workers both connect to the silent store (and both serve meanwhile)."""
    url, accepted = silent_store
    proc, log, ops = _start_supervisor(tmp_path, url)
    try:
        _wait(lambda: len(accepted) >= 2 and len(_workers_of(proc.pid)) == 2, timeout_s=120)
        yield proc, _workers_of(proc.pid), log, f"http://127.0.0.1:{ops}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class TestStartUp:
    """A state store that never answers (accepts connections, answers nothing) holds no start-up up."""

    def test_workers_serve_degraded_until_the_store_answers(self, starting):
        """Both workers serve: ready, the store reported unavailable, its metric exported; SIGTERM exits 0."""
        proc, workers, log, ops = starting
        _wait(lambda: _logged(log, "workers.started"), timeout_s=120)
        ready = _wait(lambda: (r := _ready(ops)).get("ready") and r)
        assert ready["checks"]["state"] == {"ok": True, "backend": "postgresql", "available": False}
        with urllib.request.urlopen(ops + "/metrics", timeout=5) as resp:
            assert "memgov_state_available 0.0" in resp.read().decode()
        proc.terminate()
        assert _exit_code(proc, log) == 0
        assert all(_gone(w) for w in workers)
        assert not _logged(log, "server.start_aborted") and not _logged(log, "workers.worker_exited")
        assert "Traceback" not in log.read_text(errors="replace")

    def test_a_worker_dying_while_the_store_is_silent_stops_the_other(self, starting):
        """A worker killed while the store is away stops the gateway (exit 1) for the orchestrator to restart."""
        proc, (first, second), log, _ = starting
        _wait(lambda: _logged(log, "workers.started"), timeout_s=120)
        os.kill(first, signal.SIGKILL)
        assert _exit_code(proc, log) == 1
        _wait(lambda: _gone(second))
        assert [r.get("step") for r in _logged(log, "workers.worker_exited")] == ["serve"]
        assert "Traceback" not in log.read_text(errors="replace")
