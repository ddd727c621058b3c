"""The system under test: kagent and embedding stand-ins and a gateway (Cedar, SQLite) in this process.

Everything the fuzzer builds state with goes through the gateway's own interfaces (control API,
a governed invocation, a governed save), so the stack keeps working while the internals change.
Beyond those interfaces it looks at four things only: the shared clock, what the stand-ins
received (``Chaos``), the captured log lines and the state database file (scanned, never written).
"""

from __future__ import annotations

import io
import json
import secrets
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jwt

from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.deployment import local_gateway, memory_agents
from sidecar.dev.devstack.gojson import go_query
from sidecar.dev.devstack.stack import Devstack
from sidecar.dev.devstack.store import MemoryRow
from sidecar.dev.devstack.vectors import embed_text
from sidecar.dev.fuzz.chaos import Chaos
from sidecar.identity.appname import app_name, parse_agent_ref
from sidecar.logs import configure_logging
from sidecar.metrics import exposition
from sidecar.policy.model import Limits
from sidecar.policy.pack import load_federation, load_limits
from sidecar.server import Gateway
from sidecar.settings import PACKAGED_POLICY_DIR

SERVER = "fuzz.example"
BOT = f"@bridge:{SERVER}"
AGENT = "kagent/k8s-agent"
AGENT2 = "kagent/helper"
PLAIN_AGENT = "kagent/plain"  # exists in kagent, has no memory
AGENTS = {AGENT: "@k8s-agent:" + SERVER, AGENT2: "@helper:" + SERVER}
#: The embedding model the agents' runtimes use (the stand-in provider answers for any name).
EMBEDDING_MODEL = "text-embedding-3-small"
#: The gateway gives up on a silent upstream after this long (every pool); a "delay" fault outlasts it.
#: The stand-ins share the gateway's event loop (and the generator's GIL), so a busy machine slows
#: an honest answer too: the timeout leaves room for that, or a healthy upstream would read as a
#: silent one and the oracle would see a fault no case armed.
READ_TIMEOUT_S = 1.5
DELAY_S = 1.8
#: An erasure waits this long for writes still under way (a delayed write holds one for READ_TIMEOUT_S).
QUIESCE_TIMEOUT_S = 4
TYP = {"context": "memgov-context+jwt", "subject": "memgov-subject+jwt", "operator": "memgov-operator+jwt"}


def canonical_app(ref: str) -> str:
    """kagent's app_name of an agent reference (the one spelling memgov may forward)."""
    return app_name(*parse_agent_ref(ref))


class SetupFailed(Exception):
    """The gateway refused a well-formed step of a case's setup (the message names the step and status)."""


class LogCapture(io.StringIO):
    """Every log line the process writes; :meth:`take` hands over what arrived since the last call."""

    def take(self) -> str:
        text = self.getvalue()
        self.seek(0)
        self.truncate()
        return text


@dataclass
class Scope:
    """A scope the fuzzer created, and what it knows about it."""

    scope_id: str
    principal: str
    agent: str
    room: str
    key: str = ""
    keys: list[str] = field(default_factory=list)  # every session key ever handed out, oldest first
    facts: set[str] = field(default_factory=set)  # sentinels saved into it through the gateway


@dataclass
class FuzzStack:
    """Handles on the running stack (see :func:`fuzz_stack`)."""

    gw: Gateway
    dev: Devstack
    chaos: Chaos
    clock: DevClock
    logs: LogCapture
    http: aiohttp.ClientSession
    bridge_key: bytes
    operator_key: bytes
    state_path: Path
    limits: Limits
    classification: str
    neighbours: dict[str, Scope] = field(default_factory=dict)
    scopes: dict[str, Scope] = field(default_factory=dict)
    storage_keys: dict[str, set[str]] = field(default_factory=dict)  # scope id -> every key kagent was sent
    _serial: int = 0
    _labels: set[str] = field(default_factory=set)

    # --- tokens --------------------------------------------------------------------------------
    def now(self) -> int:
        return int(self.clock().timestamp())

    def token(
        self, kind: str, claims: dict[str, Any], *, key: bytes | None = None, headers: dict[str, Any] | None = None
    ) -> str:
        """A JWT of one kind, typed as SPEC §5 says unless ``headers`` overrides it."""
        secret = key if key is not None else (self.operator_key if kind == "operator" else self.bridge_key)
        return jwt.encode(
            claims, secret, algorithm="HS256", headers=headers if headers is not None else {"typ": TYP[kind]}
        )

    def subject_claims(self, sub: str) -> dict[str, Any]:
        now = self.now()
        return {"sub": sub, "iat": now, "exp": now + 60, "jti": secrets.token_hex(8)}

    def operator_claims(self) -> dict[str, Any]:
        now = self.now()
        return {"sub": "fuzz-operator", "role": "operator", "iat": now, "exp": now + 60, "jti": secrets.token_hex(8)}

    def context_claims(self, of: Scope, /, **over: Any) -> dict[str, Any]:
        """A fresh delegation context for a scope's principal, agent and control room; ``over`` replaces claims."""
        now = self.now()
        claims: dict[str, Any] = {
            "sub": of.principal,
            "origin": "native",
            "agent": of.agent,
            "scope": {"kind": "control_room", "room_id": of.room},
            "room": {
                "room_version": "12",
                "encrypted": False,
                "join_rule": "invite",
                "history_visibility": "joined",
                "members": [of.principal, BOT, AGENTS[of.agent]],
                "invited": [],
                "server_acl": {"allow": [SERVER], "deny": [], "allow_ip_literals": False},
            },
            "audience": {"servers": [SERVER], "classification": self.classification},
            "iat": now,
            "exp": now + 60,
            "jti": secrets.token_hex(8),
        }
        claims.update(over)
        return claims

    # --- state through the gateway's interfaces --------------------------------------------------
    async def control(
        self, method: str, path: str, sub: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        auth = {"Authorization": "Bearer " + self.token("subject", self.subject_claims(sub)), **(headers or {})}
        async with self.http.request(method, self.gw.control_url + path, json=body, headers=auth) as resp:
            return resp.status, await resp.json(content_type=None)

    def stranger(self, agent: str = AGENT) -> Scope:
        """A fresh principal and control room with no scope (the id is one nobody holds)."""
        self._serial += 1
        return Scope("s" + secrets.token_hex(12), f"@fz{self._serial}:{SERVER}", agent, f"!fz{self._serial}:{SERVER}")

    async def new_scope(self, *, agent: str = AGENT, consent: bool = True) -> Scope:
        """A fresh principal, control room and scope; consented unless told otherwise."""
        principal, room = (s := self.stranger(agent)).principal, s.room
        status, body = await self.control(
            "POST",
            "/v1/scopes",
            principal,
            {
                "principal": {"mxid": principal, "origin": "native"},
                "agent": agent,
                "scope": {"kind": "control_room", "room_id": room},
            },
        )
        if status != 201:
            raise SetupFailed(f"scope creation answered {status}")
        scope = Scope(body["scope_id"], principal, agent, room)
        self.scopes[scope.scope_id] = scope
        if consent:
            await self.grant(scope)
        return scope

    async def grant(self, scope: Scope) -> None:
        status, _ = await self.control(
            "PUT",
            f"/v1/scopes/{scope.scope_id}/consent",
            scope.principal,
            {"purpose": "fuzzing the gateway", "policy_version": "v1"},
        )
        if status != 200:
            raise SetupFailed(f"consent answered {status}")

    async def session_key(self, scope: Scope, *, new_conversation: bool = True) -> str:
        """Invoke the agent as the bridge would and keep the session key kagent received."""
        message: dict[str, Any] = {
            "role": "user",
            "messageId": secrets.token_hex(4),
            "parts": [{"kind": "text", "text": "hello"}],
        }
        if not new_conversation:
            message["contextId"] = secrets.token_hex(8)
        context = self.token("context", self.context_claims(scope))
        mark = len(self.chaos.seen)
        async with self.http.post(
            f"{self.gw.data_url}/api/a2a/{scope.agent}/",
            headers={"X-Memgov-Context": context},
            json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}},
        ) as resp:
            await resp.read()
        keys = [s.header("X-User-Id") for s in self.chaos.since(mark) if s.upstream == "kagent"]
        if resp.headers.get("X-Memgov-Decision", "").split(";")[0] != "forward" or not keys or not keys[-1]:
            raise SetupFailed("the setup invocation was not forwarded with a session key")
        scope.key = str(keys[-1])
        scope.keys.append(scope.key)
        return scope.key

    async def seed(self, scope: Scope, sentinel: str) -> str:
        """Save one fact through the gateway, as the agent runtime would; its entry id."""
        content = f"fuzz fact {sentinel}"
        body = {
            "agent_name": canonical_app(scope.agent),
            "user_id": scope.key,
            "content": content,
            "vector": embed_text(content),
        }
        async with self.http.post(
            self.gw.data_url + "/api/memories/sessions", json=body, headers={"X-Agent-Name": canonical_app(scope.agent)}
        ) as resp:
            answer = await resp.json(content_type=None)
            if resp.status != 201:
                raise SetupFailed(f"seeding a fact answered {resp.status}")
        scope.facts.add(sentinel)
        return str(answer["id"])

    # --- sinks ------------------------------------------------------------------------------------
    def _state(self) -> sqlite3.Connection:
        con = sqlite3.connect(f"file:{self.state_path}?mode=ro", uri=True)
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        return con

    def audit_mark(self) -> int:
        """The newest audit row id."""
        with self._state() as con:
            return int(con.execute("SELECT coalesce(max(rowid), 0) FROM audit").fetchone()[0])

    def audit_since(self, mark: int) -> list[str]:
        """Audit rows written after ``mark``, as text."""
        with self._state() as con:
            return [repr(row) for row in con.execute("SELECT * FROM audit WHERE rowid > ?", (mark,))]

    def state_text(self) -> str:
        """Every row of every table of the state store, as text."""
        with self._state() as con:
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return "\n".join(repr(row) for t in tables for row in con.execute(f'SELECT * FROM "{t}"'))

    def new_metric_labels(self) -> list[str]:
        """Label sets of the metrics exposition not seen before this call."""
        fresh = []
        for line in exposition().decode("utf-8", "replace").splitlines():
            start, end = line.find("{"), line.rfind("}")
            if start > 0 and end > start and line[start:end] not in self._labels:
                self._labels.add(line[start:end])
                fresh.append(line[: end + 1])
        return fresh

    def learn_storage_keys(self) -> None:
        """Remember every storage key kagent has been sent so far (bodies and queries), by scope."""
        for seen in self.chaos.seen:
            if seen.upstream != "kagent" or not seen.path.startswith("/api/memories"):
                continue
            users = go_query(seen.raw_path.partition("?")[2]).get("user_id", [])
            try:
                body = json.loads(seen.body or b"null")
            except (ValueError, RecursionError):
                body = None
            batch = isinstance(body, dict) and isinstance(body.get("items"), list)
            items: list[Any] = body["items"] if batch else [body]
            users += [i["user_id"] for i in items if isinstance(i, dict) and isinstance(i.get("user_id"), str)]
            for user in users:
                if user.startswith("mgs1.") and user.count(".") >= 2:
                    self.storage_keys.setdefault(user.split(".")[1], set()).add(user)

    async def kagent_rows(self, scope: Scope) -> list[MemoryRow]:
        """Rows kagent holds under any storage key the scope was ever given, whatever their agent name."""
        self.learn_storage_keys()
        rows: list[MemoryRow] = []
        for key in sorted(self.storage_keys.get(scope.scope_id, ())):
            rows += await self.dev.store.rows(user_id=key)
        return rows

    async def openapi(self) -> dict[str, Any]:
        """The control API's OpenAPI document, as the gateway serves it."""
        async with self.http.get(self.gw.control_url + "/v1/openapi.json") as resp:
            doc: dict[str, Any] = await resp.json()
            return doc


@asynccontextmanager
async def fuzz_stack() -> AsyncIterator[FuzzStack]:
    """Start the stand-ins and a gateway with two memory agents and a consented neighbour scope each."""
    clock, logs, chaos = DevClock(), LogCapture(), Chaos(delay_s=DELAY_S)
    configure_logging("debug", logs)  # every level: a leak at debug is still a leak
    try:
        async with local_gateway(
            "memgov-fuzz-",
            clock,
            server=SERVER,
            bridge_bot=BOT,
            # Each agent's model declared (as the chart renders it), so forget-one rotates, exact over REST.
            agents=memory_agents(AGENTS.items(), model=EMBEDDING_MODEL),
            middlewares=[chaos.middleware],
            before_stop=chaos.settle,
            upstream={
                "read_timeout_s": READ_TIMEOUT_S,
                "memory_timeout_s": READ_TIMEOUT_S,
                "embedding_timeout_s": READ_TIMEOUT_S,
            },
            enforce={"write_lease_s": 1},
            erasure={"quiesce_timeout_s": QUIESCE_TIMEOUT_S},
        ) as local:
            stack = FuzzStack(
                gw=local.gw,
                dev=local.dev,
                chaos=chaos,
                clock=clock,
                logs=logs,
                http=local.http,
                bridge_key=local.keys.bridge,
                operator_key=local.keys.operator,
                state_path=local.folder / "state.db",
                limits=load_limits(PACKAGED_POLICY_DIR),
                classification=load_federation(PACKAGED_POLICY_DIR).classification,
            )
            for agent in AGENTS:
                scope = await stack.new_scope(agent=agent)
                await stack.session_key(scope)
                stack.neighbours[agent] = scope
            yield stack
    finally:
        configure_logging("info")
