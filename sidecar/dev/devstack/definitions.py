"""kagent's Agent and ModelConfig definitions, as far as memgov reads them (``handlers/agents.go``,
``modelconfig.go``), for the stand-in in both release models.

memgov reads a memory agent's declared embedding model from ``GET /api/agents/{ns}/{name}``
(``data.agent.spec.declarative.memory.modelConfig``) and that ModelConfig from
``GET /api/modelconfigs/{ns}/{name}`` (``data.spec``). Created definitions are kept, in memory, and
answered in kagent's envelope; a definition never created answers kagent's 404. kagent's
validation (its translator) is not modelled: any JSON object with a name is kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from sidecar.dev.devstack.gohttp import go_error, go_json
from sidecar.dev.devstack.gojson import go_loads
from sidecar.dev.devstack.state import PARAMS

#: kagent's namespace: where a definition without one is created.
KAGENT_NAMESPACE = "kagent"


@dataclass
class DefinitionBook:
    """The Agents and ModelConfigs created so far, by ``namespace/name``."""

    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    model_configs: dict[str, dict[str, Any]] = field(default_factory=dict)


BOOK = web.AppKey("devstack_definitions", DefinitionBook)


async def _object(request: web.Request) -> dict[str, Any] | None:
    try:
        body = go_loads(await request.read())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _ref(namespace: object, name: object) -> str | None:
    if not isinstance(name, str) or not name:
        return None
    return f"{namespace if isinstance(namespace, str) and namespace else KAGENT_NAMESPACE}/{name}"


def _keep(table: dict[str, dict[str, Any]], ref: str, value: dict[str, Any], kind: str) -> web.Response:
    """Create: 409 for a name taken, else keep ``value`` and answer 201 with it."""
    if ref in table:
        return go_error(409, f"{kind} already exists")
    table[ref] = value
    return go_json(201, {"error": False, "data": value, "message": f"Successfully created {kind}"})


def _found(request: web.Request, table: dict[str, dict[str, Any]], kind: str) -> dict[str, Any] | web.Response:
    """Get: the definition the path names, or kagent's 404 for it."""
    kept = table.get(f"{request[PARAMS]['namespace']}/{request[PARAMS]['name']}")
    return kept if kept is not None else go_error(404, f"{kind} not found")


async def create_agent(request: web.Request) -> web.Response:
    """POST /api/agents: an Agent object, kept under its metadata's namespace and name."""
    agent = await _object(request)
    meta = agent.get("metadata") if agent else None
    ref = _ref(meta.get("namespace"), meta.get("name")) if isinstance(meta, dict) else None
    if agent is None or ref is None:
        return go_error(400, "Invalid request body")
    return _keep(request.app[BOOK].agents, ref, agent, "agent")


async def get_agent(request: web.Request) -> web.Response:
    """GET /api/agents/{namespace}/{name}: ``data.agent`` is the object created."""
    agent = _found(request, request.app[BOOK].agents, "Agent")
    if isinstance(agent, web.Response):
        return agent
    meta = agent["metadata"]
    ref = f"{meta.get('namespace') or KAGENT_NAMESPACE}/{meta['name']}"
    data = {"id": ref.replace("-", "_").replace("/", "__NS__"), "agent": agent}
    return go_json(200, {"error": False, "data": data, "message": "Successfully retrieved agent"})


async def create_model_config(request: web.Request) -> web.Response:
    """POST /api/modelconfigs: ``{"ref": "ns/name", "spec": {...}}`` (an inline apiKey is not kept)."""
    body = await _object(request)
    ns, _, name = str(body.get("ref", "")).rpartition("/") if body else ("", "", "")
    ref = _ref(ns, name)
    if body is None or ref is None or not isinstance(body.get("spec"), dict):
        return go_error(400, "Invalid request body")
    return _keep(request.app[BOOK].model_configs, ref, {"ref": ref, "spec": body["spec"], "status": {}}, "ModelConfig")


async def get_model_config(request: web.Request) -> web.Response:
    """GET /api/modelconfigs/{namespace}/{name}: ``data`` is ``{"ref", "spec", "status"}``."""
    kept = _found(request, request.app[BOOK].model_configs, "ModelConfig")
    if isinstance(kept, web.Response):
        return kept
    return go_json(200, {"error": False, "data": kept, "message": "Successfully retrieved ModelConfig"})


async def declare(
    http: aiohttp.ClientSession,
    kagent_url: str,
    agents: Mapping[str, str],
    *,
    headers: Mapping[str, str] | None = None,
    config: str = "embed",
) -> None:
    """Create each memory agent's definition in kagent (the stand-in or kagent itself), as a cluster
    holds it: a declarative Agent whose memory names the ModelConfig ``config`` of its namespace, and
    that ModelConfig with the agent's embedding model (``agents``: ``namespace/name`` → model)."""
    sent = {"Content-Type": "application/json", **(headers or {})}
    made: set[str] = set()
    for ref, model in agents.items():
        ns, _, name = ref.partition("/")
        bodies = []
        if f"{ns}/{config}" not in made:
            made.add(f"{ns}/{config}")
            spec = {"provider": "OpenAI", "model": model}
            bodies.append(("/api/modelconfigs", {"ref": f"{ns}/{config}", "apiKey": "sk-devstack", "spec": spec}))
        declarative = {"modelConfig": config, "systemMessage": "You help.", "memory": {"modelConfig": config}}
        agent = {
            "apiVersion": "kagent.dev/v1alpha2",
            "kind": "Agent",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "Declarative", "description": "memory agent", "declarative": declarative},
        }
        bodies.append(("/api/agents", agent))
        for path, body in bodies:
            async with http.post(kagent_url + path, data=json.dumps(body), headers=sent) as resp:
                if resp.status not in (200, 201):
                    raise RuntimeError(f"kagent refused {path} for {ref}: {resp.status} {(await resp.read())[:300]!r}")
