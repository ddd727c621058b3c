"""A simulated kagent Python agent runtime: the memory and embedding calls one chat turn makes.

On the first turn of a context it prefetches (one embedding call and one search per sentence of
30+ characters, in parallel); ``remember: X`` runs the save_memory tool; ``autosave: a; b``
runs the auto-save (one embedding call for all facts, one batch save). Like the real runtime it
sends ``X-Agent-Name: <app_name>`` and ``X-User-Id`` to the controller, and swallows every error.
"""

from __future__ import annotations

import asyncio
import base64
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

TARGET_DIM = 768
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MIN_SENTENCE = 30


@dataclass(frozen=True)
class RuntimeConfig:
    """Where the simulated runtime sends its calls, and which agents have memory enabled."""

    memory_base_url: str
    embedding_base_url: str
    memory_agents: frozenset[str]
    embedding_model: str = "text-embedding-3-small"
    ttl_days: int = 0
    sa_token: str | None = None
    embedding_api_key: str | None = None


@dataclass
class Turn:
    """What one turn did: memory calls made (label, HTTP status or None) and memories recalled."""

    calls: list[tuple[str, int | None]] = field(default_factory=list)
    recalled: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """Reply lines describing the calls and the recalled memories."""
        lines = []
        if self.calls:
            lines.append("memory calls: " + ", ".join(f"{label} {status or 'error'}" for label, status in self.calls))
        if self.recalled:
            lines.append("recalled: " + " | ".join(self.recalled))
        return "\n".join(lines)


def app_name(namespace: str, name: str) -> str:
    """kagent's app_name: ``<namespace>__NS__<name>`` with every ``-`` turned into ``_``."""
    return f"{namespace.replace('-', '_')}__NS__{name.replace('-', '_')}"


def prefetch_queries(text: str) -> list[str]:
    """Sentences of 30+ characters, or the whole text when none qualifies."""
    stripped = text.strip()
    queries = [s.strip() for s in _SENTENCE_END.split(stripped) if len(s.strip()) >= _MIN_SENTENCE]
    return queries or ([stripped] if stripped else [])


def _fit(vector: list[float]) -> list[float] | None:
    # Longer vectors are cut to 768 and renormalised; shorter ones are refused.
    if len(vector) < TARGET_DIM:
        return None
    cut = vector[:TARGET_DIM]
    norm = math.sqrt(sum(x * x for x in cut)) or 1.0
    return [x / norm for x in cut]


def _decode_embedding(value: Any) -> list[float]:
    if isinstance(value, str):
        raw = base64.b64decode(value)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return [float(x) for x in value]


class AgentTurn:
    """One turn of a memory-enabled agent for one user."""

    def __init__(
        self, http: aiohttp.ClientSession, cfg: RuntimeConfig, namespace: str, name: str, user_id: str
    ) -> None:
        self._http, self._cfg, self._user = http, cfg, user_id
        self._app = app_name(namespace, name)
        self.turn = Turn()

    def _headers(self) -> dict[str, str]:
        headers = {"X-Agent-Name": self._app, "X-User-Id": self._user}
        if self._cfg.sa_token:
            headers["Authorization"] = f"Bearer {self._cfg.sa_token}"
        return headers

    async def _post(self, label: str, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
        """POST JSON; record (label, status); return the JSON answer on 2xx, else None."""
        try:
            async with self._http.post(url, json=body, headers=headers) as resp:
                self.turn.calls.append((label, resp.status))
                return await resp.json(content_type=None) if resp.status < 300 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            self.turn.calls.append((label, None))
            return None

    async def embed(self, texts: Sequence[str]) -> list[list[float]] | None:
        """One embeddings call for all texts (OpenAI SDK shape, base64 answers)."""
        headers = {"Authorization": f"Bearer {self._cfg.embedding_api_key}"} if self._cfg.embedding_api_key else {}
        body = {
            "model": self._cfg.embedding_model,
            "input": list(texts),
            "dimensions": TARGET_DIM,
            "encoding_format": "base64",
        }
        answer = await self._post("embeddings", self._cfg.embedding_base_url.rstrip("/") + "/embeddings", body, headers)
        try:
            data = sorted(answer["data"], key=lambda d: d["index"])
            vectors = [_fit(_decode_embedding(d["embedding"])) for d in data]
        except (TypeError, KeyError, ValueError, struct.error):
            return None
        fitted = [v for v in vectors if v is not None]
        return fitted if len(fitted) == len(vectors) == len(texts) else None

    def _memory_url(self, path: str) -> str:
        return self._cfg.memory_base_url.rstrip("/") + path

    async def _search(self, query: str) -> list[dict[str, Any]]:
        vectors = await self.embed([query])
        if vectors is None:
            return []
        body = {"agent_name": self._app, "user_id": self._user, "vector": vectors[0], "limit": 5, "min_score": 0.3}
        found = await self._post("search", self._memory_url("/api/memories/search"), body, self._headers())
        return [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []

    async def prefetch(self, text: str) -> None:
        """Search once per qualifying sentence, in parallel; keep each memory once."""
        results = await asyncio.gather(*(self._search(q) for q in prefetch_queries(text)))
        seen: set[str] = set()
        for memories in results:
            for memory in memories:
                key = str(memory.get("id"))
                if key not in seen and memory.get("content"):
                    seen.add(key)
                    self.turn.recalled.append(str(memory["content"]))

    def _item(self, content: str, vector: list[float]) -> dict[str, Any]:
        item: dict[str, Any] = {"agent_name": self._app, "user_id": self._user, "content": content, "vector": vector}
        if self._cfg.ttl_days > 0:
            item["ttl_days"] = self._cfg.ttl_days
        return item

    async def save(self, content: str) -> None:
        """The save_memory tool: one embedding call, one POST /api/memories/sessions."""
        vectors = await self.embed([content])
        if vectors is not None:
            await self._post(
                "save", self._memory_url("/api/memories/sessions"), self._item(content, vectors[0]), self._headers()
            )

    async def autosave(self, facts: Sequence[str]) -> None:
        """The auto-save: one embedding call for all facts, one POST /api/memories/sessions/batch."""
        vectors = await self.embed(facts)
        if vectors is not None:
            body = {"items": [self._item(f, v) for f, v in zip(facts, vectors, strict=True)]}
            await self._post("save_batch", self._memory_url("/api/memories/sessions/batch"), body, self._headers())


async def run_turn(
    http: aiohttp.ClientSession,
    cfg: RuntimeConfig,
    namespace: str,
    name: str,
    user_id: str,
    text: str,
    *,
    first_turn: bool,
) -> Turn:
    """Make the memory calls the runtime would make for ``text``; never raises for HTTP failures."""
    agent = AgentTurn(http, cfg, namespace, name, user_id)
    if first_turn:
        await agent.prefetch(text)
    command, _, rest = text.partition(":")
    if command.strip().lower() == "remember" and rest.strip():
        await agent.save(rest.strip())
    elif command.strip().lower() == "autosave":
        facts = [f.strip() for f in rest.split(";") if f.strip()]
        if facts:
            await agent.autosave(facts)
    return agent.turn
