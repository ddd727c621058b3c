"""`memgov serve` on a state store that is down, or on a schema it cannot run on: JSON lines, never a traceback."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecar.cli import EXIT_FAILED, main
from sidecar.control.client import ControlClient
from sidecar.dev.devstack import start_devstack
from sidecar.dev.devstack.deployment import Keys, write_keys
from sidecar.dev.devstack.stack import Devstack
from sidecar.dev.devstack.vectors import embed_text
from sidecar.identity.keys import SessionKeys
from sidecar.server import EXIT_MIGRATION, EXIT_SCHEMA
from sidecar.state.migrations import LATEST
from tests.support.harness import (
    AGENT,
    ALICE,
    APP,
    ROOM,
    decision_of,
    invoke_as_alice,
    policy_pack,
    subject_token,
)
from tests.support.pg import PgServer, start_pg
from tests.support.process import GatewayProcess, gateway_process
from tests.support.procs import process_settings
from tests.support.sentinel import assert_absent, make_sentinel
from tests.support.smoke import production_config, serving, url, wait_ready, write_config
from tests.support.state import migrate_as, next_release
from tests.support.wait import until

NOMEM = AGENT.split("/")[0] + "/helper-nomem"  # the harness's disabled_variant


def _lines(log: Path) -> list[dict[str, Any]]:
    """Every complete line the process wrote; each must be one JSON object."""
    return [json.loads(line) for line in log.read_text().split("\n")[:-1]]


def _serve(config: dict[str, Any], workdir: Path, log: Path, workers: int = 1) -> Any:
    """`memgov serve` with this config, stopped (its whole process group) when the block ends."""
    path = write_config(workdir / "memgov.yaml", config)
    argv = [sys.executable, "-m", "sidecar", "--config", str(path), "serve", "--workers", str(workers)]
    return serving(argv, log=log, cwd=workdir)


@pytest.fixture
def halted_pg() -> Iterator[PgServer]:
    """A PostgreSQL server with a database ``state``, stopped: the test starts it again."""
    server = start_pg(max_connections=30)
    try:
        server.create_database("state")
        server.halt()
        yield server
    finally:
        server.stop()


def _decision(resp: aiohttp.ClientResponse) -> tuple[str, str]:
    decided = decision_of(resp)
    return decided["action"], decided["reason"]


class TestStateDownAtStart:
    async def test_serves_degraded_from_boot_then_memory_comes_back(self, tmp_path: Path, halted_pg: PgServer) -> None:
        """Started with PostgreSQL down: listeners open at once, /readyz 200 with the store unavailable,
        metrics exported, a chat relayed to the memory-disabled agent, a search `[]`, a save 503; the
        store is retried with growing waits (JSON lines, no DSN); once PostgreSQL answers memory works."""
        kagent = await start_devstack(agents=[AGENT, NOMEM], stream_delay_s=0)
        keys = write_keys(tmp_path / "keys")
        settings = process_settings(keys, policy_pack(tmp_path), kagent.kagent_url, halted_pg.url("state"))
        settings["state"] = {"url": halted_pg.url("state"), "check_interval_s": 0.5}
        try:
            async with (
                gateway_process(tmp_path / "gw", settings, wait_for_store=False) as gw,
                aiohttp.ClientSession() as http,
            ):
                await self._degraded_then_up(gw, http, kagent, keys, halted_pg)
        finally:
            await kagent.stop()
        log = tmp_path / "gw" / "gateway.log"
        text = log.read_text()
        assert "Traceback" not in text and "127.0.0.1:" + str(halted_pg.port) not in text
        retries = [line for line in _lines(log) if line["event"] == "state.connect_failed"]
        assert [r["attempt"] for r in retries] == list(range(1, len(retries) + 1))
        assert retries[-1]["retry_in_ms"] > retries[0]["retry_in_ms"]
        assert {r["backend"] for r in retries} == {"postgresql"}

    async def _degraded_then_up(
        self, gw: GatewayProcess, http: aiohttp.ClientSession, kagent: Devstack, keys: Keys, pg: PgServer
    ) -> None:
        log = gw.workdir / "gateway.log"
        async with http.get(gw.ops_url + "/readyz") as resp:
            assert resp.status == 200
            assert (await resp.json())["checks"]["state"] == {"ok": True, "backend": "postgresql", "available": False}
        async with http.get(gw.ops_url + "/metrics") as resp:
            assert "memgov_state_available 0.0" in await resp.text()

        async def invoke() -> tuple[tuple[str, str], str]:
            decided, asked = await invoke_as_alice(http, gw.data_url, keys, kagent)
            return (decided["action"], decided["reason"]), asked

        assert await invoke() == (("rewrite_disabled", "state_unavailable"), NOMEM)
        key = SessionKeys(keys.session_file.read_bytes().strip()).session_key("s" + "0" * 24, 1)
        memory = {"X-Agent-Name": APP, "X-User-Id": key}
        search = {"agent_name": APP, "user_id": key, "vector": embed_text("tea"), "limit": 5, "min_score": 0.0}
        async with http.post(gw.data_url + "/api/memories/search", json=search, headers=memory) as resp:
            assert (resp.status, await resp.json(), _decision(resp)) == (200, [], ("empty_result", "state_unavailable"))
        save = {"agent_name": APP, "user_id": key, "content": "likes tea", "vector": embed_text("likes tea")}
        async with http.post(gw.data_url + "/api/memories/sessions", json=save, headers=memory) as resp:
            assert (resp.status, _decision(resp)[1]) == (503, "state_unavailable")

        async def retried_twice() -> bool:
            return sum(line["event"] == "state.connect_failed" for line in _lines(log)) >= 2

        await until(retried_twice, timeout_s=60)
        pg.resume()

        async def available() -> bool:
            async with http.get(gw.ops_url + "/readyz") as resp:
                return bool((await resp.json())["checks"]["state"]["available"])

        await until(available, timeout_s=60)
        api = ControlClient(gw.control_url, lambda: subject_token(keys, int(time.time())), session=http)
        scope_id = (await api.create_scope(ALICE, AGENT, ROOM)).scope_id
        await api.grant(scope_id, "remember my preferences", "v1")
        key = SessionKeys(keys.session_file.read_bytes().strip()).session_key(scope_id, 1)
        memory = {"X-Agent-Name": APP, "X-User-Id": key}
        save = {**save, "user_id": key}
        async with http.post(gw.data_url + "/api/memories/sessions", json=save, headers=memory) as resp:
            assert resp.status == 201, resp.headers["X-Memgov-Decision"]
        assert (await invoke())[1] == AGENT

    async def test_a_signal_while_the_store_is_down_stops_cleanly(self, tmp_path: Path, halted_pg: PgServer) -> None:
        """SIGTERM while the store has not answered yet: the listeners were open, the stop is graceful, exit 0."""
        config = production_config(tmp_path, "http://127.0.0.1:9", state={"url": halted_pg.url("state")})
        log = tmp_path / "serve.log"

        async def retried() -> bool:
            return any(line["event"] == "state.connect_failed" for line in _lines(log))

        with _serve(config, tmp_path, log) as proc:
            await wait_ready(proc, url(config, "ops"), log, store=False)
            await until(retried, timeout_s=60)
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, 30) == 0
        events = [line["event"] for line in _lines(log)]
        assert events[-1] == "server.stopped" and "server.start_aborted" not in events
        assert events.count("listener.started") == 3


async def _newer_schema(db_file: Path) -> None:
    """The next release migrated this file, with a change this release cannot run on."""
    await migrate_as(f"sqlite:///{db_file}", next_release(compatible_from=None))


class TestSchema:
    @pytest.mark.parametrize("workers", [1, 2])
    async def test_a_newer_schema_is_refused_with_its_own_exit_code(self, tmp_path: Path, workers: int) -> None:
        """A rolled-back release on a schema it cannot follow exits 3 with a JSON line naming both versions
        (with several workers, each says so and the supervisor ends with the same code)."""
        await _newer_schema(tmp_path / "state.db")
        config = production_config(tmp_path, "http://127.0.0.1:9")
        log = tmp_path / "serve.log"
        with _serve(config, tmp_path, log, workers) as proc:
            assert await asyncio.to_thread(proc.wait, 60) == EXIT_SCHEMA
        refusals = [x for x in _lines(log) if x["event"] == "state.schema_unknown"]
        assert refusals and all((x["schema_version"], x["supported"]) == (LATEST + 1, LATEST) for x in refusals)
        assert "Traceback" not in log.read_text()

    def test_migrate_refuses_a_newer_schema_too(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """`memgov state migrate` of an older release changes nothing on a newer schema and exits 3."""
        asyncio.run(_newer_schema(tmp_path / "state.db"))
        capsys.readouterr()  # what the newer release's migration logged
        monkeypatch.setenv("MEMGOV_STATE__URL", f"sqlite:///{tmp_path / 'state.db'}")
        assert main(["state", "migrate"]) == EXIT_SCHEMA
        (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        found = (line["event"], line["schema_version"], line["supported"])
        assert found == ("state.schema_unknown", LATEST + 1, LATEST)

    async def test_without_auto_migrate_an_unmigrated_store_is_refused(self, tmp_path: Path) -> None:
        """With state.auto_migrate false, serve does not migrate: a fresh store stops it with exit 3."""
        config = production_config(tmp_path, "http://127.0.0.1:9", state={"auto_migrate": False})
        log = tmp_path / "serve.log"
        with _serve(config, tmp_path, log) as proc:
            assert await asyncio.to_thread(proc.wait, 60) == EXIT_SCHEMA
        (line,) = [x for x in _lines(log) if x["level"] == "error"]
        assert (line["event"], line["schema_version"]) == ("state.schema_not_migrated", 0)

    async def test_a_migration_the_store_refuses_has_its_own_exit_code(
        self, tmp_path: Path, pg_server: PgServer
    ) -> None:
        """A role without the right to create tables (PostgreSQL 15 grants none on public): serve exits 4 with
        one JSON line naming the migration and the SQLSTATE, not state_unavailable, and no driver text."""
        pg_server.psql("CREATE ROLE memgov_no_ddl LOGIN")
        pg_server.create_database("no_ddl")
        config = production_config(
            tmp_path, "http://127.0.0.1:9", state={"url": pg_server.url("no_ddl", "memgov_no_ddl")}
        )
        log = tmp_path / "serve.log"
        with _serve(config, tmp_path, log) as proc:
            assert await asyncio.to_thread(proc.wait, 60) == EXIT_MIGRATION
        (line,) = [x for x in _lines(log) if x["level"] == "error"]
        assert (line["event"], line["migration"], line["error_code"]) == ("state.migration_failed", 0, "42501")
        assert "permission denied" not in log.read_text() and "Traceback" not in log.read_text()


class TestNoTraceback:
    def test_an_unexpected_failure_is_one_json_line(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A command failing in a way it does not report itself exits 70 with its type name only."""
        sentinel = make_sentinel("cli")

        async def broken(url: str) -> int:
            raise RuntimeError(f"driver said {sentinel}")

        monkeypatch.setattr("sidecar.state.cli._migrate", broken)
        monkeypatch.setenv("MEMGOV_STATE__URL", "sqlite:///:memory:")
        assert main(["state", "migrate"]) == EXIT_FAILED
        captured = capsys.readouterr()
        (line,) = [json.loads(x) for x in captured.out.splitlines()]
        assert (line["event"], line["error_type"]) == ("command.failed", "RuntimeError")
        assert_absent(sentinel, captured.out, captured.err)
