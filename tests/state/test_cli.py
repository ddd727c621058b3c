"""``memgov state migrate | stats | purge-audit`` against the configured store."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from sidecar.cli import main
from sidecar.state import open_store
from sidecar.state.migrations import LATEST


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

    def test_migrate_speaks_json_only_when_the_store_is_down(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The migration Job's output is JSON lines naming the code, exit 1, no driver text."""
        monkeypatch.setenv("MEMGOV_STATE__URL", "postgresql://u:secretpw@127.0.0.1:1/x")
        assert main(["state", "migrate"]) == 1
        out = capsys.readouterr().out
        (line,) = _json_lines(out)
        assert (line["event"], line["reason"]) == ("state.migrate_failed", "state_unavailable")
        assert "secretpw" not in out


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
