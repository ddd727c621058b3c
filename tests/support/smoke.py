"""The smoke check every shipped form of memgov passes: a `memgov serve` process becomes ready with the
expected pack, governs one memory call with its policy engine, and relays one ordinary call.

Used for the wheel installed in a fresh venv, the container image's filesystem and the chart's
OPA wiring; each starts the process its own way and hands over the URLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from sidecar.dev.devstack.pg import free_port

#: A search without a session key: memgov's policy engine must decide it (empty result), never kagent.
SEARCH = {"agent_name": "kagent__NS__k8s_agent", "user_id": "someone", "vector": [0.25] * 768}


@dataclass(frozen=True)
class Smoke:
    """What the smoke check saw."""

    readyz: dict[str, Any]
    decision: str
    decisions_by_engine: float


def production_config(workdir: Path, kagent_url: str, **sections: Any) -> dict[str, Any]:
    """A production config on fresh loopback ports with a generated session key, SQLite state in workdir."""
    key = workdir / "session.key"
    key.write_text(os.urandom(32).hex())
    key.chmod(0o600)
    config: dict[str, Any] = {
        "profile": "production",
        "upstream": {"controller_url": kagent_url},
        "listen": {name: f"127.0.0.1:{free_port()}" for name in ("data", "control", "ops")},
        "state": {"url": f"sqlite:///{workdir / 'state.db'}"},
        "secrets": {"session_key_file": str(key)},
        "policy": {"reload_interval_s": 0},
        "log": {"level": "info"},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    """Write a config file and return its path."""
    path.write_text(yaml.safe_dump(config))
    return path


def url(config: dict[str, Any], listener: str) -> str:
    """The loopback URL of one listener of a config."""
    return "http://" + config["listen"][listener]


def _stop_group(proc: subprocess.Popen[bytes], sig: int, timeout_s: float) -> bool:
    """Signal the process group a process leads and wait until it is empty; False when it outlived the timeout."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # a group's end can only be observed by asking
        proc.poll()  # reaps the leader, which would otherwise stay in the group as a zombie
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@contextmanager
def serving(argv: Sequence[str], *, log: Path, **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """Run a `memgov serve` process in its own process group; stop the whole group at the end.

    The group matters when the process is a launcher (unshare, chroot): memgov below it, which may
    have changed user, is stopped too.
    """
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, **popen
        )
    try:
        yield proc
    finally:
        if not _stop_group(proc, signal.SIGTERM, 20):
            _stop_group(proc, signal.SIGKILL, 20)


async def wait_ready(
    proc: subprocess.Popen[bytes], ops_url: str, log: Path, timeout_s: float = 90.0, *, store: bool = True
) -> dict[str, Any]:
    """Poll /readyz until it answers 200 and, with ``store``, until the state store answers too.

    The listeners open before the store connects (memory is degraded until then, SPEC D6), so a test
    that reads what a request recorded waits for both. Fails with the process log when memgov exits
    or never gets there.
    """
    last: dict[str, Any] = {}
    async with aiohttp.ClientSession() as http:
        async with asyncio.timeout(timeout_s):
            while True:
                assert proc.poll() is None, f"memgov exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
                try:
                    async with http.get(ops_url + "/readyz") as resp:
                        last = await resp.json()
                        if resp.status == 200 and (not store or last["checks"]["state"]["available"]):
                            return last
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)  # a child's readiness can only be observed by asking it
    raise AssertionError(f"never ready: {last}")


def _engine_decisions(metrics: str, engine: str) -> float:
    prefix = "memgov_policy_decisions_total{"
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(prefix) and f'engine="{engine}"' in line
    )


async def smoke(data_url: str, ops_url: str, engine: str) -> Smoke:
    """Readiness, one governed search decided by the policy engine, one passthrough call."""
    async with aiohttp.ClientSession() as http:
        async with http.get(ops_url + "/readyz") as resp:
            assert resp.status == 200, await resp.text()
            readyz = await resp.json()
        async with http.post(data_url + "/api/memories/search", json=SEARCH) as resp:
            assert (resp.status, await resp.json()) == (200, [])
            decision = resp.headers["X-Memgov-Decision"]
        assert decision.startswith("empty_result; reason=")
        async with http.get(data_url + "/api/agents?limit=1") as resp:
            assert resp.status == 200
            relayed = await resp.json()
            assert "X-Memgov-Decision" not in resp.headers
        assert relayed["data"]["path"] == "/api/agents" and relayed["data"]["query"] == "limit=1"
        async with http.get(ops_url + "/metrics") as resp:
            decided = _engine_decisions(await resp.text(), engine)
    assert decided >= 1, f"the {engine} engine decided nothing"
    return Smoke(readyz, decision, decided)
