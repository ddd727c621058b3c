"""A TCP relay in front of a server that can be frozen: a network blackhole on demand.

Frozen, it still accepts connections, and it reads what clients send but forwards nothing either
way and closes nothing: no reset, no error, the peer simply never answers (a partitioned network,
a hung host). Thawed, everything held goes on where it stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from tests.support.pg import free_port


@dataclass
class Blackhole:
    """A relay to ``127.0.0.1:target``, listening on ``port``; ``freeze()`` and ``thaw()`` switch it."""

    target: int
    port: int = 0
    _open: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def freeze(self) -> None:
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    def url(self, server_url: str) -> str:
        """``server_url`` (a URL naming ``127.0.0.1:target``) through this relay."""
        return server_url.replace(f"127.0.0.1:{self.target}", f"127.0.0.1:{self.port}")

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(ConnectionError, OSError):
                writer.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            await self._open.wait()  # accepted, but not connected onward while frozen
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target)
        except (ConnectionError, OSError):
            client_w.close()
            return
        pipes = [
            asyncio.ensure_future(self._pipe(client_r, server_w)),
            asyncio.ensure_future(self._pipe(server_r, client_w)),
        ]
        await asyncio.gather(*pipes)

    def _track(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(client_r, client_w))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


@asynccontextmanager
async def blackhole(target: int) -> AsyncIterator[Blackhole]:
    """A thawed relay to the loopback port ``target`` on a free port, closed at the end."""
    relay = Blackhole(target)
    relay.thaw()
    for _ in range(3):
        relay.port = free_port()
        try:
            server = await asyncio.start_server(relay._track, "127.0.0.1", relay.port)
            break
        except OSError:
            continue  # taken meanwhile by another process
    else:
        raise AssertionError("no free port for the relay three times")
    try:
        yield relay
    finally:
        relay.thaw()
        server.close()
        for task in list(relay._tasks):
            task.cancel()
        await asyncio.gather(*relay._tasks, return_exceptions=True)
        await server.wait_closed()
