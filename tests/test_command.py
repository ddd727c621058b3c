"""Every ``memgov`` command module's docstring is what ``memgov COMMAND --help`` describes it with."""

from __future__ import annotations

import argparse
import importlib

import pytest

from sidecar.cli import build_parser

#: Commands whose module docstring is their --help description, with that module.
DOCUMENTED = {
    "scope": "sidecar.control.cli",
    "drill": "sidecar.drill.cli",
    "doctor": "sidecar.boundary.doctor",
    "devstack": "sidecar.dev.devstack.cli",
    "fuzz": "sidecar.dev.fuzz.cli",
}


def _subcommand(name: str) -> argparse.ArgumentParser:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parser: argparse.ArgumentParser = sub.choices[name]
    return parser


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_help_prints_the_command_modules_docstring_as_written(name: str) -> None:
    doc = importlib.import_module(DOCUMENTED[name]).__doc__
    assert doc and doc.startswith(f"``memgov {name}"), "the docstring names its command first"
    text = _subcommand(name).format_help()
    # Line breaks kept (a raw description) and the inline-literal marks dropped, nothing else changed.
    assert doc.replace("``", "").strip() in text
    assert "``" not in text
