"""The ``memgov fuzz`` command: registered with the others, refuses a run of no cases."""

from __future__ import annotations

from sidecar import cli


class TestCommand:
    def test_registered_with_its_options(self) -> None:
        """`memgov fuzz` parses its options into the run function."""
        args = cli.build_parser().parse_args(["fuzz", "--cases", "5", "--seed", "3", "--target", "control"])
        assert (args.cases, args.seed, args.target, args.no_shrink) == (5, 3, "control", False)

    def test_zero_cases_is_a_usage_error(self, capsys) -> None:
        """Asking for no cases exits 2 before any stack starts."""
        assert cli.main(["fuzz", "--cases", "0"]) == 2
        assert "at least 1" in capsys.readouterr().out

    def test_start_must_align_with_the_stacks(self, capsys) -> None:
        """A shard that would begin inside a stack's stretch is refused before any stack starts."""
        assert cli.main(["fuzz", "--cases", "10", "--start", "100"]) == 2
        assert "multiple" in capsys.readouterr().out


class TestShards:
    async def test_shards_draw_and_judge_exactly_the_long_runs_cases(self, monkeypatch) -> None:
        """Two shards from aligned starts answer, route for route and status for status, as one run of both."""
        from sidecar.dev.fuzz import runner
        from sidecar.dev.fuzz.cli import fuzz

        monkeypatch.setattr(runner, "STACK_CASES", 4)
        monkeypatch.setattr(runner, "BATCH", 2)
        quiet = {"shrink": False, "progress": lambda _: None}
        whole, _ = await fuzz(8, 5, "all", **quiet)
        first, _ = await fuzz(4, 5, "all", **quiet)
        second, _ = await fuzz(4, 5, "all", start=4, **quiet)
        assert whole.total == first.total + second.total == 8
        assert whole.cases == first.cases + second.cases
        assert whole.statuses == first.statuses + second.statuses
