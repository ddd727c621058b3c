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
        scope, _ = await store.create_scope("@a:example.org", "native", "ns/a", "control_room", "!r:example.org", now)
        await store.grant(scope.scope_id, "remember preferences", "v1", now)
        await store.audit("denial", "rate_limited", now=now - timedelta(days=100))
        await store.audit("denial", "rate_limited", now=now - timedelta(days=10))
    finally:
        await store.close()


class TestStateCli:
    def test_migrate_stats_and_purge(
        self, state_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An operator migrates, reads counts, and purges audit records past the window."""
        monkeypatch.setenv("MEMGOV_STATE__URL", state_url)
        assert main(["state", "migrate"]) == 0
        assert f"{LATEST} migration(s) applied" in capsys.readouterr().out
        asyncio.run(_seed(state_url))
        assert main(["state", "migrate"]) == 0
        assert "0 migration(s) applied" in capsys.readouterr().out

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
