"""``memgov-cvc5``: the PyPI cvc5 build as an interactive SMT-LIB solver on stdin/stdout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.policy.smt_shim import commands

SHIM = Path(sys.executable).with_name("memgov-cvc5")


class TestCommands:
    @pytest.mark.parametrize(
        ("chunks", "expected"),
        [
            (["(check-sat)\n"], ["(check-sat)"]),
            (["(assert\n", " (> x 3)) ; (not a command\n(check-sat)"], ["(assert\n (> x 3))", "(check-sat)"]),
            (
                ['(echo "a ) b")(declare-const |odd ) name| Int)'],
                ['(echo "a ) b")', "(declare-const |odd ) name| Int)"],
            ),
        ],
    )
    def test_complete_commands_only(self, chunks: list[str], expected: list[str]) -> None:
        """Commands end at their closing parenthesis; strings, quoted symbols and comments do not count."""
        assert list(commands(iter(chunks))) == expected


class TestShim:
    def test_answers_each_check_as_it_is_read_and_resets(self) -> None:
        """sat with a model, unsat after a contradiction, and a clean slate after (reset)."""
        script = (
            "(set-option :produce-models true)\n(set-logic ALL)\n(declare-const x Int)\n(assert (> x 3))\n"
            "(check-sat)\n(get-model)\n(assert (< x 2))\n(check-sat)\n"
            "(reset)\n(set-logic ALL)\n(declare-const x Int)\n(check-sat)\n"
        )
        proc = subprocess.run(
            [str(SHIM), "--lang", "smt", "--tlimit=60000"], input=script, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0] == "sat"
        assert lines[1:4] == ["(", "(define-fun x () Int 4)", ")"]
        assert lines[4:] == ["unsat", "sat"]

    def test_parse_error_is_answered_in_the_solver_shape(self) -> None:
        """A command cvc5 cannot parse gets one (error "Parse Error: ...") line and exit 1."""
        proc = subprocess.run(
            [str(SHIM), "--lang", "smt"], input="(assert (> y 3))\n", capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 1
        assert proc.stdout.startswith('(error "Parse Error: ')

    def test_unknown_option_is_refused(self) -> None:
        """Only the options symcc passes are accepted."""
        proc = subprocess.run([str(SHIM), "--incremental"], input="", capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1
        assert "unknown argument '--incremental'" in proc.stderr
