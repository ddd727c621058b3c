"""Benchmark servers, each in its own process: the kagent stand-in (or kagent itself), the bare proxy and memgov.

A server process is spawned fresh (no state inherited from the parent), pins itself to the
CPUs it is given, silences its stdout, starts its server, sends its URLs back over a pipe and
runs until the parent asks it to stop. The parent reads each server's CPU time from /proc (the
process and its children: kagent's Go server is a child; its PostgreSQL is not counted) so a
report can say what one request cost each process.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import multiprocessing
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from multiprocessing.connection import Connection
from typing import Any

from aiohttp import web

from sidecar import evloop

Builder = Callable[[dict[str, Any]], AbstractAsyncContextManager[dict[str, str]]]
_START_TIMEOUT_S = 60.0


@asynccontextmanager
async def _site(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # the bound port of port 0
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def _bare(params: dict[str, Any]) -> AsyncIterator[dict[str, str]]:
    from sidecar.dev.bench.bare import create_bare_app

    async with _site(create_bare_app(params["upstream"])) as url:
        yield {"url": url}


@asynccontextmanager
async def _memgov(params: dict[str, Any]) -> AsyncIterator[dict[str, str]]:
    from sidecar.logs import configure_logging
    from sidecar.server import running_gateway
    from sidecar.settings import load_settings

    # Dev-profile files (session key, SQLite state) land in the run's scratch folder.
    os.chdir(params["workdir"])
    listen = {"data": "127.0.0.1:0", "control": "127.0.0.1:0", "ops": "127.0.0.1:0"}
    overrides: dict[str, Any] = params.get("overrides", {})
    upstream = {"controller_url": params["upstream"], **overrides.get("upstream", {})}
    settings = load_settings(**{**overrides, "upstream": upstream, "listen": {**listen, **overrides.get("listen", {})}})
    configure_logging(settings.log.level)
    workers = int(params.get("workers", 1))
    if workers > 1:
        from sidecar.server import serve
        from sidecar.workers import running_workers

        async with running_workers(settings, workers, serve) as running:
            yield {"url": running.urls["data"], **{f"{name}_url": url for name, url in running.urls.items()}}
        return
    async with running_gateway(settings) as gw:
        assert gw.parts is not None
        await gw.parts.store.wait_connected()
        yield {"url": gw.data_url, **{f"{name}_url": url for name, url in gw.urls.items()}}


@asynccontextmanager
async def _standin(params: dict[str, Any]) -> AsyncIterator[dict[str, str]]:
    from sidecar.dev.devstack.stack import start_devstack

    stack = await start_devstack(**params)

    async def forget() -> None:
        # The stand-in records every request for tests; under load that list would only grow.
        while True:
            await asyncio.sleep(1.0)
            stack.recorder.clear()

    forgetting = asyncio.create_task(forget())
    try:
        yield {"url": stack.kagent_url, "embedding_url": stack.embedding_url}
    finally:
        forgetting.cancel()
        await stack.stop()


@asynccontextmanager
async def _kagent(params: dict[str, Any]) -> AsyncIterator[dict[str, str]]:
    from pathlib import Path

    from sidecar.dev.devstack.pg import start_pg
    from sidecar.dev.devstack.realkagent import start_real_kagent

    pg = await asyncio.to_thread(start_pg)
    try:
        kagent = await asyncio.to_thread(
            start_real_kagent, pg.create_database("kagent"), Path(params["workdir"]) / "kagent"
        )
        try:
            yield {"url": kagent.url}
        finally:
            kagent.stop()
    finally:
        pg.stop()


BUILDERS: dict[str, Builder] = {"standin": _standin, "kagent": _kagent, "bare": _bare, "memgov": _memgov}


async def _serve(kind: str, params: dict[str, Any], conn: Connection) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    async with BUILDERS[kind](params) as urls:
        loop.add_reader(conn.fileno(), stop.set)
        conn.send(urls)
        await stop.wait()
        loop.remove_reader(conn.fileno())


def _child(kind: str, params: dict[str, Any], cpus: Sequence[int], conn: Connection) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    # Request logs are part of memgov's real cost, so they are written, just not to our terminal.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        # Every server runs on the loop `memgov serve` uses (uvloop when installed): (b) and (c) alike.
        evloop.run(_serve(kind, params, conn))
    except BaseException as exc:
        conn.send({"error": type(exc).__name__})
        raise


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0  # exited between listing and reading
    return int(fields[11]) + int(fields[12])


def _tree(pid: int) -> list[int]:
    """``pid`` and every live descendant."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in glob.glob(f"/proc/{current}/task/*/children"):
            with contextlib.suppress(FileNotFoundError), open(task) as fh:
                todo += [int(child) for child in fh.read().split()]
    return found


class ServerProcess:
    """One benchmark server in its own process; ``urls["url"]`` is where load goes."""

    def __init__(self, kind: str, params: dict[str, Any], cpus: Sequence[int] = ()) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.kind = kind
        self._conn, child_conn = ctx.Pipe()
        # A daemonic process may not start processes of its own, which memgov's workers are.
        self._proc = ctx.Process(
            target=_child, args=(kind, params, list(cpus), child_conn), daemon=int(params.get("workers", 1)) == 1
        )
        self._proc.start()
        child_conn.close()
        if not self._conn.poll(_START_TIMEOUT_S):
            self.stop()
            raise RuntimeError(f"{kind} server did not start within {_START_TIMEOUT_S:.0f} s")
        try:
            self.urls: dict[str, str] = self._conn.recv()
        except EOFError:
            self.urls = {"error": "the process exited"}
        if "error" in self.urls:
            self.stop()
            raise RuntimeError(f"{kind} server failed to start: {self.urls['error']}")

    @property
    def pid(self) -> int:
        return int(self._proc.pid or 0)

    def cpu_seconds(self) -> float:
        """User plus system CPU time the process and its live children have used so far (all threads)."""
        return sum(_cpu_ticks(pid) for pid in _tree(self.pid)) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """Ask the server to stop; terminate it if it does not within ten seconds."""
        if self._proc.is_alive():
            try:
                self._conn.send("stop")
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(10)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)
        self._conn.close()
