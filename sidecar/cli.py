"""The ``memgov`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Callable[[argparse.Namespace], int]]]:
    parser = argparse.ArgumentParser(prog="memgov", description="Governed memory gateway for kagent.")
    parser.add_argument("--config", help="YAML configuration file (also MEMGOV_CONFIG).")
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {}
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
    args = parser.parse_args(argv)
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
