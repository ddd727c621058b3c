"""Start a throwaway OPA server on loopback serving a pack's bundle (``memgov policy test``, benchmarks, tests)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sidecar.policy.opa_bundle import write_folder
from sidecar.policy.pack import read_pack

_REPO_TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "bin"
#: How OPA loads a pack bundle, here and in the chart's OPA container: test files stay out, and
#: decision inputs never reach a log line.
RUN_FLAGS: Final = ("--ignore=*_test.rego", "--skip-version-check", "--log-level=error", "--log-format=json")


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
    """A running ``opa run --server`` child process and the bundle folder it loaded."""

    process: subprocess.Popen[bytes]
    url: str
    bundle: Path

    def stop(self) -> None:
        """Terminate the server, wait for it and remove its bundle."""
        stop_child(self.process)
        shutil.rmtree(self.bundle.parent, ignore_errors=True)


def stop_child(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """Terminate a tool's child process and wait for it (SIGTERM, then SIGKILL after ``grace_s``)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def healthy(url: str, timeout_s: float = 1.0) -> bool:
    """Whether the server at ``url`` answers 200 on ``/health`` within ``timeout_s``."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout_s) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_opa(pack_dir: Path, port: int | None = None, startup_timeout_s: float = 30.0) -> OpaServer:
    """Start OPA on a loopback port serving the pack's bundle; return once /health answers.

    The pack is validated and written as a bundle first (PackError when it cannot be); OPA refusing
    to compile it ends the start with its first error line, which names a pack file, never input.
    """
    work = Path(tempfile.mkdtemp(prefix="memgov-opa-"))
    bundle = work / "bundle"
    try:
        write_folder(read_pack(pack_dir), bundle)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    port = port or _free_port()
    output = (work / "output").open("wb")
    with output:  # OPA prints load errors on stdout and its log on stderr
        proc = subprocess.Popen(
            [tool_binary("opa"), "run", "--server", f"--addr=127.0.0.1:{port}", *RUN_FLAGS, "--bundle", str(bundle)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
        )
    server = OpaServer(proc, f"http://127.0.0.1:{port}", bundle)
    deadline = time.monotonic() + startup_timeout_s
    # Readiness of a child process can only be observed by asking it; the wait is bounded.
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            first = next(iter((work / "output").read_text(errors="replace").splitlines()), "")
            server.stop()
            raise RuntimeError(f"opa exited during startup (status {proc.returncode}): {first[:300]}")
        if healthy(server.url):
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError("opa did not become healthy in time")
