"""Start both stand-ins in the running event loop (tests, demo, benchmarks, ``memgov devstack``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Middleware

from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.embedding import EMBEDDING, EmbeddingFaults, EmbeddingState, create_embedding_app
from sidecar.dev.devstack.kagent import create_kagent_app
from sidecar.dev.devstack.recorder import Recorder
from sidecar.dev.devstack.releases import DEFAULT, KagentRelease
from sidecar.dev.devstack.runtime import RuntimeConfig
from sidecar.dev.devstack.state import RECORDER, STATE
from sidecar.dev.devstack.store import MemoryStore
from sidecar.dev.devstack.stores import open_memory_store

if TYPE_CHECKING:
    from sidecar.dev.devstack.realkagent import RealKagent


async def _serve(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner, int(runner.addresses[0][1])


@dataclass
class Devstack:
    """Both stand-ins, listening; ``embedding_url`` is the OpenAI-style base URL (``.../v1``).

    With a real kagent attached, ``kagent_url`` is the real controller's, ``store`` reads its
    ``memory`` table, and the stand-in app only plays the agents behind kagent's A2A proxy.
    """

    kagent_url: str
    embedding_url: str
    store: MemoryStore
    clock: Callable[[], datetime]
    kagent_app: web.Application
    embedding_app: web.Application
    _runners: tuple[web.AppRunner, ...]
    real: RealKagent | None = None

    async def attach_real_kagent(self, kagent: RealKagent, store: MemoryStore) -> None:
        """Put kagent's own server in front: it answers the controller routes, ``store`` (opened on its
        database) replaces the stand-in's, and it is stopped with the stack."""
        await self.store.close()
        self.store = self.kagent_app[STATE].store = store
        self.real = kagent
        self.kagent_url = kagent.url

    def kagent_log(self) -> str:
        """What the controller logged: the real kagent's log, or the stand-in's kagent-shaped one."""
        return self.real.log_text() if self.real is not None else self.kagent_app[STATE].log.text()

    @property
    def recorder(self) -> Recorder:
        """Requests the kagent stand-in received."""
        return self.kagent_app[RECORDER]

    @property
    def embedding(self) -> EmbeddingState:
        """Faults and recorded calls of the embedding stand-in."""
        return self.embedding_app[EMBEDDING]

    def set_runtime(self, runtime: RuntimeConfig | None) -> None:
        """Point the simulated agent runtime (e.g. at a gateway started after the stand-ins)."""
        self.kagent_app[STATE].runtime = runtime

    async def stop(self) -> None:
        """Stop listening and close the store (and stop an attached real kagent)."""
        for runner in self._runners:
            await runner.cleanup()
        await self.store.close()
        if self.real is not None:
            self.real.stop()


async def start_devstack(
    *,
    store_url: str | None = None,
    host: str = "127.0.0.1",
    kagent_port: int = 0,
    embedding_port: int = 0,
    clock: Callable[[], datetime] | None = None,
    agents: Iterable[str] | None = None,
    runtime: RuntimeConfig | None = None,
    stream_delay_s: float = 0.05,
    embedding_faults: EmbeddingFaults | None = None,
    middlewares: Iterable[Middleware] = (),
    release: KagentRelease = DEFAULT,
) -> Devstack:
    """Open the store and serve both stand-ins (kagent as ``release`` behaves); port 0 picks free ports;
    ``middlewares`` wrap both."""
    now = clock if clock is not None else DevClock()
    middlewares = tuple(middlewares)
    store = await open_memory_store(store_url, now=now)
    try:
        kagent_app = create_kagent_app(
            store,
            clock=now,
            agents=agents,
            stream_delay_s=stream_delay_s,
            runtime=runtime,
            middlewares=middlewares,
            release=release,
        )
        embedding_app = create_embedding_app(faults=embedding_faults, middlewares=middlewares)
        kagent_runner, kagent_port = await _serve(kagent_app, host, kagent_port)
        try:
            embedding_runner, embedding_port = await _serve(embedding_app, host, embedding_port)
        except BaseException:
            await kagent_runner.cleanup()
            raise
    except BaseException:
        await store.close()
        raise
    return Devstack(
        f"http://{host}:{kagent_port}",
        f"http://{host}:{embedding_port}/v1",
        store,
        now,
        kagent_app,
        embedding_app,
        (kagent_runner, embedding_runner),
    )
