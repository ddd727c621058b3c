"""Governed handlers for the data plane: one declared route per traffic class, run by one pipeline.

``enforce/pipeline.py`` runs every route's stages in order (parse → admit → decide + record →
forward); the specs below say, per class, which stages those are (see docs/enforcement.md). Each
route's stages are built from the parts bundle of its own module, which ``root.py`` fills.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Middleware

from sidecar.decide.context import Contexts
from sidecar.decide.decider import Decider, Facts
from sidecar.decide.respond import decision_headers
from sidecar.enforce.definitions import DefinitionParts, Definitions
from sidecar.enforce.embedding import EmbeddingParts, Embeddings
from sidecar.enforce.invoke import Invocations, InvokeParts
from sidecar.enforce.memory import MemoryParts
from sidecar.enforce.pipeline import Admitted, Call, RouteSpec, closed, run
from sidecar.enforce.saves import Saves
from sidecar.enforce.searches import Searches
from sidecar.enforce.shares import ShareParts, Shares, TokenRoutes
from sidecar.policy.model import Decision, Operation
from sidecar.reasons import Reason
from sidecar.relay import CONTROLLER, ClassHandler, forward
from sidecar.routes import RouteClass, RouteMatch, Traffic


async def _nothing(call: Call) -> None:
    return None


async def _no_facts(call: Call, _: None) -> Admitted[None]:
    return Admitted(Facts(), None)


async def _relay(call: Call, _: None, decision: Decision) -> web.StreamResponse:
    return await forward(call.request, call.request.app[CONTROLLER], response_headers=decision_headers(decision))


#: Other runtimes' memory stores (CrewAI, LangGraph) hold content memgov cannot see: the pack and the
#: floor decide them like any other operation, and the floor refuses every one (ungoverned_store).
UNGOVERNED = RouteSpec(Operation.MEMORY_UNGOVERNED, _nothing, _no_facts, _relay)


def governed_handlers(
    decider: Decider,
    memory: MemoryParts,
    invoke: InvokeParts,
    embedding: EmbeddingParts,
    definitions: DefinitionParts,
    shares: ShareParts,
    passthrough: ClassHandler,
) -> dict[RouteClass, ClassHandler]:
    """The class table entries that replace the transparent defaults once governance is on
    (``passthrough``: the transparent relay, which share tokens are decided in front of)."""
    saves = Saves(memory)
    invocations = Invocations(invoke)
    decided_share = run(Shares(shares).spec(), decider)

    def memory_agent(match: RouteMatch) -> bool:
        return invocations.governs_route(match)

    tokens = TokenRoutes(decided_share, passthrough, run(invocations.spec(), decider), memory_agent)
    return {
        Traffic.PASSTHROUGH: tokens.on_passthrough,
        Operation.SESSION_SHARE: decided_share,
        Operation.A2A_INVOKE: tokens.on_a2a,
        Operation.MEMORY_SAVE: run(saves.spec(Operation.MEMORY_SAVE), decider),
        Operation.MEMORY_SAVE_BATCH: run(saves.spec(Operation.MEMORY_SAVE_BATCH), decider),
        Operation.MEMORY_SEARCH: run(Searches(memory).spec(), decider),
        Operation.EMBEDDING: run(Embeddings(embedding).spec(), decider),
        Operation.MEMORY_UNGOVERNED: run(UNGOVERNED, decider),
        Operation.CONTROLLER_WRITE: run(Definitions(definitions).spec(), decider),
        # Whole-namespace list and delete are control-plane work: the data plane refuses them.
        Operation.MEMORY_LIST: closed(Operation.MEMORY_LIST, Reason.ROUTE_DENIED, decider),
        Operation.MEMORY_DELETE_ALL: closed(Operation.MEMORY_DELETE_ALL, Reason.ROUTE_DENIED, decider),
    }


def governed_middlewares(contexts: Contexts) -> tuple[Middleware, ...]:
    """Data-plane middlewares governance adds: every delegation context is spent where it is seen."""
    return (contexts.spend,)
