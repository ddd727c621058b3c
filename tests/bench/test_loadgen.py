"""The load generator: percentile math, request mixes, and what a run against a real server reports."""

from __future__ import annotations

import math

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sidecar.dev.bench.loadgen import (
    LoadJob,
    RequestSpec,
    closed_loop,
    open_loop,
    percentile,
    summarize,
    weighted_cycle,
)

THOUSAND = [float(v) for v in range(1, 1001)]


class TestPercentile:
    @pytest.mark.parametrize(
        ("values", "q", "expected"),
        [
            (THOUSAND, 50, 500.0),
            (THOUSAND, 99, 990.0),
            (THOUSAND, 99.9, 999.0),
            (THOUSAND, 100, 1000.0),
            ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
            ([1.0, 2.0, 3.0, 4.0], 75, 3.0),
            ([1.0, 2.0, 3.0, 4.0], 99, 4.0),
            ([7.0], 99.9, 7.0),
            ([0.5, 9.0], 50, 0.5),
        ],
    )
    def test_nearest_rank(self, values: list[float], q: float, expected: float) -> None:
        """A percentile is the smallest sample with at least q% of the samples at or below it."""
        assert percentile(values, q) == expected

    @pytest.mark.parametrize(("values", "q"), [([], 50), ([1.0], 0), ([1.0], 101)])
    def test_refuses_meaningless_questions(self, values: list[float], q: float) -> None:
        """No samples, or a percentile outside (0, 100], is an error rather than a made-up number."""
        with pytest.raises(ValueError):
            percentile(values, q)


class TestSummarize:
    def test_reports_milliseconds_and_rate(self) -> None:
        """A thousand latencies of 1..1000 ms over two seconds read as 500 rps, p50 500 ms, p99 990 ms."""
        result = summarize("python", [v / 1000 for v in reversed(THOUSAND)], 3, 2.0, 0.5)
        assert (result.requests, result.errors, result.rps) == (1000, 3, 500.0)
        assert (result.p50_ms, result.p99_ms, result.p999_ms, result.max_ms) == pytest.approx((500, 990, 999, 1000))

    @pytest.mark.parametrize(("cpu_s", "saturated"), [(0.5, False), (1.7, False), (1.8, True), (2.0, True)])
    def test_flags_a_busy_generator(self, cpu_s: float, saturated: bool) -> None:
        """A generator that used 90% or more of its core over the window says it may be the bottleneck."""
        assert summarize("python", [0.001], 0, 2.0, cpu_s).saturated is saturated

    @pytest.mark.parametrize(("lag", "late"), [(None, False), (1.0, False), (5.0, False), (5.1, True)])
    def test_flags_a_generator_behind_schedule(self, lag: float | None, late: bool) -> None:
        """An open-loop run whose p99 send lag exceeds 5 ms carries a note saying so."""
        assert bool(summarize("python", [0.001], 0, 1.0, 0.1, lag_p99_ms=lag).notes) is late

    def test_no_successes_has_no_latency(self) -> None:
        """A run where every request failed reports zero rate and no latency numbers."""
        result = summarize("python", [], 10, 1.0, 0.1)
        assert result.rps == 0 and math.isnan(result.p50_ms)


class TestMix:
    @pytest.mark.parametrize(
        ("weights", "expected"),
        [((1,), "a"), ((1, 1), "ab"), ((3, 1), "aaba"), ((2, 3), "babab"), ((1, 1, 2), "cabc")],
    )
    def test_weights_spread_over_the_cycle(self, weights: tuple[int, ...], expected: str) -> None:
        """Each request kind appears as often as its weight, spread out rather than bunched."""
        mix = [RequestSpec("abc"[i], "GET", "/", weight=w) for i, w in enumerate(weights)]
        assert "".join(s.name for s in weighted_cycle(mix)) == expected

    @pytest.mark.parametrize("mix", [[], [RequestSpec("a", "GET", "/", weight=0)]])
    def test_refuses_an_empty_mix(self, mix: list[RequestSpec]) -> None:
        """A mix with nothing to send is refused."""
        with pytest.raises(ValueError):
            weighted_cycle(mix)

    def test_job_survives_the_trip_to_the_generator_process(self) -> None:
        """Bodies, headers and weights arrive in the child process exactly as planned."""
        spec = RequestSpec("s", "POST", "/api/sessions", (("Content-Type", "application/json"),), b"\x00{}\xff", 3)
        job = LoadJob("http://127.0.0.1:1", (spec,), "open", 2.5, 0.5, 8, 250.0)
        assert LoadJob.from_json(job.to_json()) == job


SEEN = web.AppKey("seen", list[bytes])


async def _serve(status: int) -> TestServer:
    seen: list[bytes] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(await request.read())
        return web.json_response({"ok": True}, status=status)

    app = web.Application()
    app[SEEN] = seen
    app.router.add_route("*", "/{tail:.*}", handler)
    server = TestServer(app)
    await server.start_server()
    return server


class TestRuns:
    async def test_open_loop_sends_the_scheduled_number(self) -> None:
        """At 200 rps for 0.5 s after a 0.1 s warmup the server sees 120 requests and 100 are measured."""
        server = await _serve(200)
        try:
            job = LoadJob(
                str(server.make_url("")), (RequestSpec("p", "POST", "/x", body=b"{}"),), "open", 0.5, 0.1, 4, 200.0
            )
            result = await open_loop(job)
        finally:
            await server.close()
        assert len(server.app[SEEN]) == 120
        assert (result.requests, result.errors, result.rps) == (100, 0, 200.0)
        assert all(body == b"{}" for body in server.app[SEEN])

    @pytest.mark.parametrize("runner", [closed_loop, open_loop])
    async def test_failures_count_as_errors_not_latencies(self, runner) -> None:  # type: ignore[no-untyped-def]  # a fixture of the parametrized table
        """Non-2xx answers are counted as errors and leave the latency sample empty."""
        server = await _serve(503)
        try:
            job = LoadJob(str(server.make_url("")), (RequestSpec("h", "GET", "/health"),), "closed", 0.3, 0.0, 2, 50.0)
            result = await runner(job)
        finally:
            await server.close()
        assert result.requests == 0 and result.errors > 0
