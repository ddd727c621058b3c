"""Re-embedding for namespace rotation: the agent's own model, its runtime's processing, memory only.

A rotated entry must be found by the same searches as before, so its vector is made the way the
agent's runtime made the original: the same OpenAI-compatible provider and model (with the
``dimensions`` and ``encoding_format`` the runtime sends), then the processing kagent's runtimes
apply (kagent-adk's ``KAgentEmbedding`` and go/adk: a longer vector is cut to 768 and
L2-normalised, a 768 one is kept as is, a shorter one is refused). Texts and vectors exist only in
this process's memory for the duration of one call; provider answers other than a well-formed
success are read and dropped, never logged or echoed.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import aiohttp

from sidecar.contentstore.adapters import AdapterError
from sidecar.reasons import Reason
from sidecar.wire import dumps, is_vector

TARGET_DIM: Final = 768
#: Texts per provider call (the runtime's auto-save sends up to 10; providers accept far more).
BATCH: Final = 32
_HTTP_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, OSError, TimeoutError)


@dataclass(frozen=True)
class EmbeddingModel:
    """What an agent's runtime asks its provider for (content-free configuration)."""

    model: str
    dimensions: int | None = None
    encoding_format: str | None = None


def runtime_vector(raw: Sequence[float]) -> list[float] | None:
    """The vector kagent's runtimes store for a provider's answer, or None where they store nothing."""
    if len(raw) < TARGET_DIM:
        return None
    if len(raw) == TARGET_DIM:
        vector = [float(x) for x in raw]
    else:
        cut = raw[:TARGET_DIM]
        norm = math.sqrt(sum(float(x) * float(x) for x in cut))
        vector = [float(x) / norm for x in cut] if norm else [float(x) for x in cut]
    # SECURITY: kagent answers 500 to every search of a namespace holding a zero or non-finite vector.
    return vector if is_vector(vector) else None


def _decode(value: object) -> list[float] | None:
    """An embedding as floats: a JSON list, or base64 little-endian float32 (the OpenAI SDK's default)."""
    if isinstance(value, list):
        return value if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value) else None
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        if not raw or len(raw) % 4:
            return None
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return None


class Reembedder:
    """Calls the embedding provider with memgov's own credential (``upstream.embedding_api_key_file``)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, api_key: bytes | None) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + "/embeddings"
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = "Bearer " + api_key.decode("ascii", "strict")

    async def embed(self, model: EmbeddingModel, texts: Sequence[str]) -> list[list[float]]:
        """One provider call: a 768-float vector per text, in order; AdapterError (a reason code only) on any
        failure. Callers send at most :data:`BATCH` texts per call."""
        body: dict[str, object] = {"model": model.model, "input": list(texts)}
        if model.dimensions is not None:
            body["dimensions"] = model.dimensions
        if model.encoding_format is not None:
            body["encoding_format"] = model.encoding_format
        try:
            async with self._session.post(self._url, data=dumps(body), headers=self._headers) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    # SECURITY: a provider's error text may quote the input; it is dropped here.
                    raise AdapterError(Reason.UPSTREAM_ERROR)
        except _HTTP_ERRORS:
            raise AdapterError(Reason.UPSTREAM_UNAVAILABLE) from None
        return _vectors(raw, len(texts))

    async def close(self) -> None:
        """Close the provider session."""
        await self._session.close()


def _vectors(raw: bytes, expected: int) -> list[list[float]]:
    """The processed vectors of a provider answer, ordered by ``index``; AdapterError when malformed."""
    try:
        answer = json.loads(raw)
    except (ValueError, RecursionError):
        raise AdapterError(Reason.UPSTREAM_ERROR) from None
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or len(data) != expected:
        raise AdapterError(Reason.UPSTREAM_ERROR)
    by_index: dict[int, list[float]] = {}
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        decoded = _decode(item.get("embedding")) if isinstance(item, dict) else None
        vector = runtime_vector(decoded) if decoded is not None else None
        if not isinstance(index, int) or isinstance(index, bool) or vector is None or index in by_index:
            raise AdapterError(Reason.UPSTREAM_ERROR)
        by_index[index] = vector
    if sorted(by_index) != list(range(expected)):
        raise AdapterError(Reason.UPSTREAM_ERROR)
    return [by_index[i] for i in range(expected)]
