"""Benchmark scenarios: a request mix plus the setup and teardown it needs.

A scenario is pluggable through three hooks, all optional: ``upstream_params`` and
``gateway_overrides`` shape the upstream and memgov processes before they start, and
``prepared`` runs once every server is up (grant scopes, mint tokens, seed data), yields the
mix to send, and undoes its setup afterwards. The passthrough scenarios need none of them.
``upstream`` picks what plays kagent: the stand-in, or kagent v0.9.11's own server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from sidecar.dev.bench.loadgen import RequestSpec

_JSON: Final = (("Content-Type", "application/json"),)


@dataclass(frozen=True)
class Scenario:
    """A named request mix; subclasses override the hooks when the mix needs setup."""

    name: str
    summary: str
    mix: tuple[RequestSpec, ...]
    upstream: Literal["standin", "kagent"] = "standin"

    def upstream_params(self, workdir: Path) -> dict[str, Any]:
        """Parameters of the upstream server: ``start_devstack`` keywords, or the real kagent's scratch folder."""
        if self.upstream == "kagent":
            return {"workdir": str(workdir)}
        # Unpaced streams: a paced one would measure the stand-in's sleeps, not the proxies.
        return {"stream_delay_s": 0.0}

    def gateway_overrides(self, workdir: Path) -> dict[str, Any]:
        """Settings memgov runs with for this scenario (merged over the bench defaults)."""
        return {}

    @contextmanager
    def prepared(self, urls: Mapping[str, Mapping[str, str]]) -> Iterator[tuple[RequestSpec, ...]]:
        """Set up what the mix needs once the servers run; yield the mix; undo the setup on exit.

        ``urls`` maps ``standin``, ``bare`` and ``memgov`` to that process's URLs (``url`` takes
        the load; memgov adds ``control_url`` and ``ops_url``, the stand-in ``embedding_url``).
        """
        yield self.mix


def session_body(size: int = 1024) -> bytes:
    """A session-creation body of exactly ``size`` bytes, padded in a description field."""
    base = {"name": "bench-session", "agent_ref": "bench/assistant", "user_id": "bench-user", "description": ""}
    pad = size - len(json.dumps(base, separators=(",", ":")).encode())
    return json.dumps({**base, "description": "x" * max(pad, 0)}, separators=(",", ":")).encode()


def stream_body() -> bytes:
    """An A2A JSON-RPC ``message/stream`` request with one short text part."""
    message = {
        "kind": "message",
        "messageId": "bench-0001",
        "role": "user",
        "parts": [{"kind": "text", "text": "Summarise the benchmark setup in one sentence."}],
    }
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": message}}).encode()


PASSTHROUGH: Final[tuple[Scenario, ...]] = (
    Scenario("health", "GET /health, a small JSON answer", (RequestSpec("health", "GET", "/health"),)),
    Scenario(
        "sessions",
        "POST /api/sessions with a 1 KiB JSON body",
        (RequestSpec("create-session", "POST", "/api/sessions", _JSON, session_body()),),
    ),
    Scenario(
        "a2a-stream",
        "POST /api/a2a/{ns}/{name}/ message/stream, an SSE answer read to its end",
        (
            RequestSpec(
                "message-stream",
                "POST",
                "/api/a2a/bench/assistant/",
                (*_JSON, ("Accept", "text/event-stream")),
                stream_body(),
            ),
        ),
    ),
)
