"""The README's PostgreSQL round trips per governed save and search are what the wire carries.

A counting proxy sits between the gateway and a real PostgreSQL server and counts the frontend
messages that end a round trip (``Sync`` and a simple ``Query``: the client then waits for the
server). Background work (the store's health check, the gauges, the sweeper) shares the pool, so
each call is measured three times and the fewest counted is the call's own.
"""

from __future__ import annotations

import asyncio
import re
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.harness import AGENT, APP, harness
from tests.support.upstream import runtime_headers

README = Path(__file__).resolve().parents[2] / "README.md"
_STARTUP_CODES = {80877103, 80877104, 196608}  # SSLRequest, GSSENCRequest, protocol 3.0


class _Frontend:
    """Counts the round-trip-ending messages of one client's stream (``S`` Sync, ``Q`` Query)."""

    def __init__(self, counter: list[int]) -> None:
        self.buf, self.started, self.counter = b"", False, counter

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            if not self.started:
                if len(self.buf) < 8:
                    return
                length, code = struct.unpack("!II", self.buf[:8])
                if len(self.buf) < length:
                    return
                self.buf = self.buf[length:]
                self.started = code == 196608  # the startup message itself; SSL requests come before it
                continue
            if len(self.buf) < 5:
                return
            kind, length = self.buf[:1], struct.unpack("!I", self.buf[1:5])[0]
            if len(self.buf) < 1 + length:
                return
            self.buf = self.buf[1 + length :]
            if kind in (b"S", b"Q"):
                self.counter[0] += 1


@asynccontextmanager
async def _counting_proxy(pg_url: str) -> AsyncIterator[tuple[str, list[int]]]:
    """A loopback proxy to the database's server; yields the URL through it and the running count."""
    parts = urlsplit(pg_url)
    counter = [0]

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frontend: _Frontend | None) -> None:
        try:
            while data := await reader.read(65536):
                if frontend is not None:
                    frontend.feed(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def accept(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(parts.hostname, parts.port)
        await asyncio.gather(pipe(client_r, server_w, _Frontend(counter)), pipe(server_r, client_w, None))

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield pg_url.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{port}", 1), counter
    finally:
        server.close()


def _stated() -> tuple[int, int]:
    found = re.search(r"\((\d+) per save, (\d+) per search\)", README.read_text())
    assert found is not None, "README.md no longer states the round trips per save and search"
    return int(found[1]), int(found[2])


class TestRoundTrips:
    async def test_the_readme_states_what_a_save_and_a_search_cost(self, tmp_path: Path, pg_url: str) -> None:
        """A governed save and a governed search take the round trips the README states."""
        async with (
            _counting_proxy(pg_url) as (url, counter),
            harness(tmp_path, store_url=None, state_url=url, state={"check_interval_s": 60}) as h,
        ):
            scope_id = await h.scope()
            key = h.session_key(scope_id, 1)
            search = {"agent_name": APP, "user_id": key, "vector": [0.1] * 768, "limit": 5}
            headers = {"X-Agent-Name": APP, "X-User-Id": key, **runtime_headers(h.upstream, AGENT)}

            async def saved() -> None:
                assert (await h.save(scope_id, "likes sencha"))[0] == 201

            async def searched() -> None:
                url = h.gw.data_url + "/api/memories/search"
                async with h.http.post(url, json=search, headers=headers) as resp:
                    assert resp.status == 200
                    assert resp.headers["X-Memgov-Decision"].startswith("forward")  # governed, then forwarded

            measured = []
            for call in (saved, searched):
                await call()  # warm: prepared statements and pooled connections
                counts = []
                for _ in range(3):
                    before = counter[0]
                    await call()
                    counts.append(counter[0] - before)
                measured.append(min(counts))
        assert tuple(measured) == _stated()
