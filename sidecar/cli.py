"""The ``memgov`` command line.

Each command lives beside the code it drives and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (``args -> exit code``). This file only lists them, in help order.
It is the one place that knows the dev tooling (``sidecar.dev``): its commands are registered
only where that package is installed (a checkout, not the production wheel or image), and it
gives ``memgov drill`` its in-process target there.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

import structlog

from sidecar.logs import configure_logging, error_type, get_logger

#: Modules that contribute subcommands, in the order ``memgov --help`` shows them.
COMMAND_MODULES: tuple[str, ...] = (
    "sidecar.server",
    "sidecar.policy.cli",
    "sidecar.state.cli",
    "sidecar.dev.bench.cli",
    "sidecar.dev.devstack.cli",
    "sidecar.dev.demo",
    "sidecar.control.cli",
    "sidecar.drill.cli",
    "sidecar.boundary.doctor",
    "sidecar.dev.fuzz.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memgov", description="Governed memory gateway for kagent.")
    parser.add_argument("--config", help="YAML configuration file (also MEMGOV_CONFIG).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    dev = importlib.util.find_spec("sidecar.dev") is not None
    for name in COMMAND_MODULES:
        if dev or not name.startswith("sidecar.dev."):
            importlib.import_module(name).register(sub)
    if dev:
        from sidecar.dev.drill_devstack import devstack_target

        sub.choices["drill"].set_defaults(in_process=devstack_target)
    # `memgov serve --config X` reads as naturally as `memgov --config X serve`; accept both.
    for command in sub.choices.values():
        command.add_argument("--config", dest="config_after", default=None, help=argparse.SUPPRESS)
    return parser


#: Exit code of a command that failed in a way it does not report itself (never a traceback).
EXIT_FAILED = 70
#: Exit code after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = getattr(args, "config_after", None) or args.config
    if config:
        os.environ["MEMGOV_CONFIG"] = config
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - SECURITY: a traceback can quote configuration, requests or upstream text
        if not structlog.is_configured():
            configure_logging()
        get_logger("cli").error("command.failed", error_type=error_type(exc))
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
