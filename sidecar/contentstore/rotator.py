"""Rotation's handles on the content store: kagent's List and save, and the agent's embedding provider.

One :class:`Rotator` per gateway process (built by ``root.py`` when an embedding provider is set).
``erasure/rotation.py`` drives it step by step. The model it re-embeds with comes from a
:class:`ModelBook`: the operator's configuration (``agents.<ref>.embedding_model``) when given,
else the memory model the agent's own kagent definition declares (``controller.py``, read with
memgov's credentials); never from traffic, since the embedding route is open to any in-cluster
caller. Texts and vectors pass through memory only; error bodies are dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sidecar.contentstore.adapters import AdapterError, listed
from sidecar.contentstore.kagent import Created, KagentMemory, Unknown, contents
from sidecar.contentstore.reembed import EmbeddingModel, Reembedder
from sidecar.reasons import Reason


class ModelBook:
    """Each memory agent's embedding model: configured, or declared by its kagent definition (configured wins)."""

    __slots__ = ("_configs", "_configured", "_declared", "refs")

    def __init__(self, refs: Iterable[str], configured: Mapping[str, EmbeddingModel]) -> None:
        self.refs = frozenset(refs)
        self._configured = dict(configured)
        self._declared: dict[str, EmbeddingModel] = {}
        self._configs: dict[str, str] = {}

    def undeclared(self) -> list[str]:
        """The agents whose model only a definition can tell (none configured)."""
        return sorted(self.refs - set(self._configured))

    def learn(self, ref: str, config: str | None, model: EmbeddingModel | None) -> None:
        """What the agent's definition declares now: its memory ModelConfig (``namespace/name``) and that
        ModelConfig's model (None: nothing usable, so nothing is known)."""
        if config is None:
            self._configs.pop(ref, None)
        else:
            self._configs[ref] = config
        if model is None:
            self._declared.pop(ref, None)
        else:
            self._declared[ref] = model

    def declared_configs(self) -> frozenset[str]:
        """The ModelConfigs the agents' definitions name for their memory (each a governed definition)."""
        return frozenset(self._configs.values())

    def model(self, ref: str) -> EmbeddingModel:
        found = self._configured.get(ref) or self._declared.get(ref)
        if found is None:
            # SECURITY: a guessed or caller-named model would store vectors later searches miss; fail closed.
            raise AdapterError(Reason.EMBEDDING_MODEL_UNKNOWN)
        return found

    def knows(self, ref: str) -> bool:
        return ref in self._configured or ref in self._declared

    def missing(self) -> list[str]:
        return sorted(r for r in self.refs if not self.knows(r))


class Rotator:
    """Rotation's handles in one gateway process: kagent's List and save, and the embedding provider."""

    def __init__(self, kagent: KagentMemory, reembedder: Reembedder, models: ModelBook) -> None:
        self._kagent = kagent  # memgov's own calls (a bearer in kagent's trusted-proxy mode)
        self.reembedder = reembedder
        self.models = models

    def model(self, agent: str) -> EmbeddingModel:
        """The agent's model: configured, or declared by its kagent definition."""
        return self.models.model(agent)

    def knows_model(self, agent: str) -> bool:
        """Whether a rotation of this agent's scopes knows which model to embed with."""
        return self.models.knows(agent)

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
