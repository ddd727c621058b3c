"""Governed handlers for the data plane: one declared route per traffic class, run by one pipeline.

``enforce/pipeline.py`` runs every route's stages in order (parse → admit → decide + record →
forward); the specs below say, per class, which stages those are (see docs/enforcement.md).
"""

from __future__ import annotations

from aiohttp.typedefs import Middleware

from sidecar.decide.context import spend_contexts
from sidecar.enforce.embedding import EMBED
from sidecar.enforce.invoke import INVOKE
from sidecar.enforce.memory import SEARCH, save_spec
from sidecar.enforce.pipeline import closed, run
from sidecar.policy.model import Operation
from sidecar.reasons import Reason
from sidecar.relay import ClassHandler
from sidecar.routes import RouteClass


def governed_handlers() -> dict[RouteClass, ClassHandler]:
    """The class table entries that replace the transparent defaults once governance is on."""
    return {
        RouteClass.A2A_INVOKE: run(INVOKE),
        RouteClass.MEMORY_SAVE: run(save_spec(Operation.MEMORY_SAVE)),
        RouteClass.MEMORY_SAVE_BATCH: run(save_spec(Operation.MEMORY_SAVE_BATCH)),
        RouteClass.MEMORY_SEARCH: run(SEARCH),
        RouteClass.EMBEDDING: run(EMBED),
        # Whole-namespace list and delete are control-plane work: the data plane refuses them.
        RouteClass.MEMORY_LIST: closed(Operation.MEMORY_LIST, Reason.ROUTE_DENIED),
        RouteClass.MEMORY_DELETE_ALL: closed(Operation.MEMORY_DELETE_ALL, Reason.ROUTE_DENIED),
    }


def governed_middlewares() -> tuple[Middleware, ...]:
    """Data-plane middlewares governance adds: every delegation context is spent where it is seen."""
    return (spend_contexts,)
