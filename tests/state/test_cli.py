"""``memgov state migrate | stats | purge-audit`` against the configured store."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from sidecar.cli import main
from sidecar.state import open_store
from sidecar.state.db import connect
from sidecar.state.migrations import LATEST, MIGRATIONS
from tests.support.state import migrate_as, next_release


async def _seed(url: str) -> None:
    store = await open_store(url)
    try:
        now = datetime.now(UTC)
        scope, _ = await store.scopes.create_scope(
            "@a:example.org", "native", "ns/a", "control_room", "!r:example.org", now
        )
        await store.scopes.grant(scope.scope_id, "remember preferences", "v1", now)
        await store.audit_log.audit("denial", "rate_limited", now=now - timedelta(days=100))
        await store.audit_log.audit("denial", "rate_limited", now=now - timedelta(days=10))
    finally:
        await store.close()


def _json_lines(out: str) -> list[dict[str, object]]:
    """Every line of the output, each of which must be one JSON object."""
    return [json.loads(line) for line in out.splitlines()]


class TestStateCli:
    def test_migrate_stats_and_purge(
        self, state_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An operator migrates, reads counts, and purges audit records past the window."""
        monkeypatch.setenv("MEMGOV_STATE__URL", state_url)
        assert main(["state", "migrate"]) == 0
        assert _json_lines(capsys.readouterr().out)[-1] | {"timestamp": None} == {
            "event": "state.schema_current",
            "level": "info",
            "component": "state",
            "backend": state_url.split(":")[0],
            "schema_version": LATEST,
            "count": LATEST,
            "timestamp": None,
        }
        asyncio.run(_seed(state_url))
        assert main(["state", "migrate"]) == 0
        assert _json_lines(capsys.readouterr().out)[-1]["count"] == 0

        assert main(["state", "stats", "--json"]) == 0
        stats = json.loads(capsys.readouterr().out)
        assert (stats["scopes"], stats["receipts"], stats["audit"]) == (1, 1, 2)
        assert all(isinstance(v, int) for k, v in stats.items() if k != "backend")

        assert main(["state", "purge-audit"]) == 0
        assert "purged 1 audit record(s) older than 90 day(s)" in capsys.readouterr().out
        assert main(["state", "purge-audit", "--older-than-days", "5"]) == 0
        assert "purged 1 audit record(s)" in capsys.readouterr().out

    def test_an_unreachable_store_is_reported_by_code(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A down database answers with the reason code and exit status 1, no driver text."""
        monkeypatch.setenv("MEMGOV_STATE__URL", "postgresql://u:secretpw@127.0.0.1:1/x")
        assert main(["state", "stats"]) == 1
        out = capsys.readouterr().out
        assert out.strip() == "memgov state: state_unavailable"

    @pytest.mark.parametrize(
        ("command", "event"), [("migrate", "state.migrate_failed"), ("check", "state.check_failed")]
    )
    def test_the_hook_commands_speak_json_only_when_the_store_is_down(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, event: str
    ) -> None:
        """The hook Jobs' output (migrate, check) is JSON lines naming the code, exit 1, no driver text."""
        monkeypatch.setenv("MEMGOV_STATE__URL", "postgresql://u:secretpw@127.0.0.1:1/x")
        assert main(["state", command]) == 1
        out = capsys.readouterr().out
        (line,) = _json_lines(out)
        assert (line["event"], line["reason"]) == (event, "state_unavailable")
        assert "secretpw" not in out


async def _tables(url: str) -> set[str]:
    """The tables the store's database holds."""
    db = await connect(url)
    try:
        async with db.tx("read") as tx:
            sql = (
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
                if db.dialect == "postgresql"
                else "SELECT name FROM sqlite_master WHERE type = 'table'"
            )
            return {str(r[0]) for r in await tx.fetch(sql)}
    finally:
        await db.close()


class TestSchemaCheck:
    @pytest.mark.parametrize(
        ("compatible_from", "code", "events"),
        [
            (LATEST, 0, ["state.schema_newer", "state.schema_compatible"]),
            (None, 3, ["state.schema_unknown"]),
        ],
        ids=["compatible", "incompatible"],
    )
    def test_check_on_a_schema_a_newer_release_migrated(
        self,
        state_url: str,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
        compatible_from: int | None,
        code: int,
        events: list[str],
    ) -> None:
        """`memgov state check` (the pre-rollback hook's command) exits 0 where this release runs on the newer
        schema and 3 where that schema does not name it compatible, naming both versions; it changes nothing."""
        asyncio.run(migrate_as(state_url, next_release(compatible_from)))
        capsys.readouterr()
        monkeypatch.setenv("MEMGOV_STATE__URL", state_url)
        assert main(["state", "check"]) == code
        lines = _json_lines(capsys.readouterr().out)
        assert [line["event"] for line in lines] == events
        assert (lines[-1]["schema_version"], lines[-1]["supported"]) == (LATEST + 1, LATEST)
        assert asyncio.run(migrate_as(state_url, next_release(compatible_from))) == 0

    def test_check_refuses_a_store_not_migrated_to_this_release_and_creates_nothing(
        self, state_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Behind this release (as a gateway without auto_migrate would find it): exit 3, and no table is made."""
        monkeypatch.setenv("MEMGOV_STATE__URL", state_url)
        assert main(["state", "check"]) == 3
        (line,) = _json_lines(capsys.readouterr().out)
        assert (line["event"], line["schema_version"], line["supported"]) == ("state.schema_not_migrated", 0, LATEST)
        assert asyncio.run(_tables(state_url)) == set()

    def test_check_passes_on_this_releases_schema(
        self, state_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """On the schema this release migrated: exit 0, one line naming the version."""
        monkeypatch.setenv("MEMGOV_STATE__URL", state_url)
        assert main(["state", "migrate"]) == 0
        capsys.readouterr()
        assert main(["state", "check"]) == 0
        (line,) = _json_lines(capsys.readouterr().out)
        assert (line["event"], line["schema_version"]) == ("state.schema_compatible", LATEST)


class TestMigrationRefused:
    def test_a_refused_statement_names_the_migration_and_the_backend_code(
        self, state_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A table of the first migration already exists (someone else's): migrate exits 4 with the
        migration's version and the backend's error class, applies nothing, and quotes no server text."""

        async def squat() -> None:
            db = await connect(state_url)
            try:
                async with db.tx() as tx:
                    await tx.execute("CREATE TABLE scopes (taken INTEGER)")
            finally:
                await db.close()

        asyncio.run(squat())
        monkeypatch.setenv("MEMGOV_STATE__URL", state_url)
        assert main(["state", "migrate"]) == 4
        out = capsys.readouterr().out
        (line,) = _json_lines(out)
        expected_code = "42P07" if state_url.startswith("postgres") else "SQLITE_ERROR"
        assert (line["event"], line["migration"], line["error_code"]) == (
            "state.migration_failed",
            MIGRATIONS[0].version,
            expected_code,
        )
        assert (line["schema_version"], line["supported"]) == (0, LATEST)
        assert "already exists" not in out
        assert asyncio.run(_tables(state_url)) == {"scopes"}


class TestSqliteFileMode:
    async def test_state_file_is_private_to_the_gateway_user(self, tmp_path):
        """The SQLite state file (MXIDs, scope ids) is readable by its owner only."""
        from sidecar.state import open_store

        path = tmp_path / "nested" / "state.db"
        store = await open_store(f"sqlite:///{path}")
        try:
            assert path.stat().st_mode & 0o077 == 0
        finally:
            await store.close()
