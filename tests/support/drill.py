"""A throwaway deployment in this process (the drill's own devstack), with its keys as files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sidecar.dev.drill_devstack import LocalStack
from sidecar.drill.actors import DrillRun
from sidecar.drill.target import Target


@dataclass
class Deployment:
    """A running gateway, the drill's view of it, and its secrets as files."""

    target: Target
    local: LocalStack
    run: DrillRun
    keys: dict[str, Path]

    def token_file(self, folder: Path, token: str, name: str = "token") -> Path:
        path = folder / name
        path.write_text(token)
        return path
