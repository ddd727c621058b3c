"""Real gateway processes (``memgov serve --config``) and a gate in front of the stand-in that can hold requests.

The crash and race tests need what an in-process gateway cannot give: a process that is
SIGKILLed mid-erasure and restarted, and several processes sharing one PostgreSQL state store.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from tests.support.pg import free_port
from tests.support.wait import until

Hold = Callable[[web.Request], bool]


@dataclass
class Gate:
    """A relay in front of the kagent stand-in; requests matching ``hold`` wait until ``release``."""

    upstream: str
    hold: Hold | None = None
    fail: Hold | None = None
    pretend: Hold | None = None  # answered 200 as kagent's delete would, without forwarding
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    seen: list[tuple[str, str]] = field(default_factory=list)  # (method, path with query)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path_qs))
        # Read first, as kagent would: a held request still commits after its client has given up.
        body = await request.read()
        if self.hold is not None and self.hold(request):
            self.arrived.set()
            await self.release.wait()
        if self.fail is not None and self.fail(request):
            return web.json_response({"error": "failed to delete memory: unavailable"}, status=500)
        if self.pretend is not None and self.pretend(request):
            return web.json_response({"status": "deleted"})
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with (
            aiohttp.ClientSession() as session,
            session.request(request.method, self.upstream + request.path_qs, data=body, headers=headers) as resp,
        ):
            return web.Response(
                status=resp.status, body=await resp.read(), content_type=resp.content_type or "application/json"
            )


@asynccontextmanager
async def gate(upstream: str) -> AsyncIterator[Gate]:
    """Serve a gate on a free loopback port."""
    g = Gate(upstream)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", g.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    g.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield g
    finally:
        g.release.set()
        await runner.cleanup()


@dataclass
class GatewayProcess:
    """One ``memgov serve`` process with fixed loopback ports; restartable after a kill."""

    workdir: Path
    settings: dict[str, Any]
    proc: asyncio.subprocess.Process | None = None
    #: Whether ``start`` waits for the state store too, not only for readiness.
    wait_for_store: bool = True

    @property
    def data_url(self) -> str:
        return "http://" + self.settings["listen"]["data"]

    @property
    def control_url(self) -> str:
        return "http://" + self.settings["listen"]["control"]

    @property
    def ops_url(self) -> str:
        return "http://" + self.settings["listen"]["ops"]

    async def start(self) -> None:
        """Start and wait until it is ready and, unless ``wait_for_store`` is False, until every worker's
        state store answers (the listeners open before it connects; memory is degraded until then).

        A free port picked before the process binds it can be taken meanwhile by another process on the
        machine: a start that ends on EADDRINUSE ("address already in use") is retried on fresh ports, and any other
        early exit fails with the tail of the gateway's own (content-free) log.
        """
        for _ in range(3):
            if await self._start_once():
                return
            self.settings["listen"].update({name: f"127.0.0.1:{free_port()}" for name in ("data", "control", "ops")})
        raise AssertionError("the gateway found no free ports three times")

    async def _start_once(self) -> bool:
        config = self.workdir / "memgov.yaml"
        config.write_text(yaml.safe_dump(self.settings))
        log = (self.workdir / "gateway.log").open("ab")
        since = log.tell()  # a restart appends: only this run's lines count
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sidecar",
            "serve",
            "--config",
            str(config),
            cwd=self.workdir,
            stdout=log,
            stderr=log,
            stdin=asyncio.subprocess.DEVNULL,
        )
        log.close()

        workers = int(self.settings["listen"].get("workers", 1))

        async def ready() -> bool:
            assert self.proc is not None
            if self.proc.returncode is not None:
                return True
            if workers > 1 and b'"workers.started"' not in (self.workdir / "gateway.log").read_bytes()[since:]:
                # /readyz answers from whichever worker the kernel picks: one being up says nothing
                # of the others, and a test that stops the store while one still starts ends them all.
                return False
            try:
                async with aiohttp.ClientSession() as s:
                    async with s.get(self.ops_url + "/readyz") as resp:
                        if resp.status != 200:
                            return False
                        state = (await resp.json())["checks"]["state"]
                    if not self.wait_for_store:
                        return True
                    # The gauge is merged over the workers: 1 once every one of them has its store.
                    async with s.get(self.ops_url + "/metrics") as resp:
                        up = "memgov_state_available 1.0" in await resp.text()
                    return bool(state["available"]) and up
            except aiohttp.ClientError:
                return False

        await until(ready, timeout_s=60)
        if self.proc.returncode is None:
            return True
        tail = (self.workdir / "gateway.log").read_text(errors="replace")[-2000:]
        if '"EADDRINUSE"' in tail:
            return False
        raise AssertionError(f"the gateway exited ({self.proc.returncode}):\n{tail}")

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crashed pod."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(15):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.send_signal(signal.SIGKILL)
                await self.proc.wait()


@asynccontextmanager
async def gateway_process(
    workdir: Path, settings: dict[str, Any], *, wait_for_store: bool = True
) -> AsyncIterator[GatewayProcess]:
    """A started gateway process, stopped (or already killed) at the end."""
    workdir.mkdir(parents=True, exist_ok=True)
    gp = GatewayProcess(workdir, settings, wait_for_store=wait_for_store)
    await gp.start()
    try:
        yield gp
    finally:
        await gp.stop()
