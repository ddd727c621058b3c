"""A gateway in front of the kagent stand-in, with the tokens, contexts and saves a control test needs.

Shared by tests/control and tests/erasure: keys on disk, a policy pack whose rate limits do not
get in the way of bulk saves, a real gateway (data plane + control API) on loopback, and
helpers that act as the bridge (subject tokens, signed contexts) and as the agent runtime
(saves through the governed data plane). With a real upstream (tests/support/upstream.py) the
gateway sits in front of kagent v0.9.11 itself and ``rows`` reads kagent's own table.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import asyncpg

from sidecar.control.client import ControlClient, JsonAnswers, Token
from sidecar.control.http import SWEEPERS
from sidecar.dev.devstack import DbFault, Devstack, MemoryRow
from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.devstack.deployment import Keys, gateway_config, pack_with_limits
from sidecar.dev.devstack.pg import PgServer
from sidecar.dev.devstack.vectors import embed_text
from sidecar.erasure.sweeper import Sweepers
from sidecar.identity.tokens import control_room, mint_context, mint_operator, mint_subject
from sidecar.server import Gateway
from sidecar.state.types import Namespace
from tests.support.deployment import deploy
from tests.support.upstream import STANDIN, Upstream, runtime_headers

SERVER = "example.org"
ALICE = "@alice:example.org"
BOB = "@bob:example.org"
BOT = "@bridge:example.org"
AGENT = "team/helper"
GHOST = "@agent-helper:example.org"
APP = "team__NS__helper"
ROOM = "!ctrl-alice:example.org"
BOB_ROOM = "!ctrl-bob:example.org"
ROLE_SQL = Path(__file__).resolve().parents[2] / "docs" / "erasure-role.sql"
#: Limits of the test pack: the packaged ones, minus the rate limits that would refuse bulk saves.
TEST_LIMITS = {"max_entries": 1000, "rate_per_minute": 100_000, "rate_burst": 100_000, "hourly_operations": 1_000_000}


def policy_pack(folder: Path, **limits: int) -> Path:
    """A copy of the packaged pack whose limits are the test ones (:data:`TEST_LIMITS`) and ``limits``."""
    return pack_with_limits(folder, {**TEST_LIMITS, **limits})


def overrides(
    keys: Keys,
    pack: Path,
    kagent_url: str,
    state_url: str,
    *,
    adapter: str = "rest",
    kagent_db_url: str | None = None,
    upstream: Upstream = STANDIN,
    upstream_settings: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Settings of a control-test gateway; ``upstream_settings`` adds to the ``upstream`` section."""
    erasure = {
        "adapter": adapter,
        "kagent_db_url": kagent_db_url,
        "quiesce_timeout_s": 10.0,
        # A killed process's erasure is taken over once its run lease lapses: 3 s instead of 10 s.
        "run_lease_s": 3.0,
        **extra.pop("erasure", {}),
    }
    return gateway_config(
        keys,
        kagent_url=kagent_url,
        state_url=state_url,
        server=SERVER,
        bridge_bot=BOT,
        agents=extra.pop("agents", {AGENT: {"disabled_variant": "helper-nomem", "ghost": GHOST}}),
        pack=pack,
        upstream={"kagent_auth_mode": upstream.auth_mode, **(upstream_settings or {})},
        erasure=erasure,
        **extra,
    )


async def install_role(owner_url: str) -> None:
    """Run docs/erasure-role.sql on kagent's database as its owner."""
    conn = await asyncpg.connect(owner_url)
    try:
        await conn.execute(ROLE_SQL.read_text())
    finally:
        await conn.close()


def role_url(owner_url: str) -> str:
    """The same database, as the least-privilege erasure role (trust authentication on loopback)."""
    return owner_url.replace("postgresql://postgres@", "postgresql://memgov_eraser@", 1)


def subject_token(keys: Keys, now: int, mxid: str = ALICE, ttl_s: int = 120) -> str:
    """What the bridge sends when ``mxid`` acts for itself (a fresh, single-use token)."""
    return mint_subject(mxid, keys.bridge, "HS256", now=now, ttl_s=ttl_s)


def context_token(
    keys: Keys, now: int, mxid: str = ALICE, room: str = ROOM, *, agent: str = AGENT, **room_state: Any
) -> str:
    """A fresh signed delegation context attesting a correct control room (``room_state`` changes it)."""
    state = {**control_room([mxid, BOT, GHOST], SERVER), **room_state}
    return mint_context(
        keys.bridge,
        "HS256",
        sub=mxid,
        agent=agent,
        room_id=room,
        room=state,
        servers=[SERVER],
        classification="private",
        now=now,
    )


@dataclass
class Harness:
    """One gateway, the stand-in behind it, and the bridge's and runtime's side of the conversation."""

    gw: Gateway
    stack: Devstack
    keys: Keys
    http: aiohttp.ClientSession
    upstream: Upstream = STANDIN
    clock: DevClock = field(default_factory=DevClock)

    @property
    def parts(self) -> Any:
        assert self.gw.parts is not None
        return self.gw.parts

    def now(self) -> int:
        return int(self.parts.clock().timestamp())

    def subject_token(self, mxid: str = ALICE, ttl_s: int = 120) -> str:
        """What the bridge sends when ``mxid`` acts for itself."""
        return subject_token(self.keys, self.now(), mxid, ttl_s)

    def operator_token(self, ttl_s: int = 300) -> str:
        return mint_operator("ops-oncall", self.keys.operator, "HS256", now=self.now(), ttl_s=ttl_s)

    def context(self, mxid: str = ALICE, room: str = ROOM, *, agent: str = AGENT, **room_state: Any) -> str:
        """A fresh signed context attesting a correct control room (``room_state`` changes it)."""
        return context_token(self.keys, self.now(), mxid, room, agent=agent, **room_state)

    def client(self, token: Token = None) -> JsonAnswers:
        """A control API client acting as ``token`` (Alice, with a fresh token per call, by default)."""
        token = self.subject_token if token is None else token
        return JsonAnswers(ControlClient(self.gw.control_url, token, session=self.http))

    async def scope(self, mxid: str = ALICE, room: str = ROOM, *, granted: bool = True) -> str:
        """Create a scope through the API (and grant consent unless told otherwise); its id."""
        api = self.client(functools.partial(self.subject_token, mxid))
        scope_id: str = (await api.create_scope(mxid, AGENT, room))["scope_id"]
        if granted:
            await api.grant(scope_id, "remember my preferences", "v1")
        return scope_id

    def session_key(self, scope_id: str, generation: int) -> str:
        key: str = self.parts.keys.session_key(scope_id, generation)
        return key

    async def save(self, scope_id: str, text: str, *, generation: int | None = None) -> tuple[int, Any]:
        """The agent runtime's save_memory through the governed data plane: (status, body)."""
        if generation is None:
            generation = (await self.parts.store.scopes.get_scope(scope_id)).generation
        key = self.session_key(scope_id, generation)
        body = {"agent_name": APP, "user_id": key, "content": text, "vector": embed_text(text)}
        headers = {"X-Agent-Name": APP, "X-User-Id": key, **runtime_headers(self.upstream, AGENT)}
        async with self.http.post(self.gw.data_url + "/api/memories/sessions", json=body, headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)

    async def namespace(self, scope_id: str, generation: int) -> Namespace:
        """The namespace the scope wrote to at ``generation`` (the first, if several)."""
        return next(
            n for n in await self.parts.store.namespaces.namespaces_of_scope(scope_id) if n.generation == generation
        )

    async def begin_write(self, scope_id: str, generation: int, lease_s: float) -> str:
        """An in-flight write record, as the gateway makes for a save into the scope's live namespace."""
        ns = await self.namespace(scope_id, generation)
        op: str = await self.parts.store.scopes.begin_write(scope_id, generation, ns.ns_id, lease_s, self.parts.clock())
        return op

    async def saved(self, scope_id: str, text: str) -> str:
        """Save and return the new entry id (the save must succeed)."""
        status, body = await self.save(scope_id, text)
        assert status == 201, body
        entry_id: str = body["id"]
        return entry_id

    async def rows(self, scope_id: str) -> list[MemoryRow]:
        """Every row the stand-in stores in any namespace of the scope."""
        return [r for r in await self.stack.store.rows() if (r.user_id or "").startswith(f"mgs1.{scope_id}.")]

    async def audit_text(self) -> str:
        """Every audit row as text (for sentinel checks)."""
        return repr(await self.parts.store.audit_log.audit_rows(limit=100_000))

    @property
    def sweepers(self) -> Sweepers:
        """The periodic sweeper of the running control app."""
        return next(r.app[SWEEPERS] for r in self.gw.runners if SWEEPERS in r.app)

    def advance(self, seconds: float) -> None:
        """Move the gateway's clock forward (hard expiry, token lifetimes)."""
        self.clock.advance(seconds)


#: The model a test agent's runtime uses, pinned in settings for rotations (the stand-in ignores it).
MODEL = "devstack-embedding"


def with_embedding(
    settings: dict[str, Any], embedding_url: str, *, pinned: bool, dimensions: int = 768
) -> dict[str, Any]:
    """Settings with the embedding provider configured (rotation on), the test agent's model configured or not."""
    settings["upstream"] = {**settings["upstream"], "embedding_url": embedding_url}
    if pinned:
        settings["agents"] = {
            ref: {**agent, "embedding_model": MODEL, "embedding_dimensions": dimensions}
            for ref, agent in settings["agents"].items()
        }
    return settings


@asynccontextmanager
async def harness(
    tmp: Path,
    *,
    store_url: str | None,
    state_url: str | None = None,
    adapter: str = "rest",
    kagent_db_url: str | None = None,
    upstream: Upstream = STANDIN,
    pg_server: PgServer | None = None,
    rotation: str | None = None,
    dimensions: int = 768,
    **extra: Any,
) -> AsyncIterator[Harness]:
    """Start the stand-in (over ``store_url``) or the real kagent, then a gateway in front of it.

    With the real kagent and the ``kagent-db`` adapter, the erasure role is installed on kagent's
    own database and the gateway connects as that role. ``rotation`` configures the embedding
    provider: ``pinned`` (the agent's model, with ``dimensions``, in settings) or ``unpinned`` (no
    model configured, so rotation cannot re-embed).
    """
    pack = policy_pack(tmp)

    async def config_of(keys: Keys, kagent_url: str, dev: Devstack) -> dict[str, Any]:
        role = kagent_db_url
        if dev.real is not None and adapter == "kagent-db" and role is None:
            # kagent has migrated its database: the erasure role can be installed on it.
            await install_role(dev.real.db_url)
            role = role_url(dev.real.db_url)
        config = overrides(
            keys,
            pack,
            kagent_url,
            state_url or f"sqlite:///{tmp}/state.db",
            adapter=adapter,
            kagent_db_url=role,
            upstream=upstream,
            **extra,
        )
        if rotation is not None:
            config = with_embedding(config, dev.embedding_url, pinned=rotation == "pinned", dimensions=dimensions)
        return config

    clock = DevClock()
    async with deploy(
        tmp,
        config_of,
        upstream=upstream,
        pg_server=pg_server,
        agents=(AGENT, "team/helper-nomem"),
        gateway_clock=clock,
        store_url=store_url,
        stream_delay_s=0,
    ) as d:
        yield Harness(d.gateway, d.dev, d.keys, d.http, upstream=upstream, clock=clock)


def decision_of(resp: aiohttp.ClientResponse) -> dict[str, str]:
    """The ``X-Memgov-Decision`` header of an answer: action, reason and decision id."""
    action, reason, ident = (p.strip() for p in resp.headers["X-Memgov-Decision"].split(";"))
    return {"action": action, "reason": reason.removeprefix("reason="), "id": ident.removeprefix("id=")}


async def invoke_as_alice(
    http: aiohttp.ClientSession, data_url: str, keys: Keys, dev: Devstack
) -> tuple[dict[str, str], str]:
    """alice invokes AGENT through the gateway with a fresh delegation context: the decision, and the agent
    kagent was asked (the memory-disabled variant when memgov refused the call)."""
    before = len(dev.recorder.of_kind("a2a"))
    message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]}
    headers = {"X-User-Id": ALICE, "X-Memgov-Context": context_token(keys, int(time.time()))}
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    async with http.post(f"{data_url}/api/a2a/{AGENT}/", json=body, headers=headers) as resp:
        await resp.read()
        assert resp.status == 200
        decided = decision_of(resp)
    (seen,) = dev.recorder.of_kind("a2a")[before:]
    return decided, seen.agent


@asynccontextmanager
async def kagent_refuses(h: Harness, op: Literal["delete", "insert"]) -> AsyncIterator[None]:
    """kagent's database refuses every ``op`` on its memory table while the block runs: the stand-in's
    store fault, or on kagent itself a trigger on its own table (so kagent answers with its own error)."""
    if h.stack.real is None:
        h.stack.store.fault = DbFault(ops=frozenset({op}))
        try:
            yield
        finally:
            h.stack.store.fault = None
        return
    db = await asyncpg.connect(h.stack.real.db_url)
    try:
        await db.execute(
            "CREATE FUNCTION memgov_test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused'; END $$;"
            f" CREATE TRIGGER memgov_test_refuse BEFORE {op.upper()} ON memory"
            " FOR EACH STATEMENT EXECUTE FUNCTION memgov_test_refuse()"
        )
        try:
            yield
        finally:
            await db.execute("DROP TRIGGER memgov_test_refuse ON memory; DROP FUNCTION memgov_test_refuse()")
    finally:
        await db.close()
