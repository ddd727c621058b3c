"""The ``memgov fuzz`` command: registered with the others, refuses a run of no cases."""

from __future__ import annotations

from sidecar import cli


class TestCommand:
    def test_registered_with_its_options(self) -> None:
        """`memgov fuzz` parses its options into the run function."""
        args = cli.build_parser().parse_args(["fuzz", "--cases", "5", "--seed", "3", "--target", "control"])
        assert (args.cases, args.seed, args.target, args.no_shrink) == (5, 3, "control", False)

    def test_zero_cases_is_a_usage_error(self, capsys) -> None:  # noqa: ANN001 - pytest fixture
        """Asking for no cases exits 2 before any stack starts."""
        assert cli.main(["fuzz", "--cases", "0"]) == 2
        assert "at least 1" in capsys.readouterr().out
