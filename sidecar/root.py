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
import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from sidecar import evloop, metrics
from sidecar.clock import Clock, utcnow
from sidecar.contentstore.adapters import EraseAdapter, KagentDbAdapter, RestAdapter
from sidecar.contentstore.controller import KagentController, KagentWatch
from sidecar.contentstore.kagent import KagentMemory
from sidecar.contentstore.reembed import EmbeddingModel, Reembedder
from sidecar.contentstore.rotator import ModelBook, Rotator
from sidecar.control.app import create_control_app, handlers
from sidecar.control.auth import Authenticator
from sidecar.control.entries import EntryRoutes
from sidecar.control.erase import EraseRoutes
from sidecar.control.erasures import ErasureAdmin, ErasureEvidence
from sidecar.control.http import SWEEPERS
from sidecar.control.scopes import Scopes
from sidecar.decide.context import Contexts
from sidecar.decide.decider import Decider
from sidecar.decide.definitions import Boundary
from sidecar.decide.record import AuditRecorder
from sidecar.enforce import governed_handlers, governed_middlewares
from sidecar.enforce.definitions import DefinitionParts
from sidecar.enforce.embedding import EmbeddingParts
from sidecar.enforce.invoke import InvokeParts
from sidecar.enforce.memory import MemoryParts
from sidecar.enforce.shares import ShareParts
from sidecar.erasure.machine import ErasureEngine
from sidecar.erasure.parts import ErasureParts
from sidecar.erasure.sweeper import Sweepers, SweepPlan
from sidecar.identity.appname import Agents
from sidecar.identity.keys import SessionKeys
from sidecar.identity.tokens import KEY_ID, KeySet, Verifier, load_keys, load_verifier
from sidecar.logs import get_logger
from sidecar.ops import Readiness, ReadyCheck
from sidecar.policy import PolicyRuntime
from sidecar.proxy import create_data_app, passthrough
from sidecar.secretfile import SecretError
from sidecar.settings import AdapterName, Settings
from sidecar.state import StateError, StateStore
from sidecar.state.store import pending_store
from sidecar.upstream import MEMGOV_USER, KagentBearer, Upstreams, open_upstreams

log = get_logger("root")
#: Session-key secrets: current, previous, next (``settings.session_keys``).
KeyMaterial = tuple[bytes, bytes | None, bytes | None]


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
    Each agent's model is the configured one, else the one its kagent definition declares.
    """
    provider = upstreams.reembedding
    if settings.erasure.adapter is not AdapterName.REST or not settings.erasure.rotate or provider is None:
        return None
    configured = {
        ref: EmbeddingModel(a.embedding_model, a.embedding_dimensions)
        for ref, a in settings.agents.items()
        if a.embedding_model is not None
    }
    models = ModelBook(settings.agents, configured)
    return Rotator(kagent, Reembedder(provider.session, provider.base, settings.embedding_api_key()), models)


def _verification_keys(file: Path | None, folder: Path | None, name: str) -> dict[str, Verifier] | None:
    """One purpose's verification keys: a folder of keys named by id, or one file (id ``default``)."""
    if folder is not None:
        return load_keys(folder, f"trust.{name}_keys_dir")
    if file is not None:
        return {"default": load_verifier(file, setting=f"trust.{name}_key_file")}
    return None


def _read_keys(settings: Settings) -> tuple[KeyMaterial, dict[str, Verifier] | None, dict[str, Verifier] | None]:
    trust = settings.trust
    return (
        settings.session_keys(),
        _verification_keys(trust.bridge_key_file, trust.bridge_keys_dir, "bridge"),
        _verification_keys(trust.operator_key_file, trust.operator_keys_dir, "operator"),
    )


def _counted(purpose: str) -> Callable[[str], None]:
    """Count a verification per key slot (the slot names are configured: the labels stay few)."""
    return lambda slot: metrics.KEY_VERIFICATIONS.labels(purpose, slot).inc()


def trusted_keys(settings: Settings) -> tuple[SessionKeys, KeySet | None, KeySet | None]:
    """The session keys and the bridge's and operators' verification keys (None: not configured, so every
    such token is invalid), each counting its verifications per slot."""
    session, bridge, operators = _read_keys(settings)
    keys = SessionKeys(*session)
    keys.on_verified = _counted("session")
    sets = []
    for purpose, slots in (("bridge", bridge), ("operator", operators)):
        ring = KeySet(slots) if slots is not None else None
        if ring is not None:
            ring.on_verified = _counted(purpose)
        sets.append(ring)
    return keys, sets[0], sets[1]


def _fingerprint(settings: Settings) -> bytes:
    """A digest of every key file and key folder the settings name, as they are on disk now."""
    digest = hashlib.sha256()
    s, t = settings.secrets, settings.trust
    for path in (
        s.session_key_file,
        s.previous_session_key_file,
        s.next_session_key_file,
        t.bridge_key_file,
        t.operator_key_file,
    ):
        digest.update(b"\0" + (Path(path).read_bytes() if path is not None and Path(path).exists() else b"-"))
    for folder in (t.bridge_keys_dir, t.operator_keys_dir):
        if folder is not None and Path(folder).is_dir():
            for entry in sorted(p for p in Path(folder).iterdir() if KEY_ID.fullmatch(p.name) and p.is_file()):
                digest.update(b"\1" + entry.name.encode() + b"\0" + entry.read_bytes())
    return digest.digest()


async def reload_keys(settings: Settings, keys: SessionKeys, bridge: KeySet | None, operators: KeySet | None) -> None:
    """Read the key files again every ``secrets.reload_interval_s`` and use them once they changed.

    A Secret updated in place reaches a running pod this way, without a restart (docs/deploy.md, key
    rotation). Keys that do not load (a half-written file, a placeholder) change nothing: the keys in use
    stay, ``memgov_key_reloads_total{outcome="rejected"}`` counts it and the log says which kind of error.
    """
    seen = await asyncio.to_thread(_fingerprint, settings)
    while True:
        await asyncio.sleep(settings.secrets.reload_interval_s)
        try:
            now = await asyncio.to_thread(_fingerprint, settings)
            if now == seen:
                continue
            session, bridge_keys, operator_keys = await asyncio.to_thread(_read_keys, settings)
            if await asyncio.to_thread(_fingerprint, settings) != now:
                continue  # changed while read (several files, one update): read again next time, whole
            keys.replace(*session)
            for ring, slots in ((bridge, bridge_keys), (operators, operator_keys)):
                if ring is not None:
                    # SECURITY: an emptied folder verifies nothing: a removed key is refused at once.
                    ring.replace(slots or {})
        except (SecretError, ValueError, OSError) as exc:
            metrics.KEY_RELOADS.labels("rejected").inc()
            log.error("keys.reload_failed", error_type=type(exc).__name__)
            continue
        seen = now
        metrics.KEY_RELOADS.labels("loaded").inc()
        log.info(
            "keys.reloaded",
            count=len(keys.slots) + len(bridge.ids if bridge else ()) + len(operators.ids if operators else ()),
        )


def rotation_check(rotator: Rotator | None) -> ReadyCheck:
    """A readiness detail naming the agents whose erasures rotation cannot make exact (no model known).

    It never makes the pod unready: memory keeps working, only physical deletion waits for the
    namespace to be cleared. The same count is the ``memgov_rotation_agents_without_model`` gauge.
    """

    def missing() -> list[str]:
        names = rotator.models.missing() if rotator is not None else []
        metrics.ROTATION_AGENTS_WITHOUT_MODEL.set(len(names))
        return names

    missing()

    async def check() -> tuple[bool, dict[str, object]]:
        return True, {"enabled": rotator is not None, "agents_without_model": missing()}

    return check


def state_store(settings: Settings) -> StateStore:
    """The state store, not connected yet: it connects (and migrates, unless told not to) in the background
    once watched, waiting with backoff while it does not answer; meanwhile memory is degraded."""
    return pending_store(
        settings.state_url(),
        pool_size=settings.state.pool_size,
        auto_migrate=settings.state.auto_migrate,
        spool_rows=settings.audit.spool_records,
        spool_dir=settings.audit.spool_dir,
        statement_timeout_s=settings.state.statement_timeout_s,
        acquire_timeout_s=settings.state.acquire_timeout_s,
    )


@asynccontextmanager
async def open_parts(
    settings: Settings, readiness: Readiness, *, clock: Clock | None = None, wait_for_store: bool = True
) -> AsyncIterator[Parts]:
    """Open every long-lived part, register the readiness checks, and close everything on exit.

    Readiness means "can serve traffic": a state store that stops answering, or has not answered yet,
    degrades memory (SPEC D6) but leaves the gateway ready; the check reports whether the store
    answers. The store connects in the background; ``wait_for_store`` (tools, benches, tests that need
    memory at once) yields only once it did, and raises what stopped it (SchemaMismatch).
    """
    now = clock or utcnow
    async with contextlib.AsyncExitStack() as opened:
        store = state_store(settings)
        opened.push_async_callback(store.close)
        policy = await PolicyRuntime.start(settings.policy)
        opened.push_async_callback(policy.close)
        upstreams = await opened.enter_async_context(open_upstreams(settings.upstream))
        bearer = KagentBearer(settings.upstream)
        kagent = KagentMemory(upstreams.memory, lambda: bearer.headers(MEMGOV_USER, int(now().timestamp())))
        eraser = make_eraser(settings, kagent)
        opened.push_async_callback(eraser.close)
        trust = settings.trust
        keys, bridge, operators = trusted_keys(settings)
        if settings.secrets.reload_interval_s > 0:
            reloading = reload_keys(settings, keys, bridge, operators)
            await opened.enter_async_context(evloop.background(reloading))
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
            keys=keys,
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

        controller = KagentController(upstreams.controller, lambda: bearer.headers(MEMGOV_USER, int(now().timestamp())))
        rotator = parts.rotator
        watch = KagentWatch(
            controller, rotator.models if rotator is not None else None, settings.upstream.kagent_refresh_s
        )
        checks = {
            "policy": policy.ready_check,
            "state": state_ready,
            "rotation": rotation_check(rotator),
            "kagent": watch.ready_check,
        }
        readiness.checks.update(checks)
        opened.callback(lambda: [readiness.checks.pop(name, None) for name in checks])
        await opened.enter_async_context(store.watched(settings.state.check_interval_s))
        await opened.enter_async_context(evloop.background(watch.run()))
        if wait_for_store:
            await store.wait_connected()
        yield parts


def governed_definitions(settings: Settings) -> tuple[frozenset[str], frozenset[str]]:
    """namespace/name of every definition an operator token guards: the memory agents with their
    memory-disabled variants, and the ModelConfigs they use (a bare name is in the agent's namespace)."""
    agents: set[str] = set()
    models: set[str] = set()
    for ref, agent in settings.agents.items():
        ns = ref.partition("/")[0]
        agents |= {ref, f"{ns}/{agent.disabled_variant}"}
        models |= {m if "/" in m else f"{ns}/{m}" for m in agent.model_configs}
    return frozenset(agents), frozenset(models)


def route_parts(parts: Parts) -> tuple[MemoryParts, InvokeParts, EmbeddingParts, DefinitionParts, ShareParts]:
    """The bundles of the data plane's governed routes: saves and searches, invocations, embeddings,
    definition writes, session shares."""
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
    agents, models = governed_definitions(s)
    definitions = DefinitionParts(
        boundary=Boundary.of(s.boundary),
        governed_agents=agents,
        governed_models=models,
        declared_models=parts.rotator.models.declared_configs if parts.rotator is not None else frozenset,
        operators=parts.operators,
        operator_max_age_s=s.trust.operator_max_age_s,
        clock=parts.clock,
        controller=parts.upstreams.controller,
    )
    return memory, invoke, embedding, definitions, ShareParts(controller=parts.upstreams.controller)


def data_app(parts: Parts) -> web.Application:
    """The data plane: each governed route's stages built from its own bundle, run with the one decider."""
    return create_data_app(
        parts.settings,
        parts.upstreams,
        handlers=governed_handlers(parts.decider, *route_parts(parts), passthrough=passthrough),
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
    admin: ErasureAdmin


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
    return ControlRoutes(scopes, entries, erase, evidence, ErasureAdmin(auth, evidence, engine, store.erasures))


@asynccontextmanager
async def control_plane(parts: Parts, *, resume: bool = True) -> AsyncIterator[web.Application]:
    """Yield the control app at once; once the state store is connected, resume unfinished erasures (unless
    ``resume`` is False) and start the sweepers, which run until the block ends."""
    erasing = erasure_parts(parts)
    engine = ErasureEngine(erasing)
    routes = control_routes(parts, engine)
    table = handlers(routes.scopes, routes.entries, routes.erase, routes.evidence, routes.admin)
    app = create_control_app(table, parts.recorder)
    sweepers = app[SWEEPERS] = Sweepers(erasing, sweep_plan(parts), engine)

    async def once_connected() -> None:
        try:
            await parts.store.wait_connected()
        except Exception:  # noqa: BLE001 - a store that can never connect stops the process (server.py)
            return
        if resume:
            try:
                await engine.resume_all()
            except StateError:
                # The store went away again: the sweepers resume what is left once it answers.
                log.warning("erasure.resume_deferred")
        sweepers.start()

    try:
        async with evloop.background(once_connected()):
            yield app
    finally:
        await sweepers.stop()
        await engine.close()
