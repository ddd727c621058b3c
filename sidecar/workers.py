"""``memgov serve --workers N``: N whole gateways on the same ports, under one supervisor.

Every worker is a complete gateway (data plane, control API, operations listener) on the shared
state store, exactly as N replicas would be: budgets, caps, fencing, erasure and replay are
decided in the database, never inside one process, so nothing changes for them. The kernel
spreads connections over the workers (SO_REUSEPORT on every listener).

The supervisor binds each port first (held, never listening, so a port of 0 is resolved once for
all workers), starts the workers, forwards SIGTERM, SIGINT and SIGHUP (pack reload) to them and,
when one worker dies, stops the others and exits non-zero so the orchestrator restarts the pod.
Metrics of all workers are merged: each writes its samples to a shared folder (prometheus_client's
multiprocess mode) and every ``/metrics`` answer reads them all.
"""

from __future__ import annotations

import asyncio
import ctypes
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from sidecar import evloop
from sidecar.logs import configure_logging, error_type, get_logger
from sidecar.settings import Settings, load_settings
from sidecar.state.types import MigrationFailed, SchemaMismatch

log = get_logger("workers")
_LISTENERS: tuple[Literal["data", "control", "ops"], ...] = ("data", "control", "ops")
_START_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 60.0
#: prometheus_client reads this at import: set before a worker imports anything.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_PR_SET_PDEATHSIG = 1


def _hold(host: str, port: int) -> socket.socket:
    """Bind (not listen) a port with SO_REUSEPORT: it stays ours, and a worker can bind it too."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # as asyncio's listeners: [::]:P beside 0.0.0.0:P
    sock.bind((host, port))
    return sock


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


#: What a worker runs: ``sidecar.server.serve`` (passed in, so this module does not import the server).
Serve = Callable[..., Coroutine[Any, Any, None]]


def _worker(serve: Serve, config: dict[str, Any], ready: Connection, supervisor: int, index: int) -> None:
    """A worker process: one gateway until SIGTERM (spawned fresh, so nothing is inherited but env).

    Only the first worker resumes unfinished erasures as it starts, as a single-process gateway
    does: a later one would otherwise take over an erasure the first is already running.
    """
    _die_with(supervisor)
    # Until the gateway installs its reload handler, a SIGHUP must not end the worker.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    settings = load_settings(**config)
    configure_logging(settings.log.level)
    try:
        evloop.run(serve(settings, started=lambda: ready.send(os.getpid()), resume=index == 0))
    except SchemaMismatch as exc:
        log.error(exc.event, **exc.fields())
        sys.exit(exc.EXIT_CODE)  # the supervisor ends with the same code
    except Exception as exc:  # noqa: BLE001 - SECURITY: a traceback can quote configuration or upstream text
        log.error("server.start_failed", error_type=error_type(exc))
        sys.exit(1)


def _die_with(supervisor: int) -> None:
    """SIGTERM this worker when the supervisor dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``)."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor:  # the supervisor died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class Workers:
    """Running workers and the URLs they share."""

    urls: dict[str, str]
    processes: list[BaseProcess]


class WorkerExited(RuntimeError):
    """A worker ended (or never started) while the gateway needed it; ``exitcode`` is its own, when known."""

    def __init__(self, message: str, exitcode: int | None = None) -> None:
        super().__init__(message)
        self.exitcode = exitcode


class StartAborted(RuntimeError):
    """SIGTERM/SIGINT arrived before every worker was up."""


@asynccontextmanager
async def running_workers(
    settings: Settings, count: int, serve: Serve, *, abort: asyncio.Event | None = None
) -> AsyncIterator[Workers]:
    """Start ``count`` workers running ``serve`` with ``settings`` on shared ports; stop them all on exit.

    Raises :class:`WorkerExited` when a worker ends before every worker is up (or does not come up
    within the start timeout) and :class:`StartAborted` when ``abort`` is set meanwhile; either
    way the workers already started are stopped first.
    """
    held = {name: [_hold(*a) for a in settings.listen.addresses(name)] for name in _LISTENERS}
    listen = {name: ",".join(_hostport(*sock.getsockname()[:2]) for sock in socks) for name, socks in held.items()}
    config = settings.model_dump(mode="json")
    config["listen"] = {**config["listen"], **listen, "workers": count}
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="memgov-metrics-") as metrics_dir:
        # Spawned workers inherit the environment; prometheus_client reads it as they import it.
        os.environ[MULTIPROC_ENV] = metrics_dir
        processes: list[BaseProcess] = []
        try:
            readiness: list[Connection] = []
            for index in range(count):  # all at once: only one start-up long do some serve and others not
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, args=(serve, config, child, os.getpid(), index), daemon=False)
                proc.start()
                child.close()
                processes.append(proc)
                readiness.append(parent)
            await _until_ready(processes, readiness, abort)
            log.info("workers.started", count=count)
            first: dict[str, str] = {name: value.split(",")[0] for name, value in listen.items()}
            shown = {name: "http://" + value.replace("0.0.0.0", "127.0.0.1", 1) for name, value in first.items()}
            yield Workers(shown, processes)
        finally:
            await asyncio.to_thread(_stop, processes)
            for socks in held.values():
                for sock in socks:
                    sock.close()


async def _until_ready(processes: list[BaseProcess], readiness: list[Connection], abort: asyncio.Event | None) -> None:
    """Wait for every worker's "serving" message, waking on each message, each exit and ``abort``.

    Nothing here blocks the loop: a worker that dies while another is still starting, or a SIGTERM
    to the supervisor, is acted on at once instead of after the start timeout.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _START_TIMEOUT_S
    waiting = list(readiness)
    while waiting:
        if abort is not None and abort.is_set():
            raise StartAborted("stopped during start-up")
        if exited := [proc.exitcode for proc in processes if proc.exitcode is not None]:
            raise WorkerExited("a worker exited during start-up", exited[0])
        for conn in [conn for conn in waiting if conn.poll(0)]:
            try:
                conn.recv()
            except EOFError:
                proc = processes[readiness.index(conn)]
                await asyncio.to_thread(proc.join, 5)
                raise WorkerExited("a worker exited during start-up", proc.exitcode) from None
            waiting.remove(conn)
        if not waiting:
            return
        woke = asyncio.Event()
        fds = [conn.fileno() for conn in waiting] + [proc.sentinel for proc in processes]
        for fd in fds:
            loop.add_reader(fd, woke.set)
        try:
            events = [woke] if abort is None else [woke, abort]
            if not await _any_of(events, timeout=deadline - loop.time()):
                raise WorkerExited("a worker did not start in time")
        finally:
            for fd in fds:
                loop.remove_reader(fd)


async def _any_of(events: list[asyncio.Event], timeout: float | None = None) -> bool:
    """Wait until one of ``events`` is set (True) or ``timeout`` passes (False)."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
    return bool(done)


def _stop(processes: list[BaseProcess]) -> None:
    """SIGTERM every live worker, give them all one shared grace period, then SIGKILL what is left."""
    for proc in processes:
        if proc.is_alive() and proc.pid is not None:
            with suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in processes:
        if proc.is_alive():
            proc.kill()
            proc.join()


async def supervise(settings: Settings, count: int, serve: Serve) -> int:
    """Run ``count`` workers until SIGTERM/SIGINT (0) or until one dies (1), start-up included."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    died = asyncio.Event()
    # Before any worker starts: a SIGTERM during start-up stops the workers already started.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # A reload asked for during start-up is passed on once every worker can take it.
    reload_asked = asyncio.Event()
    loop.add_signal_handler(signal.SIGHUP, reload_asked.set)
    try:
        async with running_workers(settings, count, serve, abort=stop) as workers:
            loop.add_signal_handler(signal.SIGHUP, lambda: _signal_all(workers.processes, signal.SIGHUP))
            if reload_asked.is_set():
                _signal_all(workers.processes, signal.SIGHUP)
            for proc in workers.processes:
                loop.add_reader(proc.sentinel, died.set)
            await _any_of([stop, died])
            for proc in workers.processes:
                loop.remove_reader(proc.sentinel)
            # A sentinel turns ready as the worker's files close, a moment before it can be reaped: wait for
            # the exit code of each that ended.
            ended = [proc for proc in workers.processes if proc.sentinel in wait_for([proc.sentinel], 0)]
            for proc in ended:
                await asyncio.to_thread(proc.join, 5)
            exited = [proc.exitcode for proc in ended]
    except StartAborted:
        return 0
    except WorkerExited as exc:
        log.error("workers.worker_exited", count=count, step="start")
        # A schema this release cannot run on, or a refused migration, ends the gateway with its own
        # code, as with one process.
        return exc.exitcode if exc.exitcode in (SchemaMismatch.EXIT_CODE, MigrationFailed.EXIT_CODE) else 1
    if died.is_set() and not stop.is_set():
        log.error("workers.worker_exited", count=count, step="serve")
        # The store connects after the listeners open: a schema this release cannot run on, or a refused
        # migration, ends a serving worker, and the gateway with the same code.
        codes = [code for code in (SchemaMismatch.EXIT_CODE, MigrationFailed.EXIT_CODE) if code in exited]
        return codes[0] if codes else 1
    return 0


def _signal_all(processes: list[BaseProcess], sig: int) -> None:
    for proc in processes:
        if proc.is_alive() and proc.pid is not None:
            with suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
