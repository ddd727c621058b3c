"""Rotation's handles on the content store: kagent's List and save, and the agent's embedding provider.

One :class:`Rotator` per gateway process (``Governance.rotator``, when an embedding provider is
set). ``erasure/rotation.py`` drives it step by step. The model it re-embeds with comes from the
operator's configuration only (``agents.<ref>.embedding_model``, which the chart fills from the
agent's declared memory ModelConfig), never from traffic: the embedding route is open to any
in-cluster caller. Texts and vectors pass through memory only; error bodies are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import aiohttp

from sidecar.contentstore.adapters import AdapterError, list_namespace
from sidecar.contentstore.reembed import EmbeddingModel, Reembedder
from sidecar.reasons import Reason
from sidecar.wire import dumps


class UnknownOutcome(Exception):
    """A save into the staged namespace was sent but not answered: it may still commit."""


class Rotator:
    """Rotation's handles in one gateway process: kagent's List and save, and the embedding provider."""

    def __init__(
        self,
        kagent: aiohttp.ClientSession,
        controller_url: str,
        reembedder: Reembedder,
        pinned: Mapping[str, EmbeddingModel],
        headers: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self._kagent = kagent
        self._base = controller_url.rstrip("/")
        self._headers = headers  # kagent's trusted-proxy mode wants a bearer on every call
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
        rows = await list_namespace(self._kagent, self._base, agent_query, storage_key, self._headers())
        return {r["id"]: r["content"] if isinstance(r.get("content"), str) else "" for r in rows}

    async def save(self, app: str, storage_key: str, content: str, vector: list[float], ttl: int) -> str:
        """Save one copy the way a governed save is forwarded; its new kagent id."""
        body = {"agent_name": app, "user_id": storage_key, "content": content, "vector": vector, "ttl_days": ttl}
        headers = {**self._headers(), "Content-Type": "application/json", "X-Agent-Name": app, "X-User-Id": storage_key}
        try:
            async with self._kagent.post(
                self._base + "/api/memories/sessions", data=dumps(body), headers=headers
            ) as resp:
                answer = await resp.json(content_type=None) if resp.status == 201 else await resp.read()
                status = resp.status
        except aiohttp.ClientConnectorError:
            raise AdapterError(Reason.UPSTREAM_UNAVAILABLE) from None  # never sent: nothing was written
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            raise UnknownOutcome() from None
        entry_id = answer.get("id") if status == 201 and isinstance(answer, dict) else None
        if not isinstance(entry_id, str):
            # SECURITY: kagent's error body can quote database errors; it was read and dropped.
            raise AdapterError(Reason.UPSTREAM_ERROR)
        return entry_id

    async def close(self) -> None:
        """Close the provider session (the kagent session belongs to the erasure adapter)."""
        await self.reembedder.close()
