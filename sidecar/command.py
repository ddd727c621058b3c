"""How a ``memgov`` subcommand presents itself: its one-line help, and its module's docstring as the
description ``--help`` prints below the usage, line breaks kept and inline-literal marks dropped."""

from __future__ import annotations

import argparse


def add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_line: str, doc: str | None
) -> argparse.ArgumentParser:
    """Add the subcommand ``name`` to ``sub``, described by ``doc`` (the command module's ``__doc__``)."""
    return sub.add_parser(
        name,
        help=help_line,
        description=(doc or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
