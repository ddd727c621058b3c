"""The attacker's bench: a real ``memgov serve`` process in front of the kagent stand-in, seen over HTTP only.

A ``Target`` mints tokens by hand (PyJWT) the way a compromised agent pod, a tool or an anonymous
in-cluster client would, and reads the stand-in's table to see what really landed."""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jwt

from sidecar.dev.devstack import Devstack, MemoryRow
from sidecar.dev.devstack.deployment import Keys
from sidecar.dev.devstack.vectors import embed_text
from tests.support.deployment import deploy
from tests.support.harness import AGENT, ALICE, APP, BOT, GHOST, MODEL, ROOM, SERVER, policy_pack
from tests.support.process import Gate, GatewayProcess
from tests.support.procs import process_settings

CONTEXT, SUBJECT, OPERATOR = "memgov-context+jwt", "memgov-subject+jwt", "memgov-operator+jwt"


#: An agent whose name has a hyphen: kagent's runtimes call it kagent__NS__k8s_agent, the UI kagent__NS__k8s-agent.
K8S_AGENT, K8S_GHOST = "kagent/k8s-agent", "@k8s-agent:example.org"


CANONICAL, RAW = "kagent__NS__k8s_agent", "kagent__NS__k8s-agent"


AGENTS = {
    AGENT: {"disabled_variant": "helper-nomem", "ghost": GHOST},
    K8S_AGENT: {"disabled_variant": "k8s-agent-nomem", "ghost": K8S_GHOST},
}


@dataclass
class Target:
    """One gateway process, the stand-ins behind it, and the key material an attacker might hold."""

    gw: GatewayProcess
    dev: Devstack
    keys: Keys
    http: aiohttp.ClientSession
    gate: Gate | None = None

    # --- tokens, as the bridge (or an attacker holding its key material) would mint them ---------
    def mint(self, claims: dict[str, Any], typ: str | None, key: bytes | None = None) -> str:
        headers = {"typ": typ} if typ else {"typ": None}
        return jwt.encode(claims, key or self.keys.bridge, algorithm="HS256", headers=headers)

    def subject_token(self, mxid: str = ALICE) -> str:
        now = int(time.time())
        return self.mint({"sub": mxid, "iat": now, "exp": now + 60, "jti": secrets.token_hex(8)}, SUBJECT)

    def context(self, mxid: str = ALICE, room: str = ROOM, agent: str = AGENT) -> str:
        now = int(time.time())
        ghost = str(AGENTS[agent]["ghost"]) if agent in AGENTS else GHOST
        claims = {
            "sub": mxid,
            "origin": "native",
            "agent": agent,
            "scope": {"kind": "control_room", "room_id": room},
            "room": {
                "room_version": "12",
                "encrypted": False,
                "join_rule": "invite",
                "history_visibility": "joined",
                "members": [mxid, BOT, ghost],
                "invited": [],
                "server_acl": {"allow": [SERVER], "deny": [], "allow_ip_literals": False},
            },
            "audience": {"servers": [SERVER], "classification": "private"},
            "iat": now,
            "exp": now + 60,
            "jti": secrets.token_hex(8),
        }
        return self.mint(claims, CONTEXT)

    # --- the control API, as the subject ---------------------------------------------------------
    async def control(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        status, body, _ = await self.control_full(method, path, token=token, json=json, headers=headers)
        return status, body

    async def control_full(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        sent = dict(headers or {})
        sent["Authorization"] = f"Bearer {token if token is not None else self.subject_token()}"
        async with self.http.request(method, self.gw.control_url + path, json=json, headers=sent) as resp:
            return resp.status, await resp.json(content_type=None), dict(resp.headers)

    async def consented_scope(self, mxid: str = ALICE, room: str = ROOM, agent: str = AGENT) -> str:
        status, body = await self.control(
            "POST",
            "/v1/scopes",
            token=self.subject_token(mxid),
            json={
                "principal": {"mxid": mxid, "origin": "native"},
                "agent": agent,
                "scope": {"kind": "control_room", "room_id": room},
            },
        )
        assert status in (200, 201), body
        scope_id: str = body["scope_id"]
        status, body = await self.control(
            "PUT",
            f"/v1/scopes/{scope_id}/consent",
            token=self.subject_token(mxid),
            json={"purpose": "remember my preferences", "policy_version": "v1"},
        )
        assert status == 200, body
        return scope_id

    async def confirmed(self, scope_id: str, action: str) -> tuple[int, Any]:
        """forget-all or off, both calls (the second with the confirmation token)."""
        status, body = await self.control("POST", f"/v1/scopes/{scope_id}/{action}")
        assert status == 202, body
        return await self.control("POST", f"/v1/scopes/{scope_id}/{action}", json={"confirm": body["confirm_token"]})

    # --- the data plane, as the bridge and as the agent runtime -----------------------------------
    async def session_key(self, mxid: str = ALICE, room: str = ROOM, agent: str = AGENT) -> str:
        """Invoke the agent with a valid context; the key kagent received as X-User-Id."""
        before = len(self.dev.recorder.of_kind("a2a"))
        status, _, headers = await self.invoke(agent=agent, context=self.context(mxid, room, agent))
        assert status == 200 and headers["X-Memgov-Decision"].startswith("forward"), headers
        key = self.dev.recorder.of_kind("a2a")[before:][-1].user_id_header
        assert key is not None
        return key

    async def invoke(
        self,
        *,
        agent: str = AGENT,
        context: str | None = None,
        user: str = ALICE,
        extra: dict[str, str] | None = None,
        suffix: str = "/",
    ) -> tuple[int, Any, dict[str, str]]:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": {
                    "role": "user",
                    "messageId": secrets.token_hex(4),
                    "parts": [{"kind": "text", "text": "hello"}],
                }
            },
        }
        headers = {"X-User-Id": user, **(extra or {})}
        if context is not None:
            headers["X-Memgov-Context"] = context
        return await self.post(f"/api/a2a/{agent}{suffix}", body, headers=headers)

    async def post(
        self, path: str, body: Any, *, headers: dict[str, str] | None = None, raw: bytes | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        data = raw if raw is not None else None
        kwargs: dict[str, Any] = {"data": data} if raw is not None else {"json": body}
        async with self.http.post(self.gw.data_url + path, headers=headers, **kwargs) as resp:
            text = await resp.read()
            try:
                parsed = await resp.json(content_type=None)
            except ValueError:
                parsed = text
            return resp.status, parsed, dict(resp.headers)

    def fact(self, key: str, text: str, agent_name: str = APP) -> dict[str, Any]:
        return {"agent_name": agent_name, "user_id": key, "content": text, "vector": embed_text(text)}

    async def save(self, key: str, text: str, agent_name: str = APP) -> tuple[int, Any, dict[str, str]]:
        return await self.post(
            "/api/memories/sessions",
            self.fact(key, text, agent_name),
            headers={"X-Agent-Name": agent_name, "X-User-Id": key},
        )

    async def search(self, key: str, query: str, agent_name: str = APP) -> tuple[int, Any, dict[str, str]]:
        body = {"agent_name": agent_name, "user_id": key, "vector": embed_text(query), "limit": 10, "min_score": 0}
        return await self.post("/api/memories/search", body, headers={"X-Agent-Name": agent_name})

    async def rows(self) -> list[MemoryRow]:
        """Every row kagent's table holds."""
        return await self.dev.store.rows()

    async def kagent_get(self, path: str) -> tuple[int, Any]:
        """Ask kagent directly, around memgov (what a mis-set NetworkPolicy or kagent's UI allows)."""
        async with self.http.get(self.dev.kagent_url + path) as resp:
            return resp.status, await resp.json(content_type=None)

    def state_count(self, sql: str) -> int:
        """One count from the gateway's own SQLite state file (the store an attacker tries to grow)."""
        with contextlib.closing(sqlite3.connect(self.gw.workdir.parent / "state.db")) as db:
            return int(db.execute(sql).fetchone()[0])

    def state_dump(self) -> str:
        """Every row of every table of the gateway's own state store, as text."""
        with contextlib.closing(sqlite3.connect(self.gw.workdir.parent / "state.db")) as db:
            return "\n".join(db.iterdump())

    def gateway_log(self) -> str:
        return (self.gw.workdir / "gateway.log").read_text(errors="replace")


Launch = Callable[..., Awaitable[Target]]


@asynccontextmanager
async def launched(
    tmp: Path,
    *,
    limits: dict[str, int] | None = None,
    gated: bool = False,
    store_url: str | None = None,
    stream_delay_s: float = 0,
    **settings: Any,
) -> AsyncIterator[Target]:
    """Start the stand-ins and a gateway process configured by ``settings`` (merged into the defaults).

    ``gated`` puts a gate (which can hold, fail or fake requests) between the gateway and kagent;
    ``store_url`` gives the stand-in a PostgreSQL table (for the kagent-db adapter).
    """
    pack = policy_pack(tmp, **(limits or {}))
    upstream = settings.pop("upstream", {})
    settings.setdefault("agents", AGENTS)

    async def config_of(keys: Keys, kagent_url: str, dev: Devstack) -> dict[str, Any]:
        cfg = process_settings(keys, pack, kagent_url, f"sqlite:///{tmp}/state.db", **settings)
        cfg["upstream"].update({"embedding_url": dev.embedding_url, **upstream})
        return cfg

    async with deploy(
        tmp, config_of, process=True, gated=gated, stream_delay_s=stream_delay_s, store_url=store_url
    ) as d:
        yield Target(d.gateway_process, d.dev, d.keys, d.http, d.gate)


# The agents with their embedding model pinned in configuration, as a rotation needs it.
PINNED = {ref: {**agent, "embedding_model": MODEL, "embedding_dimensions": 768} for ref, agent in AGENTS.items()}


async def listed_entries(t: Target, scope_id: str) -> list[dict[str, str]]:
    """The scope's live entries as the control API lists them to its user."""
    status, page = await t.control("GET", f"/v1/scopes/{scope_id}/entries", headers={"X-Memgov-Context": t.context()})
    assert status == 200, page
    entries: list[dict[str, str]] = page["entries"]
    return entries
