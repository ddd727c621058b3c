"""The composition root: every part of one gateway built once, and each consumer handed exactly its own.

``open_parts(settings, readiness)`` opens the state store, the policy runtime, the upstream pools,
memgov's one kagent memory client, the keys, the erasure adapter and rotation's handles inside one
exit stack (a failure at any step closes what was opened, in reverse), and builds the recorder,
the decider and the delegation contexts over them. The builders below then assemble the data
plane, the control API, the erasure engine and the sweepers from those parts: a route's stages, a
control handler group, an erasure step or a sweep pass receives the few parts it uses, typed, and
never this module's :class:`Parts`. ``server.py`` is the only runtime module that imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from sidecar import metrics
from sidecar.clock import Clock, utcnow
from sidecar.contentstore.adapters import EraseAdapter, KagentDbAdapter, RestAdapter
from sidecar.contentstore.kagent import KagentMemory
from sidecar.contentstore.reembed import EmbeddingModel, Reembedder
from sidecar.contentstore.rotator import Rotator
from sidecar.control.app import create_control_app, handlers
from sidecar.control.auth import Authenticator
from sidecar.control.entries import EntryRoutes
from sidecar.control.erase import EraseRoutes
from sidecar.control.erasures import ErasureEvidence
from sidecar.control.http import SWEEPERS
from sidecar.control.scopes import Scopes
from sidecar.decide.context import Contexts
from sidecar.decide.decider import Decider
from sidecar.decide.record import AuditRecorder
from sidecar.enforce import governed_handlers, governed_middlewares
from sidecar.enforce.embedding import EmbeddingParts
from sidecar.enforce.invoke import InvokeParts
from sidecar.enforce.memory import MemoryParts
from sidecar.erasure.machine import ErasureEngine
from sidecar.erasure.parts import ErasureParts
from sidecar.erasure.sweeper import Sweepers, SweepPlan
from sidecar.identity.appname import Agents
from sidecar.identity.keys import SessionKeys
from sidecar.identity.tokens import Verifier, load_verifier
from sidecar.logs import get_logger
from sidecar.ops import Readiness, ReadyCheck
from sidecar.policy import PolicyRuntime
from sidecar.proxy import create_data_app
from sidecar.reasons import Reason
from sidecar.settings import AdapterName, Settings
from sidecar.state import StateError, StateStore, open_store
from sidecar.upstream import MEMGOV_USER, KagentBearer, Upstreams, open_upstreams

log = get_logger("root")
#: Longest wait between two attempts to reach a state store that does not answer at start-up.
_CONNECT_BACKOFF_MAX_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class Parts:
    """The long-lived parts of one gateway process, built once by :func:`open_parts`."""

    settings: Settings
    clock: Clock
    store: StateStore
    policy: PolicyRuntime
    keys: SessionKeys
    #: Verifies delegation contexts and subject tokens (None: every one is invalid).
    bridge: Verifier | None
    #: Verifies operator tokens (None: no operator can authenticate).
    operators: Verifier | None
    agents: Agents
    upstreams: Upstreams
    bearer: KagentBearer
    #: kagent's memory API over the memory pool: governed calls and memgov's own (erasure, inspect, rotation).
    kagent: KagentMemory
    eraser: EraseAdapter
    #: Namespace rotation (exact erasure over REST), when an embedding provider is configured.
    rotator: Rotator | None
    recorder: AuditRecorder
    decider: Decider
    contexts: Contexts


def make_eraser(settings: Settings, kagent: KagentMemory) -> EraseAdapter:
    """The configured erasure adapter (``rest`` by default, over memgov's kagent client; ``kagent-db``
    with its own role and its own small pool)."""
    if settings.erasure.adapter is AdapterName.KAGENT_DB:
        url = settings.kagent_db_url()
        if not url:
            raise ValueError("erasure.kagent_db_url is required for the kagent-db adapter")
        return KagentDbAdapter(url)
    return RestAdapter(kagent)


def make_rotator(settings: Settings, kagent: KagentMemory, upstreams: Upstreams) -> Rotator | None:
    """Namespace rotation's handles, when the REST adapter can be made exact (an embedding provider is set).

    Its kagent calls share memgov's one kagent client; the provider is reached over its own small
    pool with a whole-call timeout (``upstreams.reembedding``), so rotation never waits on the data plane.
    """
    provider = upstreams.reembedding
    if settings.erasure.adapter is not AdapterName.REST or not settings.erasure.rotate or provider is None:
        return None
    pinned = {
        ref: EmbeddingModel(a.embedding_model, a.embedding_dimensions)
        for ref, a in settings.agents.items()
        if a.embedding_model is not None
    }
    return Rotator(kagent, Reembedder(provider.session, provider.base, settings.embedding_api_key()), pinned)


def rotation_check(parts: Parts) -> ReadyCheck:
    """A readiness detail naming the agents whose erasures rotation cannot make exact (no configured model).

    It never makes the pod unready: memory keeps working, only physical deletion waits for the
    namespace to be cleared. The same count is the ``memgov_rotation_agents_without_model`` gauge.
    """
    rotator = parts.rotator
    missing = sorted(ref for ref in parts.agents.refs if rotator is not None and not rotator.knows_model(ref))
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
async def open_parts(settings: Settings, readiness: Readiness, *, clock: Clock | None = None) -> AsyncIterator[Parts]:
    """Open every long-lived part, register the readiness checks, and close everything on exit.

    Readiness means "can serve traffic": a state store that stops answering degrades memory (SPEC
    D6) but leaves the gateway ready; the check reports whether the store answers.
    """
    now = clock or utcnow
    async with contextlib.AsyncExitStack() as opened:
        store = await open_state(settings)
        opened.push_async_callback(store.close)
        policy = await PolicyRuntime.start(settings.policy)
        opened.push_async_callback(policy.close)
        upstreams = await opened.enter_async_context(open_upstreams(settings.upstream))
        bearer = KagentBearer(settings.upstream)
        kagent = KagentMemory(upstreams.memory, lambda: bearer.headers(MEMGOV_USER, int(now().timestamp())))
        eraser = make_eraser(settings, kagent)
        opened.push_async_callback(eraser.close)
        trust = settings.trust
        current, previous = settings.session_keys()
        bridge = load_verifier(trust.bridge_key_file) if trust.bridge_key_file else None
        operators = (
            load_verifier(trust.operator_key_file, setting="trust.operator_key_file")
            if trust.operator_key_file is not None
            else None
        )
        agents = Agents(
            {ref: a.disabled_variant for ref, a in settings.agents.items()},
            {ref: a.ghost for ref, a in settings.agents.items()},
        )
        recorder = AuditRecorder(store.audit_log, now)
        matrix = settings.matrix
        parts = Parts(
            settings=settings,
            clock=now,
            store=store,
            policy=policy,
            keys=SessionKeys(current, previous),
            bridge=bridge,
            operators=operators,
            agents=agents,
            upstreams=upstreams,
            bearer=bearer,
            kagent=kagent,
            eraser=eraser,
            rotator=make_rotator(settings, kagent, upstreams),
            recorder=recorder,
            decider=Decider(
                policy, recorder, agents, now, server_name=matrix.server_name or "", bridge_bot=matrix.bridge_bot
            ),
            contexts=Contexts(bridge, store.single_use, now, max_age_s=trust.context_max_age_s),
        )

        async def state_ready() -> tuple[bool, dict[str, object]]:
            return True, {"backend": store.backend, "available": store.health.available}

        checks = {"policy": policy.ready_check, "state": state_ready, "rotation": rotation_check(parts)}
        readiness.checks.update(checks)
        opened.callback(lambda: [readiness.checks.pop(name, None) for name in checks])
        await opened.enter_async_context(store.watched(settings.state.check_interval_s))
        yield parts


def route_parts(parts: Parts) -> tuple[MemoryParts, InvokeParts, EmbeddingParts]:
    """The bundles of the data plane's governed routes: saves and searches, invocations, embeddings."""
    s, store = parts.settings, parts.store
    memory = MemoryParts(
        admission=store.admission,
        scopes=store.scopes,
        ledger=store.ledger,
        kagent=parts.kagent,
        eraser=parts.eraser,
        keys=parts.keys,
        agents=parts.agents,
        limits=parts.policy.limits,
        clock=parts.clock,
        write_lease_s=s.enforce.write_lease_s,
        memory_timeout_s=s.upstream.memory_timeout_s,
        prefetch_window_s=s.enforce.prefetch_window_s,
    )
    invoke = InvokeParts(
        scopes=store.scopes,
        budgets=store.budgets,
        prefetch=store.prefetch,
        contexts=parts.contexts,
        keys=parts.keys,
        bearer=parts.bearer,
        agents=parts.agents,
        limits=parts.policy.limits,
        clock=parts.clock,
        controller=parts.upstreams.controller,
        server_name=s.matrix.server_name or "",
        prefetch_window_s=s.enforce.prefetch_window_s,
    )
    embedding = EmbeddingParts(
        scopes=store.scopes,
        budgets=store.budgets,
        agents=parts.agents,
        limits=parts.policy.limits,
        clock=parts.clock,
        provider=parts.upstreams.embedding,
    )
    return memory, invoke, embedding


def data_app(parts: Parts) -> web.Application:
    """The data plane: each governed route's stages built from its own bundle, run with the one decider."""
    return create_data_app(
        parts.settings,
        parts.upstreams,
        handlers=governed_handlers(parts.decider, *route_parts(parts)),
        middlewares=governed_middlewares(parts.contexts),
    )


def erasure_parts(parts: Parts) -> ErasureParts:
    """The erasure package's bundle."""
    s, store = parts.settings, parts.store
    return ErasureParts(
        erasures=store.erasures,
        scopes=store.scopes,
        namespaces=store.namespaces,
        ledger=store.ledger,
        history=store.history,
        rotations=store.rotations,
        lineage=store.lineage,
        audit=store.audit_log,
        eraser=parts.eraser,
        rotator=parts.rotator,
        agents=parts.agents,
        limits=parts.policy.limits,
        clock=parts.clock,
        revision=lambda: parts.policy.revision,
        run_lease_s=s.erasure.run_lease_s,
        quiesce_timeout_s=s.erasure.quiesce_timeout_s,
        write_lease_s=s.enforce.write_lease_s,
        memory_timeout_s=s.upstream.memory_timeout_s,
    )


def erasure_engine(parts: Parts) -> ErasureEngine:
    """An erasure engine for this process."""
    return ErasureEngine(erasure_parts(parts))


def sweep_plan(parts: Parts) -> SweepPlan:
    s = parts.settings
    return SweepPlan(
        interval_s=s.erasure.sweep_interval_s,
        history_grace_s=s.erasure.history_grace_s,
        audit_retention_days=s.audit.retention_days,
        purge_expired=parts.store.purge_expired,
    )


@dataclass(frozen=True, slots=True)
class ControlRoutes:
    """The control API's handler groups (the bench and the tests call some of them directly)."""

    scopes: Scopes
    entries: EntryRoutes
    erase: EraseRoutes
    evidence: ErasureEvidence


def control_routes(parts: Parts, engine: ErasureEngine) -> ControlRoutes:
    """Each control handler group built with the parts it uses."""
    store, trust, clock = parts.store, parts.settings.trust, parts.clock
    auth = Authenticator(
        parts.bridge,
        parts.operators,
        store.single_use,
        store.scopes,
        clock,
        subject_max_age_s=trust.subject_max_age_s,
        operator_max_age_s=trust.operator_max_age_s,
    )
    evidence = ErasureEvidence(auth, store.scopes, store.erasures, store.history, store.namespaces)
    scopes = Scopes(
        auth,
        evidence,
        engine,
        store.scopes,
        store.history,
        store.erasures,
        store.audit_log,
        parts.agents,
        parts.policy.limits,
        clock,
        revision=lambda: parts.policy.revision,
        server_name=parts.settings.matrix.server_name or "",
    )
    entries = EntryRoutes(
        auth,
        parts.decider,
        parts.contexts,
        evidence,
        engine,
        store.ledger,
        store.history,
        store.lineage,
        parts.kagent,
        parts.agents,
        parts.policy.limits,
        clock,
    )
    erase = EraseRoutes(auth, evidence, engine, store.single_use, store.scopes, store.audit_log, clock)
    return ControlRoutes(scopes, entries, erase, evidence)


@asynccontextmanager
async def control_plane(parts: Parts, *, resume: bool = True) -> AsyncIterator[web.Application]:
    """Resume unfinished erasures (unless ``resume`` is False), then yield the control app while the sweepers run."""
    erasing = erasure_parts(parts)
    engine = ErasureEngine(erasing)
    if resume:
        await engine.resume_all()
    routes = control_routes(parts, engine)
    app = create_control_app(handlers(routes.scopes, routes.entries, routes.erase, routes.evidence), parts.recorder)
    sweepers = app[SWEEPERS] = Sweepers(erasing, sweep_plan(parts), engine)
    sweepers.start()
    try:
        yield app
    finally:
        await sweepers.stop()
        await engine.close()
