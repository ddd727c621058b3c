"""The process harness itself: a port taken between picking and binding is not a test failure."""

from __future__ import annotations

import socket
from pathlib import Path

import aiohttp

from sidecar.dev.devstack import start_devstack
from sidecar.dev.devstack.deployment import write_keys
from tests.support.harness import policy_pack
from tests.support.process import gateway_process
from tests.support.procs import process_settings


async def test_a_taken_port_is_replaced_and_the_gateway_serves(tmp_path: Path) -> None:
    """Another process holding the picked data port makes the harness pick fresh ports, not fail."""
    stack = await start_devstack(stream_delay_s=0)
    try:
        settings = process_settings(
            write_keys(tmp_path / "keys"), policy_pack(tmp_path), stack.kagent_url, f"sqlite:///{tmp_path / 'state.db'}"
        )
        taken = settings["listen"]["data"]
        with socket.socket() as holder:
            host, port = taken.rsplit(":", 1)
            holder.bind((host, int(port)))
            holder.listen()
            async with gateway_process(tmp_path / "gw", settings) as gw:
                assert settings["listen"]["data"] != taken
                async with aiohttp.ClientSession() as http, http.get(gw.ops_url + "/readyz") as resp:
                    assert resp.status == 200
        assert '"error_type": "EADDRINUSE"' in (tmp_path / "gw" / "gateway.log").read_text()
    finally:
        await stack.stop()
