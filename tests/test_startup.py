"""`memgov serve` on a state store that is down, or on a schema it cannot run on: JSON lines, never a traceback."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import EXIT_FAILED, main
from sidecar.server import EXIT_MIGRATION, EXIT_SCHEMA
from sidecar.state.migrations import LATEST
from tests.support.pg import PgServer, start_pg
from tests.support.sentinel import assert_absent, make_sentinel
from tests.support.smoke import production_config, serving, url, wait_ready, write_config
from tests.support.state import migrate_as, next_release
from tests.support.wait import until


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


class TestStateDownAtStart:
    async def test_waits_with_backoff_then_serves(self, tmp_path: Path, halted_pg: PgServer) -> None:
        """With PostgreSQL down, serve logs JSON retries with growing waits (no traceback, no DSN), and
        becomes ready once PostgreSQL answers."""
        config = production_config(tmp_path, "http://127.0.0.1:9", state={"url": halted_pg.url("state")})
        log = tmp_path / "serve.log"
        with _serve(config, tmp_path, log) as proc:

            async def retried_twice() -> bool:
                assert proc.poll() is None, log.read_text()
                return sum(line["event"] == "state.connect_failed" for line in _lines(log)) >= 2

            await until(retried_twice, timeout_s=60)
            halted_pg.resume()
            await wait_ready(proc, url(config, "ops"), log)
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, 30) == 0
        text = log.read_text()
        assert "Traceback" not in text and "127.0.0.1:" + str(halted_pg.port) not in text
        retries = [line for line in _lines(log) if line["event"] == "state.connect_failed"]
        assert [r["attempt"] for r in retries] == list(range(1, len(retries) + 1))
        assert retries[-1]["retry_in_ms"] > retries[0]["retry_in_ms"]
        assert {r["backend"] for r in retries} == {"postgresql"}

    async def test_a_signal_ends_the_wait(self, tmp_path: Path, halted_pg: PgServer) -> None:
        """SIGTERM while the store is still down stops the start-up cleanly: exit 0, JSON only."""
        config = production_config(tmp_path, "http://127.0.0.1:9", state={"url": halted_pg.url("state")})
        log = tmp_path / "serve.log"

        async def retried() -> bool:
            return any(line["event"] == "state.connect_failed" for line in _lines(log))

        with _serve(config, tmp_path, log) as proc:
            await until(retried, timeout_s=60)
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, 30) == 0
        events = [line["event"] for line in _lines(log)]
        assert events[-2:] == ["server.start_aborted", "server.stopped"]


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
