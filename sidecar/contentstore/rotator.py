"""Rotation's handles on the content store: kagent's List and save, and the agent's embedding provider.

One :class:`Rotator` per gateway process (``Governance.rotator``, when an embedding provider is
set). ``erasure/rotation.py`` drives it step by step. The model it re-embeds with comes from the
operator's configuration only (``agents.<ref>.embedding_model``, which the chart fills from the
agent's declared memory ModelConfig), never from traffic: the embedding route is open to any
in-cluster caller. Texts and vectors pass through memory only; error bodies are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.contentstore.adapters import AdapterError, listed
from sidecar.contentstore.kagent import Created, KagentMemory, Unknown, contents
from sidecar.contentstore.reembed import EmbeddingModel, Reembedder
from sidecar.reasons import Reason


class Rotator:
    """Rotation's handles in one gateway process: kagent's List and save, and the embedding provider."""

    def __init__(
        self,
        kagent: KagentMemory,
        reembedder: Reembedder,
        pinned: Mapping[str, EmbeddingModel],
    ) -> None:
        self._kagent = kagent  # memgov's own calls (a bearer in kagent's trusted-proxy mode)
        self.reembedder = reembedder
        self._pinned = dict(pinned)

    def model(self, agent: str) -> EmbeddingModel:
        """The agent's model as the operator configured it."""
        if agent not in self._pinned:
            # SECURITY: a guessed or caller-named model would store vectors later searches miss; fail closed.
            raise AdapterError(Reason.EMBEDDING_MODEL_UNKNOWN)
        return self._pinned[agent]

    def knows_model(self, agent: str) -> bool:
        """Whether a rotation of this agent's scopes knows which model to embed with."""
        return agent in self._pinned

    async def texts(self, agent_query: str, storage_key: str) -> dict[str, str]:
        """Entry id -> content of every row kagent lists in one namespace (kept in memory only)."""
        return contents(listed(await self._kagent.list(agent_query, storage_key)))

    async def save(self, app: str, storage_key: str, content: str, vector: list[float], ttl: int) -> Created | Unknown:
        """Save one copy the way a governed save is forwarded: ``Created`` with its new kagent id, or
        ``Unknown`` when it was sent and not answered (it may still commit)."""
        saved = await self._kagent.save(app, storage_key, content, vector, ttl)
        if isinstance(saved, Created):
            return saved
        if isinstance(saved, Unknown):
            if saved.sent:
                return saved
            raise AdapterError(Reason.UPSTREAM_UNAVAILABLE)  # never sent: nothing was written
        # SECURITY: kagent's error body can quote database errors; it was read and dropped.
        raise AdapterError(Reason.UPSTREAM_ERROR)

    async def close(self) -> None:
        """Close the provider session (the kagent session belongs to the erasure adapter)."""
        await self.reembedder.close()
