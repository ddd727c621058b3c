"""Build and tear down the governance runtime of one gateway process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime

import aiohttp

from sidecar.enforce.runtime import Governance, utcnow
from sidecar.erasure.adapters import EraseAdapter, KagentDbAdapter, RestAdapter
from sidecar.erasure.reembed import EmbeddingModel, Reembedder
from sidecar.erasure.rotation import Rotator
from sidecar.identity.keys import SessionKeys
from sidecar.identity.tokens import load_verifier
from sidecar.ops import Readiness
from sidecar.policy import PolicyRuntime, load_limits
from sidecar.settings import Settings
from sidecar.state import open_store
from sidecar.upstream import MEMGOV_USER, make_session


def make_eraser(settings: Settings, session: aiohttp.ClientSession,
                headers: Callable[[], Mapping[str, str]] = dict) -> EraseAdapter:
    """The configured erasure adapter (``rest`` by default, ``kagent-db`` with its own role);
    ``headers`` authenticates the ``rest`` adapter's calls where kagent wants it."""
    if settings.erasure.adapter == "kagent-db":
        url = settings.kagent_db_url()
        if not url:
            raise ValueError("erasure.kagent_db_url is required for the kagent-db adapter")
        return KagentDbAdapter(url)
    return RestAdapter(session, settings.upstream.controller_url, headers)


def make_rotator(settings: Settings, session: aiohttp.ClientSession,
                 headers: Callable[[], Mapping[str, str]] = dict) -> Rotator | None:
    """Namespace rotation's handles, when the REST adapter can be made exact (an embedding provider is set).

    Its kagent calls share the erasure session and ``headers``; the provider gets a small pool of its
    own with a whole-call timeout, so rotation never waits on the data plane's connections.
    """
    up = settings.upstream
    if settings.erasure.adapter != "rest" or not settings.erasure.rotate or up.embedding_url is None:
        return None
    pinned = {ref: EmbeddingModel(a.embedding_model, a.embedding_dimensions)
              for ref, a in settings.agents.items() if a.embedding_model is not None}
    provider = make_session(up, pool_size=4, total_timeout_s=up.embedding_timeout_s)
    return Rotator(session, up.controller_url, Reembedder(provider, up.embedding_url, settings.embedding_api_key()),
                   pinned, headers)


@asynccontextmanager
async def governance(settings: Settings, readiness: Readiness, *,
                     clock: Callable[[], datetime] | None = None) -> AsyncIterator[Governance]:
    """Open the state store, start the policy runtime, load keys; register readiness checks."""
    store = await open_store(settings.state_url(), pool_size=settings.state.pool_size)
    policy = await PolicyRuntime.start(settings.policy)
    # Erasure calls are memgov's own, short and bounded like governed memory calls.
    cfg = settings.upstream
    session = make_session(cfg, pool_size=cfg.memory_pool_size, total_timeout_s=cfg.memory_timeout_s)
    eraser = make_eraser(settings, session, lambda: gov.kagent_headers(MEMGOV_USER))
    current, previous = settings.session_keys()
    bridge = load_verifier(settings.trust.bridge_key_file) if settings.trust.bridge_key_file else None
    gov = Governance(
        settings=settings, store=store, policy=policy, keys=SessionKeys(current, previous), bridge=bridge,
        eraser=eraser, initial_limits=load_limits(settings.policy.dir), clock=clock or utcnow,
        rotator=make_rotator(settings, session, lambda: gov.kagent_headers(MEMGOV_USER)),
    )

    async def state_ready() -> tuple[bool, dict[str, object]]:
        await store.ping()
        return True, {"backend": store.backend}

    readiness.checks["policy"] = policy.ready_check
    readiness.checks["state"] = state_ready
    try:
        yield gov
    finally:
        readiness.checks.pop("policy", None)
        readiness.checks.pop("state", None)
        await eraser.close()
        if gov.rotator is not None:
            await gov.rotator.close()
        await session.close()
        await policy.close()
        await store.close()
