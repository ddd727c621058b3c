"""The stand-in controller's log, shaped like kagent's (controller-runtime zap JSON), kept in memory.

kagent's logging middleware writes one ``Request completed`` line per routed request, with the
``user_id`` query parameter when there is one; the save handler logs the row id, ``userID`` and
``agentName``; error answers log their message. Whatever memgov forwards there ends up in
kagent's log, so tests scan this as a sink on the stand-in as they scan the real kagent's log.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sidecar.dev.devstack.gojson import go_dumps


class ControllerLog:
    """Append-only JSON lines; never printed (they hold identifiers as kagent's do)."""

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: list[str] = []

    def info(self, logger: str, msg: str, **fields: Any) -> None:
        """One info line, fields in the order given."""
        ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._lines.append(go_dumps({"level": "info", "ts": ts, "logger": logger, "msg": msg, **fields}))

    def text(self) -> str:
        """Every line so far, newline-terminated."""
        return "".join(line + "\n" for line in self._lines)
