"""``memgov devstack``: run the kagent and embedding stand-ins until interrupted.

Serves a kagent controller stand-in (v0.9.11 or v0.10.0-rc3) and an OpenAI-compatible embedding
stand-in.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from sidecar.command import add_command
from sidecar.dev.devstack.releases import DEFAULT, RELEASES, release
from sidecar.dev.devstack.runtime import RuntimeConfig
from sidecar.dev.devstack.stack import start_devstack
from sidecar.logs import configure_logging, get_logger


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``devstack`` command."""
    parser = add_command(subparsers, "devstack", "Run the kagent and embedding stand-ins (tests, demo).", __doc__)
    parser.add_argument(
        "--kagent-version",
        choices=sorted(RELEASES),
        default=DEFAULT.name,
        help=f"The kagent release the stand-in behaves as (default {DEFAULT.name}: {DEFAULT.tag}).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="Listen address (default 127.0.0.1).")
    parser.add_argument("--kagent-port", type=int, default=8083, help="kagent stand-in port (default 8083).")
    parser.add_argument("--embedding-port", type=int, default=8090, help="Embedding stand-in port (default 8090).")
    parser.add_argument(
        "--store", default=None, help="Memory table: sqlite:///path, sqlite:// (in memory, default) or postgresql://..."
    )
    parser.add_argument(
        "--agent",
        action="append",
        dest="agents",
        metavar="NS/NAME",
        help="Only these A2A agents exist (repeatable; default: every name answers).",
    )
    parser.add_argument("--runtime-memory-url", help="Where simulated agents send memory calls (kagent or gateway).")
    parser.add_argument("--runtime-embedding-url", help="Embedding base URL simulated agents call (.../v1).")
    parser.add_argument(
        "--runtime-agent",
        action="append",
        default=[],
        metavar="NS/NAME",
        help="Agent with memory enabled in the simulated runtime (repeatable).",
    )
    parser.add_argument("--stream-delay", type=float, default=0.05, help="Seconds between A2A stream events.")
    parser.set_defaults(func=run)


def _runtime(args: argparse.Namespace) -> RuntimeConfig | None:
    if not args.runtime_agent:
        return None
    if not args.runtime_memory_url or not args.runtime_embedding_url:
        raise SystemExit("--runtime-agent needs --runtime-memory-url and --runtime-embedding-url")
    return RuntimeConfig(args.runtime_memory_url, args.runtime_embedding_url, frozenset(args.runtime_agent))


async def _serve(args: argparse.Namespace) -> None:
    stack = await start_devstack(
        store_url=args.store,
        host=args.host,
        kagent_port=args.kagent_port,
        embedding_port=args.embedding_port,
        agents=args.agents,
        runtime=_runtime(args),
        stream_delay_s=args.stream_delay,
        release=release(args.kagent_version),
    )
    log = get_logger("devstack")
    log.info("devstack.started", listener="kagent", port=int(stack.kagent_url.rsplit(":", 1)[1]))
    print(f"kagent {release(args.kagent_version).tag} stand-in:  {stack.kagent_url}", flush=True)
    print(f"embedding stand-in:       {stack.embedding_url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await stack.stop()
        log.info("devstack.stopped")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM."""
    configure_logging()
    asyncio.run(_serve(args))
    return 0
