"""``memgov devstack`` parses its options and serves both stand-ins until interrupted."""

from __future__ import annotations

import asyncio
import signal
import sys

import aiohttp
import pytest

from sidecar.cli import build_parser
from sidecar.dev.devstack.cli import _runtime, run


class TestParser:
    def test_defaults_are_kagents_port_and_8090(self) -> None:
        """Without options the stand-ins take ports 8083 and 8090, in-memory SQLite, no runtime."""
        args = build_parser().parse_args(["devstack"])
        assert (args.kagent_port, args.embedding_port, args.store, args.func) == (8083, 8090, None, run)
        assert _runtime(args) is None and args.kagent_version == "0.9"

    def test_only_supported_kagent_releases_are_accepted(self) -> None:
        """--kagent-version takes 0.9 or 0.10 and refuses anything else."""
        assert build_parser().parse_args(["devstack", "--kagent-version", "0.10"]).kagent_version == "0.10"
        with pytest.raises(SystemExit):
            build_parser().parse_args(["devstack", "--kagent-version", "0.11"])

    def test_runtime_agents_need_both_urls(self) -> None:
        """--runtime-agent without the memory and embedding URLs is refused with a message."""
        args = build_parser().parse_args(["devstack", "--runtime-agent", "kagent/helper"])
        with pytest.raises(SystemExit, match="--runtime-memory-url"):
            _runtime(args)

    def test_runtime_options_build_the_config(self) -> None:
        """The runtime flags become a RuntimeConfig listing every memory agent."""
        args = build_parser().parse_args(
            [
                "devstack",
                "--runtime-memory-url",
                "http://gw:8080",
                "--runtime-embedding-url",
                "http://e/v1",
                "--runtime-agent",
                "a/b",
                "--runtime-agent",
                "c/d",
            ]
        )
        cfg = _runtime(args)
        assert cfg is not None and cfg.memory_agents == frozenset({"a/b", "c/d"})
        assert (cfg.memory_base_url, cfg.embedding_base_url) == ("http://gw:8080", "http://e/v1")


class TestServe:
    @pytest.mark.parametrize(("release", "tag"), [("0.9", "v0.9.11"), ("0.10", "v0.10.0-rc3")])
    async def test_serves_until_interrupted(self, release: str, tag: str) -> None:
        """The command prints both URLs, answers /health and /version as the chosen release, and exits 0 on SIGINT."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sidecar",
            "devstack",
            "--kagent-port",
            "0",
            "--embedding-port",
            "0",
            "--kagent-version",
            release,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        try:
            urls: dict[str, str] = {}
            async with asyncio.timeout(30):
                while len(urls) < 2:
                    line = (await proc.stdout.readline()).decode()
                    assert line, "devstack exited before printing its URLs"
                    if "stand-in:" in line:
                        label, _, url = line.partition(":")
                        urls[label.split()[0]] = url.strip()
            async with aiohttp.ClientSession() as http:
                async with http.get(urls["kagent"] + "/health") as resp:
                    assert resp.status == 200
                async with http.get(urls["kagent"] + "/version") as resp:
                    assert (await resp.json())["kagent_version"] == tag
                async with http.post(urls["embedding"] + "/embeddings", json={"model": "m", "input": "x"}) as resp:
                    assert resp.status == 200
            proc.send_signal(signal.SIGINT)
            async with asyncio.timeout(30):
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
