"""Governed embedding calls: ``/embeddings/{ns}/{name}/v1/embeddings`` → the provider (SPEC §2, R-11, R-18).

An embedding request carries no user, so it is admitted for a memory-enabled agent that has at
least one enabled scope, within per-item size and count limits and the agent's hourly item
budget (its own stricter cap when limits.yaml's agent_limits names it); each source address has
its own share of that budget, so one caller cannot spend it for every user of the agent. The
scope pays again on the memory call that follows. The provider receives a body memgov
serialized from the fields it checked (OpenAI's ``model``, ``input``, ``dimensions``,
``encoding_format``); provider error bodies are replaced; the provider API key passes through
untouched and is never logged; kagent's identity headers stop here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from aiohttp import web

from sidecar import metrics
from sidecar.clock import Clock
from sidecar.decide.decider import Facts
from sidecar.decide.facts import agent_of, utf8_len
from sidecar.decide.respond import decision_headers
from sidecar.enforce import budgets
from sidecar.enforce.pipeline import Admitted, Call, RouteSpec, Stages
from sidecar.identity.appname import Agents
from sidecar.policy.model import Budget, Decision, Limits, Operation, RequestFacts
from sidecar.reasons import Reason, Refusal
from sidecar.relay import NO_EMBEDDING_UPSTREAM, forward, read_body
from sidecar.state.types import ENCODINGS
from sidecar.upstream import Upstream
from sidecar.wire import BadBody, StrictJSON, dumps, is_int64

if TYPE_CHECKING:
    from sidecar.state.budgets import BudgetOps
    from sidecar.state.scopes import ScopeOps

#: Fields an OpenAI-compatible provider reads; ``user`` (a free-text end-user id) is never forwarded.
_FIELDS: Final = ("model", "input", "dimensions", "encoding_format", "user")
_PARSER = StrictJSON(_FIELDS)
#: A provider's model or deployment name ("text-embedding-3-small", "ft:…", "org/model", "model@001").
#: SECURITY: providers echo the name in their answer, which memgov relays; a name that could carry
#: text (spaces, quotes, control or non-ASCII characters) is refused, so an answer never carries it.
_MODEL: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,127}")
_DROPPED: Final = ("X-User-Id", "X-Agent-Name", "X-Share-Token", "Content-Length", "Content-Encoding")


def embedding_request(payload: dict[str, object]) -> tuple[list[str], dict[str, object]] | None:
    """The texts and the body to forward, from a checked OpenAI-style request; None if malformed."""
    value, model = payload.get("input"), payload.get("model")
    if isinstance(value, str):
        inputs = [value]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        inputs = list(value)
    else:
        return None
    body: dict[str, object] = {"model": model, "input": value}
    if not isinstance(model, str) or _MODEL.fullmatch(model) is None:
        return None
    if "dimensions" in payload:
        if not is_int64(payload["dimensions"]):
            return None
        body["dimensions"] = payload["dimensions"]
    if "encoding_format" in payload:
        if not isinstance(payload["encoding_format"], str) or payload["encoding_format"] not in ENCODINGS:
            return None
        body["encoding_format"] = payload["encoding_format"]
    return inputs, body


@dataclass(frozen=True, slots=True)
class EmbeddingParts:
    """What the embedding route uses: whether an agent has a consented scope, its item budgets, the provider."""

    scopes: ScopeOps
    budgets: BudgetOps
    agents: Agents
    limits: Callable[[], Limits]
    clock: Clock
    #: The provider; None when no embedding URL is configured (the route does not exist then).
    provider: Upstream | None


@dataclass(frozen=True, slots=True)
class _Embedding:
    """The texts to embed and the body memgov serialises for the provider from the fields it checked."""

    inputs: list[str]
    body: dict[str, object]


class Embeddings(Stages[EmbeddingParts]):
    """The stages of the governed embedding route, over one :class:`EmbeddingParts`."""

    async def parse(self, call: Call) -> _Embedding:
        if self._p.provider is None:
            raise Refusal(Reason.ROUTE_DENIED, status=NO_EMBEDDING_UPSTREAM)
        try:
            if call.request.headers.get("Content-Encoding", "identity").lower() != "identity":
                raise BadBody("encoded")
            parsed = embedding_request(_PARSER.parse_object(await read_body(call.request)))
        except BadBody:
            parsed = None
        if parsed is None:
            raise Refusal(Reason.BAD_REQUEST)
        return _Embedding(*parsed)

    async def admit(self, call: Call, emb: _Embedding) -> Admitted[_Embedding]:
        """A consented agent's item budget, reserved per agent and per source address."""
        p = self._p
        ref = f"{call.match.params['ns']}/{call.match.params['name']}"
        if not p.agents.has_memory(ref) or not await p.scopes.has_enabled_scope(ref):
            # SECURITY: no consented scope for this agent means no memory work at all, embeddings included.
            raise Refusal(Reason.CONSENT_MISSING)
        inputs = emb.inputs
        # Reserved against the global hourly value (the floor); the count it reaches goes to the policy,
        # which holds the agent to its own stricter cap from limits.yaml's agent_limits.
        failed, levels = await p.budgets.reserve_counted(
            budgets.embedding_items(p.limits(), ref, call.request.remote or "", len(inputs)), p.clock()
        )
        # A prefetch query is embedded here before its search (which carries only a vector), so the
        # prefetch query size is enforced on every item too.
        facts = RequestFacts(item_count=len(inputs), max_item_bytes=max(utf8_len(i) for i in inputs))
        budget = Budget(embedding_ok=failed is None, embedding_items_used=levels[1] if failed is None else 0)
        agent = agent_of(ref, p.agents.app_name(ref), True)
        return Admitted(Facts(agent_ref=ref, agent=agent, request=facts, budget=budget), emb)

    async def forward(self, call: Call, emb: _Embedding, decision: Decision) -> web.StreamResponse:
        provider = self._p.provider
        assert provider is not None  # parse refused the call otherwise
        metrics.MEMORY_OPERATIONS.labels("embedding").inc(len(emb.inputs))
        return await forward(
            call.request,
            provider,
            path="/embeddings",
            body=dumps(emb.body),
            drop=_DROPPED,
            headers={"Content-Type": "application/json"},
            response_headers=decision_headers(decision),
            replace_errors=True,
        )

    def spec(self) -> RouteSpec[_Embedding, _Embedding]:
        return RouteSpec(Operation.EMBEDDING, self.parse, self.admit, self.forward)
