"""Every client connection is bounded: caps per peer address and per listener at accept, a deadline
for each request head, and a descriptor limit raised to the hard one (sidecar/connections.py)."""

from __future__ import annotations

import asyncio
import json
import resource
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp import web
from prometheus_client import REGISTRY

from sidecar.connections import (
    LISTENERS,
    OWN_FILES,
    Caps,
    Closed,
    Gate,
    configured,
    fit,
    gates,
    peer_address,
    raise_fd_limit,
    refusal,
)
from sidecar.listener import ContentFreeRunner
from tests.support.gateway import gateway, gateway_settings
from tests.support.wait import until

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
GET = b"GET / HTTP/1.1\r\nHost: memgov\r\n\r\n"
PARTIAL = b"GET / HTTP/1.1\r\nHost: memgov\r\nX-Unfinished: "


Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Runs a test's connections on asyncio's loop, and on uvloop's, which `memgov serve` uses."""

    def on_loop(scenario: Coroutine[Any, Any, None]) -> None:
        factory = asyncio.new_event_loop if request.param == "asyncio" else uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(scenario)

    return on_loop


def closed(listener: str, reason: Closed) -> float:
    return REGISTRY.get_sample_value("memgov_connections_closed_total", {"listener": listener, "reason": reason}) or 0.0


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query["s"]))  # a handler that outlasts the head deadline
    return web.Response(text="slow")


@asynccontextmanager
async def listening(
    caps: Caps, header_timeout_s: float = 60.0, max_head_bytes: int = 65536
) -> AsyncIterator[tuple[Gate, int]]:
    """memgov's own runner around a tiny app on a loopback port, under one gate (listener ``data``)."""
    app = web.Application()
    app.router.add_get("/", _ok)
    app.router.add_get("/slow", _slow)
    gate = Gate("data", caps)
    runner = ContentFreeRunner(
        app, access_log=None, keepalive_timeout=header_timeout_s, gate=gate, max_head_bytes=max_head_bytes
    )
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield gate, runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def connect(port: int, source: str = "127.0.0.1") -> Streams:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def rest(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection."""
    try:
        return await reader.read()
    except ConnectionResetError:
        return b""


async def opened(gate: Gate, count: int) -> None:
    async def reached() -> bool:
        return gate.open == count

    await until(reached)


class TestPeerAddress:
    @pytest.mark.parametrize(
        ("peername", "address"),
        [
            (("10.0.0.7", 40000), "10.0.0.7"),
            (("2001:db8::1", 40000, 0, 0), "2001:db8::1"),
            (("::ffff:10.0.0.7", 40000, 0, 0), "10.0.0.7"),
            (("::ffff:abcd", 40000, 0, 0), "::ffff:abcd"),
            (None, ""),
            ("/run/memgov.sock", ""),
        ],
    )
    def test_connections_count_under_the_tcp_peer(self, peername: object, address: str) -> None:
        """The TCP peer's host is the key; an IPv4-mapped IPv6 peer counts as its IPv4 address."""
        assert peer_address(peername) == address


class TestGate:
    def test_the_address_cap_answers_before_the_listener_cap(self) -> None:
        """A full listener refuses a new address with total, and the flooding address with per_address."""
        gate = Gate("control", Caps(total=3, per_address=2))
        assert [gate.admit(a) for a in ("a", "a", "b")] == [None, None, None]
        assert (gate.admit("c"), gate.admit("a"), gate.open) == (Closed.TOTAL, Closed.PER_ADDRESS, 3)

    def test_a_closed_connection_frees_its_place(self) -> None:
        """After release, the same address is admitted again, and the count returns to what it was."""
        gate = Gate("control", Caps(total=2, per_address=1))
        assert gate.admit("a") is None and gate.admit("a") is Closed.PER_ADDRESS
        gate.release("a")
        assert (gate.admit("a"), gate.open) == (None, 1)


class TestFit:
    @pytest.mark.parametrize(
        ("room", "expected"),
        [
            (10_000, {"data": (4096, 256), "control": (256, 32), "ops": (64, 16)}),
            (4416, {"data": (4096, 256), "control": (256, 32), "ops": (64, 16)}),
            (438, {"data": (352, 256), "control": (22, 22), "ops": (64, 16)}),
            (100, {"data": (47, 47), "control": (2, 2), "ops": (50, 16)}),
            (0, {"data": (1, 1), "control": (1, 1), "ops": (1, 1)}),
        ],
    )
    def test_caps_shrink_to_the_descriptors_there_are(self, room: int, expected: dict[str, tuple[int, int]]) -> None:
        """Caps that do not fit are reduced: ops keeps its own first, data and control share the rest."""
        caps = {"data": Caps(4096, 256), "control": Caps(256, 32), "ops": Caps(64, 16)}
        fitted = fit(caps, room)  # type: ignore[arg-type]
        assert {name: (c.total, c.per_address) for name, c in fitted.items()} == expected

    def test_caps_are_fitted_under_the_process_limit(self, fd_limit: Any) -> None:
        """With a soft limit of 1024, a gateway's gates hold what fits beside its pools and own files."""
        fd_limit(1024)
        fitted = gates(gateway_settings("http://127.0.0.1:9"))
        assert sum(g.caps.total for g in fitted.values()) <= 1024 - (256 + 64 + 10) - OWN_FILES
        assert fitted["ops"].caps == Caps(64, 16)


@pytest.fixture
def fd_limit() -> Iterator[Any]:
    """Set this process's soft descriptor limit for one test; the old one is back afterwards."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)

    def set_soft(soft: int) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, before[1]))

    yield set_soft
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


class TestFdLimit:
    def test_the_soft_limit_is_raised_to_the_hard_one(self, fd_limit: Any) -> None:
        """A soft limit below the hard one (1024 under containerd's default) is raised to the hard limit."""
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        fd_limit(min(1024, hard - 1))
        assert raise_fd_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)


class TestRefusal:
    @pytest.mark.parametrize(
        ("reason", "status", "code"),
        [
            (Closed.PER_ADDRESS, 429, "concurrency_limited"),
            (Closed.TOTAL, 503, "concurrency_limited"),
            (Closed.HEADER_TOO_LARGE, 431, "bad_request"),
        ],
    )
    def test_the_answer_is_the_content_free_error(self, reason: Closed, status: int, code: str) -> None:
        """A refused connection gets a status, Connection: close and the one error body, with a fresh id."""
        head, _, body = refusal(reason).partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0].startswith(f"HTTP/1.1 {status} ") and "Connection: close" in lines
        assert f"Content-Length: {len(body)}" in lines
        answer = json.loads(body)
        assert sorted(answer) == ["decision_id", "error"] and answer["error"] == code
        assert json.loads(refusal(reason).partition(b"\r\n\r\n")[2])["decision_id"] != answer["decision_id"]


class TestCapsAtAccept:
    @pytest.mark.parametrize(
        ("caps", "sources", "answers"),
        [
            (Caps(total=8, per_address=2), ["127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2"], [200, 200, 429, 200]),
            (
                Caps(total=3, per_address=2),
                ["127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.1"],
                [200, 200, 200, 503, 429],
            ),
        ],
    )
    def test_over_a_cap_a_connection_is_answered_and_closed(
        self, caps: Caps, sources: list[str], answers: list[int], run: Run
    ) -> None:
        """Admitted connections are served and stay open; one over a cap gets 429 or 503, counted by reason."""

        async def scenario() -> None:
            before = {reason: closed("data", reason) for reason in (Closed.PER_ADDRESS, Closed.TOTAL)}
            seen: list[int] = []
            async with listening(caps) as (gate, port):
                held: list[Streams] = []
                for source in sources:
                    reader, writer = await connect(port, source)
                    writer.write(GET)
                    status_line = await reader.readline()
                    seen.append(int(status_line.split()[1]))
                    if seen[-1] == 200:
                        held.append((reader, writer))
                        await opened(gate, len(held))
                    else:
                        assert b"concurrency_limited" in await rest(reader)  # and then closed
                assert gate.open == len(held)
            assert seen == answers
            assert closed("data", Closed.PER_ADDRESS) - before[Closed.PER_ADDRESS] == answers.count(429)
            assert closed("data", Closed.TOTAL) - before[Closed.TOTAL] == answers.count(503)

        run(scenario())

    def test_a_refused_connection_is_never_read(self, run: Run) -> None:
        """Over the cap, even an unparsable request gets the fixed answer: nothing of it is parsed."""

        async def scenario() -> None:
            async with listening(Caps(total=1, per_address=1)) as (gate, port):
                _held = await connect(port)
                await opened(gate, 1)
                reader, writer = await connect(port)
                writer.write(b"\x00\x01 not http at all\r\n\r\n")
                assert (await rest(reader)).startswith(b"HTTP/1.1 429 ")

        run(scenario())

    def test_a_closed_connection_gives_its_place_back(self, run: Run) -> None:
        """Once a held connection closes, its address may open another one."""

        async def scenario() -> None:
            async with listening(Caps(total=8, per_address=1)) as (gate, port):
                _, writer = await connect(port)
                await opened(gate, 1)
                writer.close()
                await opened(gate, 0)
                reader, writer = await connect(port)
                writer.write(GET)
                assert (await reader.readline()).startswith(b"HTTP/1.1 200 ")

        run(scenario())


class TestHeadDeadline:
    def test_a_head_not_complete_in_time_is_closed(self, run: Run) -> None:
        """A connection whose request head is unfinished at the deadline is closed unanswered (header_timeout)."""

        async def scenario() -> None:
            before = closed("data", Closed.HEADER_TIMEOUT)
            async with listening(Caps(8, 8), header_timeout_s=0.2) as (gate, port):
                reader, writer = await connect(port)
                writer.write(PARTIAL)
                assert await rest(reader) == b""
                await opened(gate, 0)
            assert closed("data", Closed.HEADER_TIMEOUT) == before + 1

        run(scenario())

    def test_bytes_that_trickle_in_do_not_extend_the_deadline(self, run: Run) -> None:
        """A head sent a byte at a time is closed at the deadline, long before it could be complete."""

        async def scenario() -> None:
            head = PARTIAL + b"x" * 2000 + b"\r\n\r\n"
            async with listening(Caps(8, 8), header_timeout_s=0.3) as (_, port):
                reader, writer = await connect(port)
                ended = asyncio.ensure_future(rest(reader))
                sent = 0
                while not ended.done() and sent < len(head):
                    writer.write(head[sent : sent + 1])
                    sent += 1
                    await asyncio.sleep(0.01)  # the attacker's pace: the whole head would take 20 s
                assert ended.done() and await ended == b""
                assert sent < len(head)

        run(scenario())

    @pytest.mark.parametrize(
        ("then", "reason"), [(b"", Closed.IDLE), (PARTIAL, Closed.HEADER_TIMEOUT)], ids=["idle", "partial-head"]
    )
    def test_the_deadline_is_armed_again_after_each_response(self, then: bytes, reason: Closed, run: Run) -> None:
        """A handler may outlast the deadline; after its response the next head has a fresh deadline."""

        async def scenario() -> None:
            before = closed("data", reason)
            async with listening(Caps(8, 8), header_timeout_s=0.2) as (_, port):
                reader, writer = await connect(port)
                writer.write(b"GET /slow?s=0.5 HTTP/1.1\r\nHost: memgov\r\n\r\n")
                assert (await reader.readuntil(b"slow")).startswith(b"HTTP/1.1 200 ")
                writer.write(GET)  # kept alive past the first deadline, served
                assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200 ")
                writer.write(then)
                assert await rest(reader) == b""
            assert closed("data", reason) == before + 1

        run(scenario())


class TestHeadSize:
    @pytest.mark.parametrize(
        ("headers", "finished", "answer"),
        [
            (7, True, b"HTTP/1.1 200 OK\r\n"),
            (7, False, b""),  # closed at the deadline, unanswered
            (9, False, b"HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        ],
        ids=["complete-under", "unfinished-under", "unfinished-over"],
    )
    def test_an_unfinished_head_may_not_outgrow_the_limit(
        self, headers: int, finished: bool, answer: bytes, run: Run
    ) -> None:
        """Header lines arriving one read at a time are answered 431 and closed once they pass 64 KiB unfinished."""

        async def scenario() -> None:
            before = closed("data", Closed.HEADER_TOO_LARGE)
            async with listening(Caps(8, 8), header_timeout_s=0.5) as (_, port):
                reader, writer = await connect(port)
                writer.write(b"GET / HTTP/1.1\r\nHost: memgov\r\n")
                for n in range(headers):  # each read is a line under aiohttp's own 8190-byte limit
                    writer.write(b"X-Pad-%d: %s\r\n" % (n, b"p" * 8000))
                    await writer.drain()
                    await asyncio.sleep(0.01)  # separate reads, as a slow client sends them
                if finished:
                    writer.write(b"\r\n")
                assert await reader.readline() == answer
            assert closed("data", Closed.HEADER_TOO_LARGE) - before == (b" 431 " in answer)

        run(scenario())

    def test_a_body_left_unread_is_not_taken_for_a_head(self, run: Run) -> None:
        """A body answered without being read may go on arriving; then the connection serves the next request."""

        async def scenario() -> None:
            async with listening(Caps(8, 8), max_head_bytes=8192) as (_, port):
                reader, writer = await connect(port)
                writer.write(b"POST / HTTP/1.1\r\nHost: memgov\r\nContent-Length: 100000\r\n\r\n")
                assert await reader.readline() == b"HTTP/1.1 405 Method Not Allowed\r\n"
                for _ in range(10):  # the body, after the answer, in reads larger than the head limit
                    writer.write(b"b" * 10000)
                    await writer.drain()
                    await asyncio.sleep(0.01)
                writer.write(GET)
                assert b"HTTP/1.1 200 OK\r\n" in await reader.readuntil(b"ok")

        run(scenario())


class TestSettings:
    def test_an_address_cap_never_exceeds_its_listener_cap(self) -> None:
        """Lowering a listener's cap lowers its per-address cap with it."""
        caps = configured(gateway_settings("http://127.0.0.1:9", listen={"max_connections": {"control": 8}}))
        assert caps["control"] == Caps(total=8, per_address=8)

    def test_each_listener_has_its_own_defaults(self) -> None:
        """Without configuration every listener is capped, ops with its own small capacity."""
        settings = gateway_settings("http://127.0.0.1:9")
        assert configured(settings) == {"data": Caps(4096, 256), "control": Caps(256, 32), "ops": Caps(64, 16)}
        assert (settings.listen.header_timeout_s, settings.listen.max_header_bytes) == (10, 32768)


class TestListenersOfAGateway:
    def test_a_full_data_plane_leaves_control_and_ops_answering(self, run: Run) -> None:
        """With the data listener at its cap, /readyz, /metrics and the control API still answer."""

        async def scenario() -> None:
            limits = {"max_connections": {"data": 2}, "max_connections_per_address": {"data": 2}}
            async with gateway("http://127.0.0.1:9", listen=limits) as gw:
                port = int(gw.data_url.rsplit(":", 1)[1])
                flood = [await connect(port) for _ in range(2)]
                for _, writer in flood:
                    writer.write(PARTIAL)
                await opened(gw.gates["data"], 2)
                reader, writer = await connect(port, "127.0.0.2")
                writer.write(GET)
                assert (await rest(reader)).startswith(b"HTTP/1.1 503 ")
                assert gw.gates["data"].open == 2
                async with aiohttp.ClientSession() as http:
                    async with http.get(gw.ops_url + "/readyz") as resp:
                        assert resp.status == 200
                    async with http.get(gw.ops_url + "/metrics") as resp:
                        assert 'memgov_connections_closed_total{listener="data",reason="total"}' in await resp.text()
                    async with http.get(gw.control_url + "/v1/openapi.json") as resp:
                        assert resp.status == 200

        run(scenario())

    def test_every_listener_closes_a_late_head(self, run: Run) -> None:
        """The head deadline holds on the data plane, the control API and the operations listener alike."""

        async def scenario() -> None:
            before = {name: closed(name, Closed.HEADER_TIMEOUT) for name in LISTENERS}
            async with gateway("http://127.0.0.1:9", listen={"header_timeout_s": 0.2}) as gw:
                for name in LISTENERS:
                    reader, writer = await connect(int(gw.urls[name].rsplit(":", 1)[1]))
                    writer.write(PARTIAL)
                    assert await rest(reader) == b""
            assert {name: closed(name, Closed.HEADER_TIMEOUT) - before[name] for name in LISTENERS} == dict.fromkeys(
                LISTENERS, 1
            )

        run(scenario())
