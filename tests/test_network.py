"""Where memgov listens (a list of addresses, IPv6 included) and how it reaches the embedding provider
(directly, or through the egress proxy the environment names when told to)."""

from __future__ import annotations

import sys
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
from tests.support.smoke import production_config, serving, url, wait_ready, write_config


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
