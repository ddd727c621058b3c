"""Governed scenarios: a memory.search / memory.save mix through memgov's full pipeline.

memgov runs the Cedar engine and a real state store (SQLite, or a throwaway PostgreSQL), with a
consented scope and its session key; the upstream (the stand-in, or kagent v0.9.11 itself on
PostgreSQL with pgvector) and the bare proxy get the very same requests. Limits are raised in a
copy of the pack so every request is forwarded: a refusal would be cheaper than the work being
measured.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from sidecar.dev.bench.loadgen import RequestSpec
from sidecar.dev.bench.scenarios import Scenario
from sidecar.identity.keys import SessionKeys
from sidecar.identity.tokens import mint_subject
from sidecar.settings import PACKAGED_POLICY_DIR

SERVER: Final = "bench.example"
SUBJECT: Final = f"@bench:{SERVER}"
AGENT: Final = "bench/assistant"
APP: Final = "bench__NS__assistant"
SEARCH_ROOM: Final = f"!bench-search:{SERVER}"
#: Saves are spread over this many scopes (users): with the cap lifted, one scope taking every save
#: would grow without bound, which no scope can under a real cap (limits.yaml: 100 entries).
SAVE_SCOPES: Final = 32
# Every budget and cap far above what a run can reach, so the decision is always "forward".
_UNBOUNDED: Final = {
    "max_entries": 10**9,
    "rate_per_minute": 10**9,
    "rate_burst": 10**9,
    "hourly_operations": 10**9,
    "embedding_items_per_agent_hour": 10**9,
    "embedding_items_per_source_hour": 10**9,
}
_JSON: Final = (("Content-Type", "application/json"), ("X-Agent-Name", APP))


def _vector(seed: int) -> list[float]:
    return [((seed * 31 + i * 17) % 97) / 97.0 - 0.5 for i in range(768)]


@dataclass(frozen=True)
class GovernedScenario(Scenario):
    """memory.search and memory.save (3:1) with a valid session key; ``state`` picks the backend."""

    state: str = "sqlite"
    #: Only one of the two requests ("memory-search" or "memory-save"), at the weight it has in the mix.
    only: str | None = None
    _files: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def gateway_overrides(self, workdir: Path) -> dict[str, Any]:
        pack = workdir / "pack"
        shutil.copytree(PACKAGED_POLICY_DIR, pack, dirs_exist_ok=True)
        limits_file = pack / "data" / "limits.yaml"
        limits = yaml.safe_load(limits_file.read_text())
        limits_file.write_text(yaml.safe_dump({**limits, **_UNBOUNDED}))
        session, bridge = secrets.token_hex(32).encode(), secrets.token_hex(32).encode()
        (workdir / "session.key").write_bytes(session)
        (workdir / "bridge.key").write_bytes(bridge)
        self._files.update(session=session, bridge=bridge)
        if self.state == "postgresql":
            from sidecar.dev.devstack.pg import start_pg

            server = start_pg()
            self._files["pg"] = server
            state_url = server.create_database("memgov")
        else:
            state_url = f"sqlite:///{workdir}/state.db"
        return {
            "state": {"url": state_url},
            "policy": {"engine": "cedar", "dir": str(pack), "reload_interval_s": 0},
            "secrets": {"session_key_file": str(workdir / "session.key")},
            "trust": {"bridge_key_file": str(workdir / "bridge.key")},
            "matrix": {"server_name": SERVER, "bridge_bot": f"@bridge:{SERVER}"},
            "agents": {AGENT: {"disabled_variant": "assistant-nomem", "ghost": f"@assistant:{SERVER}"}},
            "log": {"level": "warning"},
        }

    @contextmanager
    def prepared(self, urls: Mapping[str, Mapping[str, str]]) -> Iterator[tuple[RequestSpec, ...]]:
        # Searches and saves use separate scopes: kagent (and its stand-in) scans a whole namespace per
        # search, so a namespace that grows with the saves would measure the stand-in, not memgov.
        try:
            search_key = self._consent(urls["memgov"]["control_url"], SEARCH_ROOM)
            save_keys = [
                self._consent(urls["memgov"]["control_url"], f"!bench-save-{i}:{SERVER}") for i in range(SAVE_SCOPES)
            ]
            upstream = urls[self.upstream]["url"]
            for i in range(5):
                fact = {
                    "agent_name": APP,
                    "user_id": search_key,
                    "content": f"seed fact {i}",
                    "vector": _vector(10 + i),
                }
                # Through memgov (stored under the storage key) and straight into the namespace (a) and (b)
                # search (the session key as user_id), so all three targets rank and count the same five rows.
                self._post(urls["memgov"]["url"], "/api/memories/sessions", fact)
                self._post(upstream, "/api/memories/sessions", fact)
            search = json.dumps(
                {"agent_name": APP, "user_id": search_key, "vector": _vector(1), "limit": 5, "min_score": 0.0}
            ).encode()
            saves = [
                json.dumps(
                    {"agent_name": APP, "user_id": key, "content": "prefers short answers", "vector": _vector(2)}
                ).encode()
                for key in save_keys
            ]
            mix = (
                RequestSpec("memory-search", "POST", "/api/memories/search", _JSON, search, weight=3 * SAVE_SCOPES),
                *(
                    RequestSpec("memory-save", "POST", "/api/memories/sessions", _JSON, save, weight=1)
                    for save in saves
                ),
            )
            yield tuple(spec for spec in mix if self.only in (None, spec.name))
        finally:
            server = self._files.pop("pg", None)
            if server is not None:
                server.stop()

    @staticmethod
    def _post(base: str, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
        req = urllib.request.Request(
            base + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "X-Agent-Name": APP, **(headers or {})},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
            return answer

    def _consent(self, control_url: str, room: str) -> str:
        """Create and consent one bench scope through the control API; return its session key."""

        def call(method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
            token = mint_subject(SUBJECT, self._files["bridge"], "HS256", now=int(time.time()))
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            req = urllib.request.Request(
                control_url + path, data=json.dumps(body).encode(), method=method, headers=headers
            )
            with urllib.request.urlopen(req, timeout=30) as resp:
                answer: dict[str, Any] = json.loads(resp.read())
                return answer

        scope = call(
            "POST",
            "/v1/scopes",
            {
                "principal": {"mxid": SUBJECT, "origin": "native"},
                "agent": AGENT,
                "scope": {"kind": "control_room", "room_id": room},
            },
        )
        granted = call(
            "PUT", f"/v1/scopes/{scope['scope_id']}/consent", {"purpose": "benchmark", "policy_version": "bench-1"}
        )
        return SessionKeys(self._files["session"]).session_key(scope["scope_id"], granted["generation"])


GOVERNED: Final[tuple[Scenario, ...]] = (
    GovernedScenario(
        "governed-sqlite", "memory.search/save 3:1 through the full pipeline, Cedar, SQLite state", (), state="sqlite"
    ),
    GovernedScenario("governed-postgresql", "memory.search/save 3:1, Cedar, PostgreSQL state", (), state="postgresql"),
    GovernedScenario(
        "governed-kagent",
        "memory.search/save 3:1, Cedar, SQLite state, kagent v0.9.11 itself upstream",
        (),
        upstream="kagent",
        state="sqlite",
    ),
    # Apart: kagent v0.9.11 deadlocks under concurrent searches and saves of one namespace
    # (docs/conformance.md), which would measure its deadlock detector rather than memgov.
    GovernedScenario(
        "governed-kagent-search",
        "memory.search only, Cedar, SQLite state, kagent v0.9.11 itself upstream",
        (),
        upstream="kagent",
        state="sqlite",
        only="memory-search",
    ),
    GovernedScenario(
        "governed-kagent-save",
        "memory.save only, Cedar, SQLite state, kagent v0.9.11 itself upstream",
        (),
        upstream="kagent",
        state="sqlite",
        only="memory-save",
    ),
    # The same two on PostgreSQL state, the production store (commits cost round trips there).
    GovernedScenario(
        "governed-kagent-search-pg",
        "memory.search only, Cedar, PostgreSQL state, kagent v0.9.11 itself upstream",
        (),
        upstream="kagent",
        state="postgresql",
        only="memory-search",
    ),
    GovernedScenario(
        "governed-kagent-save-pg",
        "memory.save only, Cedar, PostgreSQL state, kagent v0.9.11 itself upstream",
        (),
        upstream="kagent",
        state="postgresql",
        only="memory-save",
    ),
)
