"""Governed writes to kagent's definitions (``controller.write``): agents, sandbox agents, agent
harnesses, ModelConfigs, tool servers and prompt templates, created, changed or deleted.

kagent v0.9.11 authorizes nothing on these routes, and what they write becomes pods, Services,
ServiceAccounts and Secrets in kagent's namespace. Each write is parsed strictly (R-18), its
targets and its claims on memgov's boundary are read the way kagent reads them
(``decide.definitions``), and the pack and the floor decide: the floor refuses every claim, the
reference pack asks for an operator token (``X-Memgov-Operator: Bearer <JWT>``) on the
definitions of the agents memgov governs and the ModelConfigs they use. kagent then receives the
body memgov serialized from the value it checked, without the operator token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from sidecar import metrics
from sidecar.clock import Clock
from sidecar.decide.decider import Facts
from sidecar.decide.definitions import Boundary, Definition, Unreadable, read
from sidecar.decide.respond import decision_headers
from sidecar.enforce.pipeline import Admitted, Call, RouteSpec, Stages
from sidecar.identity import IdentityError
from sidecar.identity.tokens import Verifier, bearer, verify_operator_token
from sidecar.policy.model import Decision, DefinitionKind, Operation, RequestFacts, WriteFacts
from sidecar.reasons import Reason, Refusal
from sidecar.relay import forward, read_body
from sidecar.upstream import OPERATOR_HEADER, Upstream
from sidecar.wire import dumps

_MODELCONFIGS: Final = "modelconfigs"


@dataclass(frozen=True, slots=True)
class DefinitionParts:
    """What a definition write uses: memgov's identity, the definitions it governs, the operator
    verifier, and the controller the write goes to."""

    boundary: Boundary
    #: namespace/name of every memory agent and of its memory-disabled variant.
    governed_agents: frozenset[str]
    #: namespace/name of every ModelConfig a memory agent uses.
    governed_models: frozenset[str]
    #: Verifies operator tokens (None: no operator can authenticate).
    operators: Verifier | None
    operator_max_age_s: int
    clock: Clock
    controller: Upstream
    #: namespace/name of the ModelConfigs the memory agents' kagent definitions name for their memory
    #: (read from kagent, ``contentstore.controller``): governed like the configured ones.
    declared_models: Callable[[], frozenset[str]] = field(default=frozenset)


class Definitions(Stages[DefinitionParts]):
    """The stages of a governed definition write, over one :class:`DefinitionParts`."""

    def _operator(self, request: web.Request) -> bool:
        token = bearer(request.headers.get(OPERATOR_HEADER))
        verifier = self._p.operators
        if token is None or verifier is None:
            return False
        try:
            verify_operator_token(
                token, verifier, now=int(self._p.clock().timestamp()), max_age_s=self._p.operator_max_age_s
            )
        except IdentityError:
            return False
        return True

    def _governed(self, write: Definition) -> bool:
        refs = {t.ref for t in write.targets}
        models = self._p.governed_models | self._p.declared_models()
        governed = models if write.kind == _MODELCONFIGS else self._p.governed_agents
        return write.kind in ("agents", "sandboxagents", "agentharnesses", _MODELCONFIGS) and bool(refs & governed)

    async def parse(self, call: Call) -> Definition:
        """The write's verb, its body read strictly, and every definition it names."""
        request = call.request
        kind: DefinitionKind = call.match.params["kind"]  # type: ignore[assignment]  # routes.DEFINITIONS are its values
        # Read within the listener limits (a delete's body is read too, and never sent on).
        raw = await read_body(request)
        try:
            if request.headers.get("Content-Encoding", "identity").lower() != "identity":
                raise Unreadable("encoded")
            return read(kind, request.method, call.match.params, raw, self._p.boundary.kagent_namespace)
        except Unreadable:
            raise Refusal(Reason.BAD_REQUEST) from None

    async def admit(self, call: Call, write: Definition) -> Admitted[Definition]:
        """The write's targets, whether one is governed, whether an operator sent it, and what it claims."""
        operator = self._operator(call.request)
        claims = self._p.boundary.claims(write.body, write.targets)
        for claim in claims:
            metrics.DEFINITION_CLAIMS.labels(claim).inc()
        facts = WriteFacts(
            kind=write.kind,
            verb=write.verb,
            targets=sorted({t.ref for t in write.targets}),
            governed=self._governed(write),
            operator=operator,
            claims=claims,
        )
        return Admitted(Facts(request=RequestFacts(write=facts)), write, credentialed=operator)

    async def forward(self, call: Call, write: Definition, decision: Decision) -> web.StreamResponse:
        """kagent receives the body memgov checked, serialized by memgov, and never the operator token."""
        # SECURITY: what kagent decodes is exactly the value the claims were read from.
        body = b"" if write.body is None else dumps(write.body)
        headers = {"Content-Type": "application/json"} if write.body is not None else {}
        return await forward(
            call.request,
            self._p.controller,
            body=body,
            headers=headers,
            drop=("Content-Type", "Content-Encoding"),
            response_headers=decision_headers(decision),
        )

    def spec(self) -> RouteSpec[Definition, Definition]:
        """A definition write: decided by the pack and the floor, forwarded as checked."""
        return RouteSpec(Operation.CONTROLLER_WRITE, self.parse, self.admit, self.forward)
