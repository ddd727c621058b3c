"""Run kagent's own controller HTTP server (built by conformance/kagent/build.sh) on loopback.

One binary per supported release (``releases.py``: v0.9.11 and v0.10.0-rc3). Each is kagent's
router, middleware, memory handlers, DB client, migrations and cleanup loop, wired without
Kubernetes by ``conformance/kagent/main.go``. It needs PostgreSQL with
pgvector (the build script installs pgvector into the local server's folders). Its JSON log goes
to a file that tests read as one more sink. Used by the conformance tests and ``memgov bench``.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sidecar.dev.devstack.pg import free_port
from sidecar.dev.devstack.releases import DEFAULT, KagentRelease
from sidecar.policy.opa_server import healthy, stop_child

AuthMode = Literal["unsecure", "trusted-proxy"]
AUTH_MODES: tuple[AuthMode, ...] = ("unsecure", "trusted-proxy")
BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "conformance" / "kagent" / "build.sh"
_START_TIMEOUT_S = 60.0


class RealKagentError(RuntimeError):
    """The real kagent could not be built or did not come up."""


def build(part: Literal["server", "runtime", "pgvector", "client"], release: KagentRelease = DEFAULT) -> str:
    """Run the cached build of one part of ``release``; returns the path it prints (binary, pgvector
    folder, python)."""
    if not BUILD_SCRIPT.is_file():
        raise RealKagentError(f"{BUILD_SCRIPT} not found: the real kagent runs from a memgov source checkout")
    argv = ["bash", str(BUILD_SCRIPT), part] + ([release.name] if part != "pgvector" else [])
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RealKagentError(f"conformance build of {part} {release.name} failed:\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


@dataclass
class RealKagent:
    """One running kagent controller HTTP server and where to reach and observe it."""

    url: str
    db_url: str
    admin_url: str
    auth_mode: AuthMode
    log_path: Path
    release: KagentRelease
    _proc: subprocess.Popen[bytes] = field(repr=False)

    def log_text(self) -> str:
        """Everything kagent has logged so far (JSON lines, all levels it emits)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def prune(self) -> None:
        """Run kagent's PruneExpiredMemories now (the body of its 24 h cleanup loop)."""
        req = urllib.request.Request(self.admin_url + "/prune", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            if resp.status != 200:
                raise RealKagentError(f"prune answered {resp.status}")

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after a grace period)."""
        stop_child(self._proc)


def start_real_kagent(
    db_url: str,
    log_dir: Path,
    *,
    auth_mode: AuthMode = "unsecure",
    release: KagentRelease = DEFAULT,
    vector: bool = True,
    agents: Mapping[str, str] | None = None,
    cleanup_interval_s: float | None = None,
    port: int = 0,
) -> RealKagent:
    """Start the server on free loopback ports against ``db_url`` (kagent migrates it on start).

    ``agents`` maps ``namespace/name`` to the A2A endpoint kagent proxies that agent's invocations to
    (and each gets kagent's agent row, so session routes find it).
    """
    binary = build("server", release)
    if vector:
        build("pgvector")
    port = port or free_port()
    admin_port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"kagent-{port}.log"
    sep = "&" if "?" in db_url else "?"
    argv = [
        binary,
        f"--http-server-address=127.0.0.1:{port}",
        f"--admin-address=127.0.0.1:{admin_port}",
        f"--postgres-database-url={db_url}{sep}sslmode=disable",
        f"--auth-mode={auth_mode}",
        f"--database-vector-enabled={'true' if vector else 'false'}",
        "--zap-time-encoding=rfc3339",
    ]
    if cleanup_interval_s is not None:
        argv.append(f"--cleanup-interval={cleanup_interval_s}s")
    argv += [f"--a2a-agent={ref}={url}" for ref, url in (agents or {}).items()]
    with open(log_path, "ab") as log:
        # KUBECONFIG is irrelevant (no Kubernetes client is ever built) but kept out of the child anyway.
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    kagent = RealKagent(
        f"http://127.0.0.1:{port}", db_url, f"http://127.0.0.1:{admin_port}", auth_mode, log_path, release, proc
    )
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not healthy(kagent.url, timeout_s=2):
        if proc.poll() is not None or time.monotonic() > deadline:
            kagent.stop()
            raise RealKagentError(f"kagent did not start:\n{kagent.log_text()[-4000:]}")
        time.sleep(0.05)
    return kagent
