"""Start a throwaway OPA server on loopback (``memgov policy test``, benchmarks and the test suite)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

_REPO_TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "bin"


class ToolNotFound(RuntimeError):
    """A Go tool (opa, regal) is neither in .tools/bin nor on PATH."""


def tool_binary(name: str) -> str:
    """Return the pinned tool from .tools/bin (``make tools``), else the one on PATH."""
    pinned = _REPO_TOOLS / name
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
    found = shutil.which(name)
    if found is None:
        raise ToolNotFound(f"{name} not found: run `make tools` or put {name} on PATH")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class OpaServer:
    """A running ``opa run --server`` child process."""

    process: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        """Terminate the server and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as resp:  # noqa: S310 - loopback URL we built
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_opa(startup_timeout_s: float = 30.0) -> OpaServer:
    """Start OPA on a free loopback port and return once /health answers."""
    port = _free_port()
    proc = subprocess.Popen(
        [tool_binary("opa"), "run", "--server", "--addr", f"127.0.0.1:{port}", "--log-level", "error"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    server = OpaServer(proc, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + startup_timeout_s
    # Readiness of a child process can only be observed by asking it; the wait is bounded.
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"opa exited during startup (status {proc.returncode})")
        if _healthy(server.url):
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError("opa did not become healthy in time")
