"""OpenAI-compatible embedding provider stand-in (``POST /v1/embeddings`` and ``/embeddings``).

Vectors come from :func:`sidecar.dev.devstack.vectors.embed_text`, as float lists or base64
float32. Failures can be injected (status, verbatim error body, delay) at construction or at
runtime through ``POST /__devstack/faults``. Calls are recorded in memory (never logged),
including whether an Authorization header arrived.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from sidecar.dev.devstack.vectors import embed_text

#: The largest ``dimensions`` a request may ask for (OpenAI's largest embedding model has 3072).
MAX_DIMENSIONS = 3072


@dataclass
class EmbeddingFaults:
    """Injected behaviour: answer ``status`` with ``body`` verbatim (when set), after ``delay_s``."""

    status: int | None = None
    body: str = ""
    delay_s: float = 0.0


@dataclass(frozen=True)
class EmbeddingCall:
    """One request to the provider."""

    path: str
    model: str | None
    inputs: tuple[str, ...]
    authorization_present: bool
    header_names: frozenset[str]
    body_keys: frozenset[str] = frozenset()


@dataclass
class EmbeddingState:
    """Configuration and record of one embedding app."""

    dim: int
    faults: EmbeddingFaults
    calls: list[EmbeddingCall] = field(default_factory=list)


EMBEDDING = web.AppKey("devstack_embedding", EmbeddingState)


def _openai_error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    return web.json_response(body, status=status)


def _inputs(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return None


def _encode(vector: list[float], encoding: str) -> Any:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


async def embeddings(request: web.Request) -> web.Response:
    """Answer an embeddings request, or the injected fault."""
    state = request.app[EMBEDDING]
    try:
        body = json.loads(await request.read())
    except (ValueError, RecursionError):  # a provider refuses a too-deep document as unparseable
        body = None
    inputs = _inputs(body.get("input")) if isinstance(body, dict) else None
    model = body.get("model") if isinstance(body, dict) else None
    state.calls.append(
        EmbeddingCall(
            request.path,
            model if isinstance(model, str) else None,
            tuple(inputs or ()),
            "Authorization" in request.headers,
            frozenset(k.lower() for k in request.headers),
            frozenset(body) if isinstance(body, dict) else frozenset(),
        )
    )
    faults = state.faults
    if faults.delay_s > 0:
        await asyncio.sleep(faults.delay_s)  # simulates a slow provider
    if faults.status is not None:
        content_type = "application/json" if faults.body.lstrip().startswith("{") else "text/plain"
        return web.Response(status=faults.status, text=faults.body, content_type=content_type)
    if not isinstance(body, dict):
        return _openai_error(400, "We could not parse the JSON body of your request.")
    if inputs is None:
        return _openai_error(400, "'input' must be a non-empty string or array of strings")
    if "model" in body and not isinstance(model, str):
        return _openai_error(400, "'model' must be a string")
    dims = body.get("dimensions", state.dim)
    if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= MAX_DIMENSIONS:
        return _openai_error(400, f"'dimensions' must be an integer from 1 to {MAX_DIMENSIONS}")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        return _openai_error(400, "'encoding_format' must be float or base64")
    data = [
        {"object": "embedding", "index": i, "embedding": _encode(embed_text(text, dims), encoding)}
        for i, text in enumerate(inputs)
    ]
    tokens = sum(max(1, len(text.split())) for text in inputs)
    return web.json_response(
        {
            "object": "list",
            "data": data,
            "model": model or "devstack-embedding",
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


async def set_faults(request: web.Request) -> web.Response:
    """Replace the faults: ``{"status", "body", "delay_s"}``; ``{}`` turns them off."""
    try:
        body = json.loads(await request.read() or b"{}")
        status = body.get("status")
        if status is not None and (not isinstance(status, int) or not 100 <= status <= 599):
            raise ValueError("status")
        faults = EmbeddingFaults(status, str(body.get("body", "")), float(body.get("delay_s", 0.0)))
    except (ValueError, TypeError, AttributeError):
        return web.json_response({"error": "expected {status, body, delay_s}"}, status=400)
    request.app[EMBEDDING].faults = faults
    return web.json_response({"status": "set"})


def create_embedding_app(
    *, dim: int = 768, faults: EmbeddingFaults | None = None, middlewares: Iterable[Middleware] = ()
) -> web.Application:
    """Build the provider stand-in; ``app[EMBEDDING]`` holds its faults and recorded calls."""
    app = web.Application(client_max_size=1 << 30, middlewares=list(middlewares))
    app[EMBEDDING] = EmbeddingState(dim, faults if faults is not None else EmbeddingFaults())
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/embeddings", embeddings)
    app.router.add_post("/__devstack/faults", set_faults)
    return app
