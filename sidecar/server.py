"""``memgov serve``: assemble the data plane, control API and operations listeners and run them."""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from aiohttp import web

from sidecar import connections, evloop, tracing
from sidecar.clock import Clock
from sidecar.listener import ContentFreeRunner
from sidecar.logs import configure_logging, error_type, get_logger
from sidecar.ops import Readiness, create_ops_app
from sidecar.root import Parts, control_plane, data_app, open_parts
from sidecar.sampler import sampling
from sidecar.secretfile import SecretError
from sidecar.settings import Settings, SettingsError, load_settings
from sidecar.state.types import MigrationFailed, SchemaMismatch

log = get_logger("server")

#: Exit codes of `memgov serve` (stable; the orchestrator and operators read them).
EXIT_CONFIG: Final = 2  # the configuration is invalid
EXIT_SCHEMA: Final = SchemaMismatch.EXIT_CODE  # the state schema is not one this release runs on
EXIT_MIGRATION: Final = MigrationFailed.EXIT_CODE  # the state store refused a migration statement
EXIT_START: Final = 1  # anything else that stopped the start-up (a policy pack that does not load, …)


@dataclass
class Gateway:
    """A running gateway: its runners and the URLs it listens on."""

    settings: Settings
    runners: list[web.AppRunner] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)
    parts: Parts | None = None
    gates: dict[connections.Listener, connections.Gate] = field(default_factory=dict)

    @property
    def data_url(self) -> str:
        return self.urls["data"]

    @property
    def ops_url(self) -> str:
        return self.urls["ops"]

    @property
    def control_url(self) -> str:
        return self.urls["control"]


async def _start(app: web.Application, name: Literal["data", "control", "ops"], gw: Gateway) -> None:
    """Serve ``app`` on every address of one listener (``0.0.0.0:8080,[::]:8080`` binds both families)."""
    # auto_decompress=False: a compressed body is relayed exactly as sent (passthrough byte for
    # byte) and never parsed as something other than what arrived on a governed route.
    # keepalive_timeout: aiohttp's keep-alive timer is the request-head deadline (sidecar/connections.py).
    runner = ContentFreeRunner(
        app,
        access_log=None,
        handle_signals=False,
        shutdown_timeout=gw.settings.listen.shutdown_timeout_s,
        auto_decompress=False,
        keepalive_timeout=gw.settings.listen.header_timeout_s,
        gate=gw.gates[name],
        max_head_bytes=gw.settings.listen.max_header_bytes,
    )
    await runner.setup()
    gw.runners.append(runner)
    for host, port in gw.settings.listen.addresses(name):
        # Workers of `memgov serve --workers N` bind the same ports; the kernel spreads connections.
        # asyncio sets IPV6_V6ONLY on an IPv6 socket, so [::]:P and 0.0.0.0:P bind side by side.
        site = web.TCPSite(
            runner, host, port, backlog=1024, reuse_address=True, reuse_port=gw.settings.listen.workers > 1 or None
        )
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]  # the bound port when port=0
        bound_host, bound_port = sock.getsockname()[:2]
        if name not in gw.urls:
            shown = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(bound_host, bound_host)
            shown = f"[{shown}]" if ":" in shown else shown
            gw.urls[name] = f"http://{shown}:{bound_port}"
        log.info("listener.started", listener=name, port=int(bound_port))


@asynccontextmanager
async def running_gateway(
    settings: Settings, *, clock: Clock | None = None, resume: bool = True
) -> AsyncIterator[Gateway]:
    """Start every listener of a gateway (ports may be 0) and stop them on exit.

    The listeners open before the state store answers: until it does, memory is degraded exactly as
    in an outage (invocations go to the memory-disabled variant, searches answer ``[]``, saves
    ``503``), ``/readyz`` is ready with the store ``available: false`` and metrics are exported; once
    it connects, unfinished erasures resume and the sweepers start (``root.control_plane``). A caller
    that needs memory at once awaits ``gw.parts.store.wait_connected()``.

    ``resume`` False leaves unfinished erasures to another worker of the same gateway, which
    resumes them as it starts (the sweepers of every worker still pick up stalled ones).
    """
    gw = Gateway(settings, gates=connections.gates(settings))
    readiness = Readiness()
    async with (
        open_parts(settings, readiness, clock=clock, wait_for_store=False) as parts,
        control_plane(parts, resume=resume) as control,
        sampling(parts.store, parts.clock),
    ):
        gw.parts = parts
        data = data_app(parts)
        try:
            await _start(data, "data", gw)
            await _start(control, "control", gw)
            await _start(create_ops_app(readiness), "ops", gw)
            yield gw
        finally:
            for runner in reversed(gw.runners):
                await runner.cleanup()


async def _until_stopped(stop: asyncio.Event, connected: Coroutine[Any, Any, None]) -> None:
    """Return once ``stop`` is set; raise what ``connected`` raises first (it returns once the store is up)."""
    stopping = asyncio.ensure_future(stop.wait())
    connecting = asyncio.ensure_future(connected)
    try:
        done, _ = await asyncio.wait({stopping, connecting}, return_when=asyncio.FIRST_COMPLETED)
        if connecting in done:
            connecting.result()
            await stopping
    finally:
        for waiting in (stopping, connecting):
            waiting.cancel()
        await asyncio.gather(stopping, connecting, return_exceptions=True)


async def serve(settings: Settings, started: Callable[[], object] | None = None, *, resume: bool = True) -> None:
    """Run until SIGINT/SIGTERM; ``started`` is called once every listener is open.

    A signal that arrives while the gateway is still starting (before its listeners open: the policy
    pack loading, OPA not answering) cancels the start-up, whose clean-up then runs as on any error:
    the orchestrator's SIGTERM is never held up by a start-up that may not finish. The state store
    does not hold the start-up (``running_gateway``); one this release can never run on (a newer
    schema) ends ``serve`` with SchemaMismatch once it is found.
    """
    stop, serving = asyncio.Event(), asyncio.Event()
    tracing.configure(settings.tracing)

    async def run() -> None:
        async with running_gateway(settings, resume=resume) as gw:
            assert gw.parts is not None
            gw.parts.policy.install_sighup()  # `kill -HUP` reloads the policy pack
            serving.set()
            if started is not None:
                started()
            # Then a graceful shutdown, requests in flight included; a store that can never be used
            # (a schema this release does not run on) ends it too, with its exception.
            await _until_stopped(stop, gw.parts.store.wait_connected())

    gateway = asyncio.ensure_future(run())

    def on_signal() -> None:
        stop.set()
        if not serving.is_set():
            gateway.cancel()  # still starting: nothing is served yet, so nothing to drain

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        await gateway
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if serving.is_set() or (current is not None and current.cancelling()):
            raise  # not a start-up the signal cancelled
        log.info("server.start_aborted")
    finally:
        if not gateway.done():
            gateway.cancel()
            with suppress(asyncio.CancelledError):
                await gateway
        await asyncio.to_thread(tracing.shutdown)  # flushes spans still queued: a blocking export
    log.info("server.stopped")


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"memgov: {exc}")
        return EXIT_CONFIG
    configure_logging(settings.log.level)
    connections.raise_fd_limit()  # before the workers start: they inherit it
    workers = args.workers or settings.listen.workers
    try:
        if workers > 1:
            from sidecar.workers import supervise

            return evloop.run(supervise(settings, workers, serve))
        evloop.run(serve(settings))
    except SchemaMismatch as exc:
        # A rolled-back release on a schema a newer one migrated (or an unmigrated one with
        # auto_migrate off, or a migration the store refused): refuse before serving anything, and
        # say which versions (and, for a refused migration, which one and the backend's error code).
        log.error(exc.event, **exc.fields())
        return exc.EXIT_CODE
    except (SettingsError, SecretError) as exc:
        log.error("server.start_failed", error_type=type(exc).__name__)
        return EXIT_CONFIG
    except OSError as exc:
        # A port already taken, an address this host does not have: named by its errno.
        log.error("server.start_failed", error_type=error_type(exc))
        return EXIT_START
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="Run the gateway (data plane, control API, operations).")
    p.add_argument(
        "--workers",
        type=int,
        choices=range(1, 65),
        metavar="N",
        default=None,
        help="Gateway processes on the same ports (default: listen.workers, 1).",
    )
    p.set_defaults(func=_cmd_serve)
