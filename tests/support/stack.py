"""A governed stack on loopback: the stand-ins (or kagent itself), a gateway in front, and the
bridge's and agent runtime's side of the conversation (see tests/support/upstream.py for the real kagent)."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from yarl import URL

from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.deployment import Keys, gateway_config
from sidecar.dev.devstack.stack import Devstack
from sidecar.identity.tokens import control_room, mint_context, mint_operator
from sidecar.server import Gateway
from tests.support.upstream import STANDIN, Upstream, bridge_headers, runtime_headers

SERVER = "example.org"


ALICE = "@alice:example.org"


BOB = "@bob:example.org"


BOT = "@bridge:example.org"


AGENT = "kagent/k8s-agent"


OTHER_AGENT = "kagent/helper"


APP = "kagent__NS__k8s_agent"


OTHER_APP = "kagent__NS__helper"


GHOST = "@k8s-agent:example.org"


#: Agents kagent knows (the real kagent proxies their invocations to the stand-in agents).
KNOWN_AGENTS = (AGENT, "kagent/k8s-agent-nomem", OTHER_AGENT, "kagent/helper-nomem", "kagent/plain")


ROOM = "!alicecontrol:example.org"


ROOM_B = "!otherroom:example.org"


def vector(seed: str) -> list[float]:
    """A deterministic unit-ish 768-vector (tests that need similarity use the embedding stand-in)."""
    import hashlib

    raw = hashlib.sha256(seed.encode()).digest()
    return [((raw[i % 32] / 255.0) - 0.5) for i in range(768)]


@dataclass
class Stack:
    dev: Devstack
    gw: Gateway
    http: aiohttp.ClientSession
    bridge_key: bytes
    clock: DevClock
    ghosts: dict[str, str] = field(default_factory=dict)
    upstream: Upstream = STANDIN
    operator_key: bytes = b""

    @property
    def parts(self) -> Any:
        return self.gw.parts

    # --- the bridge -------------------------------------------------------------------------
    def context(
        self,
        *,
        sub: str = ALICE,
        origin: str = "native",
        agent: str = AGENT,
        room_id: str = ROOM,
        members: list[str] | None = None,
        invited: list[str] | None = None,
        servers: list[str] | None = None,
        classification: str | None = None,
        encrypted: bool = False,
        join_rule: str = "invite",
        history: str = "joined",
        room_version: str = "12",
        acl_allow: list[str] | None = None,
        iat: int | None = None,
        exp: int | None = None,
        jti: str | None = None,
        key: bytes | None = None,
    ) -> str:
        now = int(self.clock().timestamp())
        ghost = self.ghosts.get(agent, GHOST)
        room = control_room(
            members if members is not None else [sub, BOT, ghost],
            SERVER,
            room_version=room_version,
            encrypted=encrypted,
            join_rule=join_rule,
            history_visibility=history,
            invited=invited or [],
        )
        if acl_allow is not None:
            room["server_acl"] = {**room["server_acl"], "allow": acl_allow}
        return mint_context(
            key or self.bridge_key,
            "HS256",
            sub=sub,
            origin=origin,
            agent=agent,
            room_id=room_id,
            room=room,
            servers=servers if servers is not None else [SERVER],
            classification=classification or self.parts.policy.pack.federation.classification,
            now=now,
            iat=iat,
            exp=exp,
            jti=jti,
        )

    async def scope(
        self,
        *,
        mxid: str = ALICE,
        agent: str = AGENT,
        room_id: str = ROOM,
        consent: bool = True,
        origin: str = "native",
    ) -> Any:
        store = self.parts.store
        scope, _ = await store.scopes.create_scope(mxid, origin, agent, "control_room", room_id, self.clock())
        if consent:
            scope, _ = await store.scopes.grant(scope.scope_id, "remember preferences", "v1", self.clock())
        return scope

    async def invoke(
        self,
        text: str = "hello there",
        *,
        agent: str = AGENT,
        user: str = ALICE,
        context: str | None = None,
        context_id: str | None = None,
        path_suffix: str = "/",
        query: str = "",
        extra_headers: dict[str, str] | None = None,
    ) -> tuple[aiohttp.ClientResponse, Any]:
        message: dict[str, Any] = {
            "role": "user",
            "messageId": secrets.token_hex(4),
            "parts": [{"kind": "text", "text": text}],
        }
        if context_id:
            message["contextId"] = context_id
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        headers = {"X-User-Id": user, **bridge_headers(self.upstream, user), **(extra_headers or {})}
        if context is not None:
            headers["X-Memgov-Context"] = context
        before = len(self.dev.recorder.of_kind("a2a"))
        async with self.http.post(
            f"{self.gw.data_url}/api/a2a/{agent}{path_suffix}{query}", json=body, headers=headers
        ) as resp:
            await resp.read()
        seen = self.dev.recorder.of_kind("a2a")
        return resp, (seen[-1] if len(seen) > before else None)

    async def session_key(self, **kwargs: Any) -> str:
        """Invoke with a valid context and return the key kagent received as X-User-Id."""
        resp, seen = await self.invoke(
            context=self.context(**{k: v for k, v in kwargs.items() if k != "text"}),
            **({"text": kwargs["text"]} if "text" in kwargs else {}),
        )
        assert resp.headers["X-Memgov-Decision"].startswith("forward"), resp.headers["X-Memgov-Decision"]
        return seen.user_id_header

    # --- someone editing kagent's definitions (the UI, a CLI, an operator) ------------------
    def operator_token(self) -> str:
        return mint_operator("ops-oncall", self.operator_key, "HS256", now=int(self.clock().timestamp()))

    async def definition(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None, operator: bool = False
    ) -> tuple[int, Any, dict[str, str]]:
        """A write (or read) of a kagent definition through the data plane, as the bridge's user."""
        headers = {"Content-Type": "application/json", **bridge_headers(self.upstream, ALICE)}
        if operator:
            headers["X-Memgov-Operator"] = f"Bearer {self.operator_token()}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        # The path is sent as written (a look-alike spelling must reach the gateway unnormalized).
        url = URL(self.gw.data_url + path, encoded=True)
        async with self.http.request(method, url, data=data, headers=headers) as resp:
            text = await resp.read()
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = text
            return resp.status, parsed, dict(resp.headers)

    # --- the agent runtime ------------------------------------------------------------------
    async def memory(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        user_header: str | None = None,
        agent_header: str | None = APP,
        extra_headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        headers = {**runtime_headers(self.upstream, AGENT), **(extra_headers or {})}
        if user_header is not None:
            headers["X-User-Id"] = user_header
        if agent_header is not None:
            headers["X-Agent-Name"] = agent_header
        async with self.http.request(method, self.gw.data_url + path, json=body, headers=headers) as resp:
            raw = await resp.read()
            try:
                parsed = await resp.json(content_type=None)
            except ValueError:
                parsed = raw
            return resp.status, parsed, dict(resp.headers)

    async def save(
        self, key: str, content: str, *, agent_name: str = APP, ttl_days: int | None = None, **kw: Any
    ) -> tuple[int, Any, dict[str, str]]:
        body: dict[str, Any] = {
            "agent_name": agent_name,
            "user_id": key,
            "content": content,
            "vector": await self.embed_one(content),
        }
        if ttl_days is not None:
            body["ttl_days"] = ttl_days
        return await self.memory("POST", "/api/memories/sessions", body, **kw)

    async def search(
        self, key: str, query: str, *, agent_name: str = APP, limit: int = 5, **kw: Any
    ) -> tuple[int, Any, dict[str, str]]:
        body = {
            "agent_name": agent_name,
            "user_id": key,
            "vector": await self.embed_one(query),
            "limit": limit,
            "min_score": 0.0,
        }
        return await self.memory("POST", "/api/memories/search", body, **kw)

    async def embed_one(self, text: str) -> list[float]:
        async with self.http.post(
            self.dev.embedding_url + "/embeddings", json={"model": "m", "input": [text], "dimensions": 768}
        ) as resp:
            return (await resp.json())["data"][0]["embedding"]

    async def rows(self, user_id: str | None = None) -> list[Any]:
        return await self.dev.store.rows(user_id=user_id)

    def kagent_log(self) -> str:
        """What kagent logged (a sink: memgov must keep session keys and MXIDs out of it)."""
        return self.dev.kagent_log()


#: The ModelConfigs the memory agent uses (its model and its memory's embedding provider).
AGENT_MODEL_CONFIGS = ("default-model-config", "embeddings")


#: The embedding model kagent's runtime under test is configured with (tests/enforce/kagent_runtime_driver.py).
RUNTIME_EMBEDDING_MODEL = "text-embedding-3-small"


def stack_settings(
    keys: Keys,
    kagent_url: str,
    dev: Devstack,
    kagent: Upstream = STANDIN,
    *,
    agents: dict[str, Any] | None = None,
    **overrides: Any,
) -> Any:
    """Settings of a data-plane test gateway: the packaged pack, the two memory agents (and ``agents``),
    ``overrides`` merged in."""
    return gateway_config(
        keys,
        kagent_url=kagent_url,
        embedding_url=dev.embedding_url,
        state_url=f"sqlite:///{keys.folder.parent}/state.db",
        server=SERVER,
        bridge_bot=BOT,
        agents={
            # The model its runtime embeds with, as the chart renders an Agent's declared memory ModelConfig.
            AGENT: {
                "disabled_variant": "k8s-agent-nomem",
                "ghost": GHOST,
                "embedding_model": RUNTIME_EMBEDDING_MODEL,
                "embedding_dimensions": 768,
                "model_configs": list(AGENT_MODEL_CONFIGS),
            },
            OTHER_AGENT: {"disabled_variant": "helper-nomem", "ghost": "@helper:example.org"},
            **(agents or {}),
        },
        upstream={"kagent_auth_mode": kagent.auth_mode, **overrides.pop("upstream", {})},
        **overrides,
    )


def now_s() -> int:
    return int(time.time())
