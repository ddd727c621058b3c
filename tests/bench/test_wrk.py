"""When wrk drives a run, and how its summary line is read."""

from __future__ import annotations

import pytest

from sidecar.dev.bench.loadgen import LoadJob, Mode, RequestSpec
from sidecar.dev.bench.wrk import parse_done_line, wrk_fits

GET = RequestSpec("health", "GET", "/health")
POST = RequestSpec("s", "POST", "/api/sessions", body=b"{}")


class TestWrk:
    @pytest.mark.parametrize(
        ("mode", "mix", "fits"),
        [
            ("closed", (GET,), True),
            ("open", (GET,), False),
            ("closed", (POST,), False),
            ("closed", (GET, GET), False),
        ],
    )
    def test_drives_only_closed_loop_single_get(self, mode: Mode, mix: tuple[RequestSpec, ...], fits: bool) -> None:
        """wrk takes the closed-loop single-GET case; everything else goes to the Python generator."""
        assert wrk_fits(LoadJob("http://127.0.0.1:1", mix, mode, 1.0, 0.0, 4, 10.0)) is fits

    def test_reads_the_summary_line(self) -> None:
        """Microseconds from wrk's done() hook become milliseconds and seconds."""
        out = "Running 2s test @ http://x\n  1 threads\nmemgov-bench 18088 2013017 3 3086 9603 14333 14977\n"
        assert parse_done_line(out) == (18088, 2.013017, 3, [3.086, 9.603, 14.333, 14.977])

    def test_missing_summary_is_an_error(self) -> None:
        """Output without the summary line is refused instead of read as zero."""
        with pytest.raises(RuntimeError):
            parse_done_line("unable to connect\n")
