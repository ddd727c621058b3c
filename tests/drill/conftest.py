"""A throwaway deployment in this process (the drill's own devstack), with its keys as files.

The test plays the same parts the drill plays (bridge, subjects, operator, agent runtime) through
``sidecar.drill.actors.DrillRun``; the key files let ``memgov scope`` and ``memgov drill`` run
against the gateway as they would against a cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from sidecar import cli
from sidecar.dev.drill_devstack import devstack_target
from sidecar.drill import actors
from sidecar.drill.actors import DrillRun
from sidecar.drill.wire import Recorder, open_session
from tests.support.drill import Deployment


@pytest.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[Deployment]:
    async with devstack_target() as (target, local):
        keys = {
            "bridge": target.bridge_key.material,
            "operator": target.operator_key.material,
            "session": target.session_secret,
        }
        files = {}
        for name, material in keys.items():
            files[name] = tmp_path / f"{name}.key"
            files[name].write_bytes(material)
        recorder = Recorder()
        async with open_session(recorder) as http:
            yield Deployment(target, local, DrillRun(target, http, recorder, clock=local.clock, local=local), files)


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every sentinel the drill plants during the test, in the order planted."""
    seen: list[str] = []
    original = actors.make_sentinel

    def recording(tag: str) -> str:
        seen.append(original(tag))
        return seen[-1]

    monkeypatch.setattr(actors, "make_sentinel", recording)
    return seen


@pytest.fixture
def memgov(capsys: pytest.CaptureFixture[str]) -> Callable[..., Awaitable[tuple[int, str, str]]]:
    """Run ``memgov …`` in a worker thread (it runs its own event loop); returns (exit code, stdout, stderr)."""

    async def invoke(*argv: str) -> tuple[int, str, str]:
        code = await asyncio.to_thread(cli.main, list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    return invoke
