"""Where memgov listens (a list of addresses, IPv6 included), what a flood of unfinished connections
leaves answering, and how it reaches the embedding provider (directly, or through the egress proxy
the environment names when told to)."""

from __future__ import annotations

import asyncio
import json
import resource
import select
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sidecar.proxy import create_data_app
from sidecar.settings import SettingsError, parse_listen
from tests.support.echo import create_echo_app
from tests.support.gateway import gateway, gateway_settings
from tests.support.pg import free_port
from tests.support.smoke import SEARCH, production_config, serving, url, wait_ready, write_config
from tests.support.wait import until


class TestListenAddresses:
    @pytest.mark.parametrize(
        ("value", "addresses"),
        [
            ("0.0.0.0:8080", [("0.0.0.0", 8080)]),
            (":8080", [("0.0.0.0", 8080)]),
            ("[::]:8080", [("::", 8080)]),
            ("0.0.0.0:8080,[::]:8080", [("0.0.0.0", 8080), ("::", 8080)]),
            (" 127.0.0.1:1 , [::1]:2 ", [("127.0.0.1", 1), ("::1", 2)]),
        ],
    )
    def test_lists_parse(self, value: str, addresses: list[tuple[str, int]]) -> None:
        """One address or a comma-separated list; IPv6 hosts in brackets."""
        assert parse_listen(value) == addresses

    @pytest.mark.parametrize("value", ["::1:8080", "[::1:8080", "0.0.0.0:8080,0.0.0.0:8080", "0.0.0.0:80x", ""])
    def test_ambiguous_or_repeated_addresses_are_refused(self, value: str) -> None:
        """An unbracketed IPv6 host, a repeated address or a bad port is a configuration error naming the key."""
        with pytest.raises(SettingsError, match="listen.data"):
            gateway_settings("http://127.0.0.1:9", listen={"data": value})

    async def test_both_address_families_on_one_port(self, aiohttp_server: Any) -> None:
        """0.0.0.0:P and [::]:P bind side by side, and each answers."""
        echo = await aiohttp_server(create_echo_app())
        port = free_port()
        async with (
            gateway(str(echo.make_url("")).rstrip("/"), listen={"data": f"0.0.0.0:{port},[::]:{port}"}),
            aiohttp.ClientSession() as http,
        ):
            for host in ("127.0.0.1", "[::1]"):
                async with http.get(f"http://{host}:{port}/version") as resp:
                    assert resp.status == 200

    async def test_workers_bind_every_address(self, tmp_path: Path, aiohttp_server: Any) -> None:
        """`memgov serve --workers 2` serves each listed address, not only the first."""
        echo = await aiohttp_server(create_echo_app())
        port = free_port()
        config = production_config(tmp_path, str(echo.make_url("")).rstrip("/"))
        config["listen"]["data"] = f"127.0.0.1:{port},[::1]:{port}"
        path = write_config(tmp_path / "memgov.yaml", config)
        log = tmp_path / "serve.log"
        argv = [sys.executable, "-m", "sidecar", "--config", str(path), "serve", "--workers", "2"]
        with serving(argv, log=log, cwd=tmp_path) as proc:
            await wait_ready(proc, url(config, "ops"), log)
            async with aiohttp.ClientSession() as http:
                for host in ("127.0.0.1", "[::1]"):
                    async with http.get(f"http://{host}:{port}/version") as resp:
                        assert resp.status == 200


#: Unfinished connections one address opens, each with a partial request head, all kept open.
FLOOD = 2000
PARTIAL = b"POST /api/memories/search HTTP/1.1\r\nHost: memgov\r\nX-Unfinished: "


@pytest.fixture
def own_fd_limit() -> Iterator[None]:
    """This test process holds the flood's sockets: its soft descriptor limit is raised to the hard one."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert before[1] >= FLOOD + 500, f"the flood needs {FLOOD + 500} descriptors; the hard limit is {before[1]}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (before[1], before[1]))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def _limited(soft: int, hard: int | None) -> Callable[[], None]:
    """Run the gateway under these descriptor limits (None: the hard limit it would have anyway)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard or resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    return apply


def _open_flood(port: int) -> list[socket.socket]:
    """FLOOD connections from 127.0.0.1, each sending a partial head and then nothing."""
    socks = []
    for _ in range(FLOOD):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=("127.0.0.1", 0))
        socks.append(sock)
        try:
            sock.sendall(PARTIAL)
        except OSError:
            pass  # already answered and closed at accept: the cap at work
    return socks


def _answered(socks: list[socket.socket]) -> int:
    """How many of the flood's connections the gateway has answered or closed (readable on this side)."""
    poller = select.poll()
    for sock in socks:
        poller.register(sock, select.POLLIN)
    return len(poller.poll(0))


def _sample(metrics: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(name))


class TestConnectionFlood:
    @pytest.mark.parametrize(
        ("limits", "workers", "held"),
        [
            # containerd's default: a soft limit of 1024 under a high hard one, which memgov raises.
            pytest.param((1024, None), 1, 256, id="soft-1024"),
            # A hard limit of 1024: each worker's caps are reduced to fit it; each holds its own.
            pytest.param((1024, 1024), 2, 2 * 256, id="hard-1024-two-workers"),
        ],
    )
    async def test_unfinished_connections_from_one_address_leave_the_gateway_answering(
        self,
        tmp_path: Path,
        aiohttp_server: Any,
        own_fd_limit: None,
        limits: tuple[int, int | None],
        workers: int,
        held: int,
    ) -> None:
        """2,000 partial heads held open by one address: memory calls from another, control and /readyz answer."""
        echo = await aiohttp_server(create_echo_app())
        # A deadline longer than the test: the flood stays open, and only the caps stand in its way.
        config = production_config(tmp_path, str(echo.make_url("")).rstrip("/"), listen={"header_timeout_s": 300})
        path = write_config(tmp_path / "memgov.yaml", config)
        log = tmp_path / "serve.log"
        argv = [sys.executable, "-m", "sidecar", "--config", str(path), "serve", "--workers", str(workers)]
        with serving(argv, log=log, cwd=tmp_path, preexec_fn=_limited(*limits)) as proc:
            await wait_ready(proc, url(config, "ops"), log)

            async def all_workers_serve() -> bool:  # /readyz answers from whichever worker the kernel picks
                return workers == 1 or b'"workers.started"' in log.read_bytes()

            await until(all_workers_serve)
            port = int(config["listen"]["data"].rsplit(":", 1)[1])
            flood = await asyncio.to_thread(_open_flood, port)
            try:
                async with aiohttp.ClientSession() as http:

                    async def scrape() -> str:
                        async with http.get(url(config, "ops") + "/metrics") as resp:
                            return await resp.text()

                    async def settled() -> bool:
                        # Every connection of the flood is either held by the gateway or answered and closed.
                        opened = _sample(await scrape(), 'memgov_connections_open{listener="data"}')
                        return _answered(flood) + opened == FLOOD

                    await until(settled, timeout_s=120)
                    assert _sample(await scrape(), 'memgov_connections_open{listener="data"}') == held
                    async with http.get(url(config, "ops") + "/readyz") as resp:
                        assert resp.status == 200
                    async with http.get(url(config, "control") + "/v1/openapi.json") as resp:
                        assert resp.status == 200
                other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
                async with aiohttp.ClientSession(connector=other) as http:
                    for _ in range(3):
                        async with http.post(url(config, "data") + "/api/memories/search", json=SEARCH) as resp:
                            assert (resp.status, await resp.json()) == (200, [])
                            assert resp.headers["X-Memgov-Decision"].startswith("empty_result; reason=")
            finally:
                for sock in flood:
                    sock.close()
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        raised = [x for x in lines if x["event"] == "process.fd_limit_raised"]
        if limits[1] is None:
            assert raised and raised[0]["fd_limit_before"] == 1024 and raised[0]["fd_limit"] > 1024
        else:
            assert not raised and any(x["event"] == "listener.capacity_reduced" for x in lines)


class TestEmbeddingEgress:
    @pytest.fixture
    async def egress_proxy(self, aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
        """A forward proxy named by HTTP_PROXY; it records the absolute URLs it is asked for."""
        asked: list[str] = []

        async def forward(request: web.Request) -> web.Response:
            asked.append(str(request.url))
            return web.json_response({"data": [], "model": "m"})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        server = await aiohttp_server(app)
        monkeypatch.setenv("HTTP_PROXY", str(server.make_url("")))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        return asked

    @pytest.mark.parametrize("trust_env", [True, False])
    async def test_provider_is_reached_through_the_proxy_only_when_told(
        self, egress_proxy: list[str], aiohttp_client: Any, trust_env: bool
    ) -> None:
        """With upstream.embedding_trust_env the provider call goes through HTTP_PROXY; without it, directly."""
        # A name that resolves nowhere: only a proxy can reach it.
        provider = f"http://provider-{free_port()}.invalid/v1"
        settings = gateway_settings(
            "http://127.0.0.1:9", upstream={"embedding_url": provider, "embedding_trust_env": trust_env}
        )
        client = await aiohttp_client(create_data_app(settings))
        body = {"model": "m", "input": ["x"], "dimensions": 768}
        resp = await client.post("/embeddings/kagent/helper/v1/embeddings", json=body)
        if trust_env:
            assert resp.status == 200 and egress_proxy == [provider + "/embeddings"]
        else:
            assert resp.status == 502 and egress_proxy == []
