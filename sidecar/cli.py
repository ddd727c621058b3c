"""The ``memgov`` command line.

Each command lives beside the code it drives and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (``args -> exit code``). This file only lists them, in help order.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

#: Modules that contribute subcommands, in the order ``memgov --help`` shows them.
COMMAND_MODULES: tuple[str, ...] = (
    "sidecar.server",
    "sidecar.policy.cli",
    "sidecar.state.cli",
    "sidecar.bench.cli",
    "sidecar.devstack.cli",
    "sidecar.demo",
    "sidecar.control.cli",
    "sidecar.drill.cli",
    "sidecar.fuzz.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memgov", description="Governed memory gateway for kagent.")
    parser.add_argument("--config", help="YAML configuration file (also MEMGOV_CONFIG).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    # `memgov serve --config X` reads as naturally as `memgov --config X serve`; accept both.
    for command in sub.choices.values():
        command.add_argument("--config", dest="config_after", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = getattr(args, "config_after", None) or args.config
    if config:
        os.environ["MEMGOV_CONFIG"] = config
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
