"""Stopping `memgov serve`: a stream in flight when SIGTERM arrives finishes within listen.shutdown_timeout_s."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from sidecar.dev.devstack.stack import start_devstack
from tests.support.smoke import production_config, serving, url, wait_ready, write_config

STREAM = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "message/stream",
    "params": {"message": {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]}},
}


@pytest.mark.parametrize(("timeout_s", "finishes"), [(30.0, True), (0.5, False)], ids=["drained", "cut"])
async def test_sigterm_lets_a_stream_finish(tmp_path: Path, timeout_s: float, finishes: bool) -> None:
    """An A2A stream started before SIGTERM ends with its final event; a too short shutdown timeout cuts it."""
    dev = await start_devstack(stream_delay_s=0.5)
    try:
        config = production_config(tmp_path, dev.kagent_url, listen={"shutdown_timeout_s": timeout_s})
        path = write_config(tmp_path / "memgov.yaml", config)
        log = tmp_path / "serve.log"
        events: list[dict[str, object]] = []
        with serving([sys.executable, "-m", "sidecar", "--config", str(path), "serve"], log=log) as proc:
            await wait_ready(proc, url(config, "ops"), log)
            async with (
                aiohttp.ClientSession() as http,
                http.post(url(config, "data") + "/api/a2a/kagent/helper/", json=STREAM) as resp,
            ):
                try:
                    async for line in resp.content:
                        if line.startswith(b"data: "):
                            events.append(json.loads(line.removeprefix(b"data: ")))
                            if len(events) == 1:
                                proc.send_signal(signal.SIGTERM)  # a roll begins while the reply streams
                except aiohttp.ClientPayloadError:
                    pass
            assert proc.wait(timeout=60) == 0
    finally:
        await dev.stop()
    final = bool(events) and events[-1]["result"].get("final") is True  # type: ignore[union-attr]  # events are JSON objects
    assert final is finishes, f"{len(events)} events"
