"""What memgov reads of kagent's controller API besides memory: its release, and each governed agent's
declared memory model.

Both are read with memgov's own credentials, at start and then every ``upstream.kagent_refresh_s``,
never from traffic: the release from ``GET /version``, an agent's memory model from its definition
(``GET /api/agents/{ns}/{name}``: ``spec.declarative.memory.modelConfig``) and that ModelConfig
(``GET /api/modelconfigs/{ns}/{name}``: ``spec.provider``, ``spec.model``). Every answer is checked
for its shape; anything else counts as unknown. A change to either definition is a governed write
(an operator credential for a memory agent's), so what is read here is what an operator declared.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

import aiohttp
import orjson
from multidict import CIMultiDict

from sidecar import metrics
from sidecar.contentstore.reembed import EmbeddingModel
from sidecar.contentstore.rotator import ModelBook
from sidecar.logs import get_logger
from sidecar.upstream import Upstream, UpstreamUnavailable

log = get_logger("kagent")

#: The kagent releases memgov is tested against (docs/conformance.md): their own controller code runs in
#: ``make test``. Another release is served all the same, and shows as untested in /readyz and a metric.
TESTED_RELEASES: Final = ("v0.9.11", "v0.10.0-rc3")
#: A release string kagent may report; anything else is reported as unrecognised, never repeated.
_RELEASE: Final = re.compile(r"v?[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}(-[0-9A-Za-z.]{1,32})?")
#: A Kubernetes object name (a ModelConfig's), and a provider's model id (as ``agents.<ref>.embedding_model``).
_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9.\-]{0,251}[a-z0-9])?")
_MODEL: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+\-]{0,127}")
#: kagent's runtimes ask an OpenAI provider for 768 dimensions (go/adk embedding.TargetDimension).
RUNTIME_DIMENSIONS: Final = 768


@dataclass(frozen=True, slots=True)
class Release:
    """kagent's release as its controller reported it; ``name`` None when it answered nothing usable."""

    name: str | None

    @property
    def tested(self) -> bool:
        return self.name in TESTED_RELEASES


def _dig(value: object, *path: str) -> object:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


class KagentController:
    """Reads kagent's controller API with memgov's own credentials (a bearer in its trusted-proxy mode)."""

    __slots__ = ("_headers", "_upstream")

    def __init__(self, upstream: Upstream, headers: Callable[[], Mapping[str, str]]) -> None:
        self._upstream, self._headers = upstream, headers

    async def _get(self, path: str) -> object:
        """The decoded JSON of a 200 answer; None for any other answer (its body is read and dropped)."""
        try:
            async with self._upstream.request("GET", path, headers=CIMultiDict(self._headers())) as resp:
                raw = await resp.read()
                if resp.status != HTTPStatus.OK:
                    return None
        except (UpstreamUnavailable, aiohttp.ClientError, OSError, TimeoutError):
            return None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None

    async def release(self) -> Release:
        """kagent's release from ``GET /version`` (``kagent_version``)."""
        name = _dig(await self._get("/version"), "kagent_version")
        return Release(name if isinstance(name, str) and _RELEASE.fullmatch(name) else None)

    async def declared_model(self, ref: str) -> tuple[str | None, EmbeddingModel | None]:
        """The ModelConfig (``namespace/name``) an agent's definition names for its memory, and that
        ModelConfig's embedding model; None for either when the definition names none usable."""
        ns, _, name = ref.partition("/")
        agent = _dig(await self._get(f"/api/agents/{ns}/{name}"), "data", "agent")
        config = _dig(agent, "spec", "declarative", "memory", "modelConfig")
        if not isinstance(config, str) or _NAME.fullmatch(config) is None:
            return None, None
        return f"{ns}/{config}", await self._model(ns, config)

    async def _model(self, ns: str, config: str) -> EmbeddingModel | None:
        spec = _dig(await self._get(f"/api/modelconfigs/{ns}/{config}"), "data", "spec")
        model, provider = _dig(spec, "model"), _dig(spec, "provider")
        # SECURITY: memgov re-embeds through the OpenAI embeddings API only; another provider's model id,
        # or a value that is not a model id, is no model at all (rotation then waits, never guesses).
        if provider not in (None, "", "OpenAI") or not isinstance(model, str) or _MODEL.fullmatch(model) is None:
            return None
        return EmbeddingModel(model, RUNTIME_DIMENSIONS)


class KagentWatch:
    """kagent's release and the governed agents' declared memory models, read at start and then periodically."""

    def __init__(self, controller: KagentController, models: ModelBook | None, interval_s: float) -> None:
        self._controller, self._models, self._interval_s = controller, models, interval_s
        self.release: Release | None = None

    async def refresh(self) -> None:
        """Read kagent's release and every undeclared agent's model once; publish what was read."""
        self.release = await self._controller.release()
        metrics.KAGENT_RELEASE_UNTESTED.set(0 if self.release.tested else 1)
        if self._models is not None:
            for ref in self._models.undeclared():
                self._models.learn(ref, *await self._controller.declared_model(ref))
            metrics.ROTATION_AGENTS_WITHOUT_MODEL.set(len(self._models.missing()))
        log.info(
            "kagent.read",
            outcome="tested" if self.release.tested else ("untested" if self.release.name else "unknown"),
            count=len(self._models.missing()) if self._models is not None else 0,
        )

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # noqa: BLE001 - one failed reading must not end the watch
                log.error("kagent.read_failed", error_type=type(exc).__name__)
            await asyncio.sleep(self._interval_s)

    async def ready_check(self) -> tuple[bool, dict[str, object]]:
        """A readiness detail: kagent's release, whether it is tested, which are. Never makes the pod unready."""
        release = self.release
        detail: dict[str, object] = {
            "release": release.name if release is not None else None,
            "tested": release is not None and release.tested,
            "tested_releases": list(TESTED_RELEASES),
        }
        if self._models is not None:
            detail["agents_without_model"] = self._models.missing()
        return True, detail
