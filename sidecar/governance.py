"""The process object and its builder: the long-lived handles of one gateway, opened once at start.

``governance(settings, readiness)`` opens the state store, starts the policy runtime, loads the keys
and the erasure and rotation adapters, and yields one :class:`Governance`. The data plane, the control API,
erasure and the sweepers all receive that object (``GOVERNANCE`` on their apps); nothing below
this module knows how it is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from aiohttp import web

from sidecar import metrics
from sidecar.contentstore.adapters import EraseAdapter, KagentDbAdapter, RestAdapter
from sidecar.contentstore.kagent import KagentMemory
from sidecar.contentstore.reembed import EmbeddingModel, Reembedder
from sidecar.contentstore.rotator import Rotator
from sidecar.identity.appname import AgentNames, app_name, parse_agent_ref, query_spelling
from sidecar.identity.keys import SessionKeys
from sidecar.identity.tokens import Verifier, load_verifier
from sidecar.logs import get_logger
from sidecar.ops import Readiness, ReadyCheck
from sidecar.policy import PolicyRuntime, load_limits
from sidecar.policy.model import Deployment, Limits
from sidecar.reasons import Reason
from sidecar.settings import Settings
from sidecar.state import StateError, StateStore, open_store
from sidecar.upstream import MEMGOV_USER, KagentBearer, Upstream, make_session

log = get_logger("governance")
#: Longest wait between two attempts to reach a state store that does not answer at start-up.
_CONNECT_BACKOFF_MAX_S = 30.0


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Governance:
    """Shared, long-lived handles of one gateway process (state, policy, keys, adapters)."""

    settings: Settings
    store: StateStore
    policy: PolicyRuntime
    keys: SessionKeys
    bridge: Verifier | None
    eraser: EraseAdapter
    #: kagent's memory API with memgov's own credentials (erasure, rotation, inspect listings).
    kagent: KagentMemory
    initial_limits: Limits  # used only until a pack is live; decisions fail closed meanwhile anyway
    clock: Callable[[], datetime] = utcnow
    #: The configured memory-enabled agents and the names each answers to.
    agent_names: AgentNames = field(default_factory=lambda: AgentNames(()))
    kagent_bearer: KagentBearer | None = None
    #: Namespace rotation (exact erasure over REST), when an embedding provider is configured.
    rotator: Rotator | None = None

    def __post_init__(self) -> None:
        self.agent_names = AgentNames(self.settings.agents)
        if self.kagent_bearer is None:
            self.kagent_bearer = KagentBearer(self.settings.upstream)

    def kagent_headers(self, user: str) -> dict[str, str]:
        """What kagent needs to accept a call naming ``user`` (a bearer in its trusted-proxy mode)."""
        assert self.kagent_bearer is not None
        return self.kagent_bearer.headers(user, int(self.now().timestamp()))

    def now(self) -> datetime:
        return self.clock()

    @property
    def limits(self) -> Limits:
        """The live pack's limits (hot-reloaded with the pack)."""
        pack = self.policy.pack
        return pack.limits if pack is not None else self.initial_limits

    def is_memory_agent(self, ref: str) -> bool:
        return ref in self.agent_names.refs

    def app_name(self, ref: str) -> str:
        """The one canonical kagent ``app_name`` every memory call of this agent is forwarded with."""
        ns, name = parse_agent_ref(ref)
        return app_name(ns, name)

    def query_name(self, ref: str) -> str:
        """The ``agent_name`` erasure lists and deletes with, reaching every stored spelling."""
        return query_spelling(ref)

    def deployment(self, agent_ref: str | None) -> Deployment:
        """Deployment facts for one decision; the ghost is the target agent's."""
        agent = self.settings.agents.get(agent_ref or "")
        return self.policy.deployment(
            self.settings.matrix.server_name or "", self.settings.matrix.bridge_bot, agent.ghost if agent else None
        )


GOVERNANCE: Final = web.AppKey("governance", Governance)


def make_eraser(settings: Settings, kagent: KagentMemory) -> EraseAdapter:
    """The configured erasure adapter (``rest`` by default, over memgov's own kagent client;
    ``kagent-db`` with its own role)."""
    if settings.erasure.adapter == "kagent-db":
        url = settings.kagent_db_url()
        if not url:
            raise ValueError("erasure.kagent_db_url is required for the kagent-db adapter")
        return KagentDbAdapter(url)
    return RestAdapter(kagent)


def make_rotator(settings: Settings, kagent: KagentMemory) -> Rotator | None:
    """Namespace rotation's handles, when the REST adapter can be made exact (an embedding provider is set).

    Its kagent calls share memgov's own client with erasure; the provider gets a small pool of its
    own with a whole-call timeout, so rotation never waits on the data plane's connections.
    """
    up = settings.upstream
    if settings.erasure.adapter != "rest" or not settings.erasure.rotate or up.embedding_url is None:
        return None
    pinned = {
        ref: EmbeddingModel(a.embedding_model, a.embedding_dimensions)
        for ref, a in settings.agents.items()
        if a.embedding_model is not None
    }
    provider = make_session(up, pool_size=4, total_timeout_s=up.embedding_timeout_s, trust_env=up.embedding_trust_env)
    return Rotator(kagent, Reembedder(provider, up.embedding_url, settings.embedding_api_key()), pinned)


def rotation_check(gov: Governance) -> ReadyCheck:
    """A readiness detail naming the agents whose erasures rotation cannot make exact (no configured model).

    It never makes the pod unready: memory keeps working, only physical deletion waits for the
    namespace to be cleared. The same count is the ``memgov_rotation_agents_without_model`` gauge.
    """
    rotator = gov.rotator
    missing = sorted(ref for ref in gov.settings.agents if rotator is not None and not rotator.knows_model(ref))
    metrics.ROTATION_AGENTS_WITHOUT_MODEL.set(len(missing))
    detail: dict[str, object] = {"enabled": rotator is not None, "agents_without_model": missing}

    async def check() -> tuple[bool, dict[str, object]]:
        return True, detail

    return check


async def open_state(settings: Settings) -> StateStore:
    """Open (and migrate, unless told not to) the state store, waiting with backoff while it does not answer.

    Nothing is served meanwhile; a signal ends the wait (``server.serve``). A schema this release
    cannot run on is not waited for: SchemaMismatch is raised at once.
    """
    url = settings.state_url()
    backend = "postgresql" if url.startswith("postgres") else "sqlite"
    delay, attempt = 0.5, 0
    while True:
        attempt += 1
        try:
            return await open_store(
                url,
                pool_size=settings.state.pool_size,
                auto_migrate=settings.state.auto_migrate,
                spool_rows=settings.audit.spool_records,
                spool_dir=settings.audit.spool_dir,
                statement_timeout_s=settings.state.statement_timeout_s,
                acquire_timeout_s=settings.state.acquire_timeout_s,
            )
        except StateError as exc:
            if exc.reason is not Reason.STATE_UNAVAILABLE:
                raise
        # Jitter, so replicas restarted together do not knock in step.
        wait = delay * random.uniform(0.75, 1.25)
        log.warning("state.connect_failed", backend=backend, attempt=attempt, retry_in_ms=round(wait * 1000))
        await asyncio.sleep(wait)
        delay = min(delay * 2, _CONNECT_BACKOFF_MAX_S)


@asynccontextmanager
async def governance(
    settings: Settings, readiness: Readiness, *, clock: Callable[[], datetime] | None = None
) -> AsyncIterator[Governance]:
    """Open the state store, start the policy runtime, load keys; register readiness checks.

    Everything is opened inside one exit stack: whatever step fails (a key file that cannot be read
    after the store opened), what was opened before it is closed, in reverse order; so is all of it
    when the block ends. Readiness means "can serve traffic": a state store that stops answering
    degrades memory (SPEC D6) but leaves the gateway ready; the check reports whether the store answers.
    """
    async with contextlib.AsyncExitStack() as opened:
        store = await open_state(settings)
        opened.push_async_callback(store.close)
        policy = await PolicyRuntime.start(settings.policy)
        opened.push_async_callback(policy.close)
        # memgov's own kagent calls (erasure, rotation, inspect) are short and bounded like governed memory calls.
        cfg = settings.upstream
        session = make_session(cfg, pool_size=cfg.memory_pool_size, total_timeout_s=cfg.memory_timeout_s)
        opened.push_async_callback(session.close)
        bearer = KagentBearer(cfg)
        kagent = KagentMemory(
            Upstream("kagent", cfg.controller_url, session),
            lambda: bearer.headers(MEMGOV_USER, int((clock or utcnow)().timestamp())),
        )
        eraser = make_eraser(settings, kagent)
        opened.push_async_callback(eraser.close)
        rotator = make_rotator(settings, kagent)
        if rotator is not None:
            opened.push_async_callback(rotator.close)
        current, previous = settings.session_keys()
        bridge = load_verifier(settings.trust.bridge_key_file) if settings.trust.bridge_key_file else None
        gov = Governance(
            settings=settings,
            store=store,
            policy=policy,
            keys=SessionKeys(current, previous),
            bridge=bridge,
            eraser=eraser,
            kagent=kagent,
            initial_limits=load_limits(settings.policy.dir),
            clock=clock or utcnow,
            kagent_bearer=bearer,
            rotator=rotator,
        )

        async def state_ready() -> tuple[bool, dict[str, object]]:
            return True, {"backend": store.backend, "available": store.health.available}

        checks = {"policy": policy.ready_check, "state": state_ready, "rotation": rotation_check(gov)}
        readiness.checks.update(checks)
        opened.callback(lambda: [readiness.checks.pop(name, None) for name in checks])
        await opened.enter_async_context(store.watched(settings.state.check_interval_s))
        yield gov
