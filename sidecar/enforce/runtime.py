"""The per-process governance runtime: everything a governed handler needs, built once at start."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from sidecar.erasure.adapters import EraseAdapter
from sidecar.identity.appname import app_name, parse_agent_ref, query_spelling
from sidecar.identity.keys import SessionKeys
from sidecar.identity.tokens import Verifier
from sidecar.policy.model import Deployment, Limits
from sidecar.settings import Settings
from sidecar.upstream import KagentBearer

if TYPE_CHECKING:
    from sidecar.erasure.rotation import Rotator


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Governance:
    """Shared, long-lived handles of one gateway process (state, policy, keys, adapters)."""

    settings: Settings
    store: Any  # sidecar.state.StateStore
    policy: Any  # sidecar.policy.PolicyRuntime
    keys: SessionKeys
    bridge: Verifier | None
    eraser: EraseAdapter
    initial_limits: Limits  # used only until a pack is live; decisions fail closed meanwhile anyway
    clock: Callable[[], datetime] = utcnow
    agent_refs: frozenset[str] = field(default_factory=frozenset)
    kagent_bearer: KagentBearer | None = None
    #: Namespace rotation (exact erasure over REST), when an embedding provider is configured.
    rotator: Rotator | None = None

    def __post_init__(self) -> None:
        self.agent_refs = frozenset(self.settings.agents)
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
        return ref in self.agent_refs

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
        return self.policy.deployment(self.settings.matrix.server_name or "", self.settings.matrix.bridge_bot,
                                      agent.ghost if agent else None)


GOVERNANCE: Final = web.AppKey("governance", Governance)
