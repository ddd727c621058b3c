"""What governed saves and searches share: their parts, the key check and admission, their decision facts.

The runtime presents the session key as ``user_id``. The gateway parses the body once, strictly
(``sidecar.wire``), verifies the key, checks the scope is enabled at that generation and the
agent name is the scope's, reserves budgets in one state transaction, asks the policy, and only
then forwards a body it serialized itself (``saves.py``, ``searches.py``): ``user_id`` is the
scope's live storage key and ``agent_name`` the scope's one canonical ``app_name``, whatever
spelling the runtime used (SPEC D1–D4, R-9–R-11, R-18).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from sidecar import tracing
from sidecar.clock import Clock
from sidecar.contentstore.adapters import EraseAdapter
from sidecar.contentstore.kagent import KagentMemory
from sidecar.decide.decider import Facts
from sidecar.decide.facts import KeyFacts, agent_of, principal_of, scope_of
from sidecar.enforce import budgets
from sidecar.enforce.pipeline import Admitted, Call
from sidecar.identity.appname import Agents
from sidecar.identity.keys import SessionKeys
from sidecar.policy.model import Budget, Entries, Limits, Operation, RequestFacts
from sidecar.reasons import Reason, Refusal
from sidecar.relay import read_body
from sidecar.state.types import Admission, Claims, WriteAsk
from sidecar.wire import BadBody, StrictJSON

if TYPE_CHECKING:
    from sidecar.state.admission import AdmissionOps
    from sidecar.state.ledger import LedgerOps
    from sidecar.state.scopes import ScopeOps

B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class MemoryParts:
    """What governed saves and searches use: the write path's store facets, memgov's kagent client,
    the eraser a failed save's rows are undone with, the keys and agents calls are checked against."""

    admission: AdmissionOps
    scopes: ScopeOps
    ledger: LedgerOps
    kagent: KagentMemory
    eraser: EraseAdapter
    keys: SessionKeys
    agents: Agents
    limits: Callable[[], Limits]
    clock: Clock
    #: How long an in-flight save's record outlives a lost answer; the memory call timeout.
    write_lease_s: float
    memory_timeout_s: float
    #: How long a new conversation's prefetch searches are counted together.
    prefetch_window_s: int


@dataclass(frozen=True, slots=True)
class Held(Generic[B]):
    """What a memory call's forward stage needs: its admission and its checked body."""

    admission: Admission
    body: B


def _budget(failed: str | None, hourly_used: int) -> Budget:
    return Budget(
        rate_ok=failed != Reason.RATE_LIMITED,
        hourly_ok=failed != Reason.HOURLY_BUDGET_EXHAUSTED,
        prefetch_ok=failed != Reason.PREFETCH_LIMIT,
        embedding_ok=True,
        hourly_operations_used=hourly_used,
    )


async def parse_json(call: Call, parser: StrictJSON) -> dict[str, object]:
    """The strictly parsed body; anything else is refused bad_request (counted, no audit row)."""
    request = call.request
    if request.headers.get("Content-Encoding", "identity").lower() != "identity":
        raise Refusal(Reason.BAD_REQUEST)
    try:
        return parser.parse_object(await read_body(request))
    except BadBody:
        raise Refusal(Reason.BAD_REQUEST) from None


@tracing.traced("memgov.identify")
async def admit_key(
    p: MemoryParts,
    call: Call,
    user_id: object,
    agent_name: object,
    claims: Claims,
    *,
    window: bool = False,
    write: WriteAsk | None = None,
) -> tuple[KeyFacts, Admission]:
    """Verify the key, then read its scope and reserve the call's cost in one state transaction."""
    headers = call.request.headers
    kf = KeyFacts(p.keys, user_id, headers.get("X-User-Id"), agent_name, headers.get("X-Agent-Name"))
    if kf.key_valid:
        # The key verified before the store is asked: a refusal from here on (the store down included)
        # is audited as a credentialed one, a row of its own naming the key's scope.
        call.credentialed, call.scope_id = True, kf.scope_id
    if not (kf.key_valid and kf.scope_id and kf.user_id_matches):
        # Nothing to reserve for a caller that proved no scope; the decision still sees the scope.
        return kf, Admission(await p.scopes.get_scope(kf.scope_id) if kf.key_valid and kf.scope_id else None)
    return kf, await p.admission.admit(kf.scope_id, kf.generation, claims, p.clock(), window=window, write=write)


def memory_facts(
    p: MemoryParts,
    call: Call,
    kf: KeyFacts,
    adm: Admission,
    body: B,
    *,
    item_count: int = 0,
    max_item_bytes: int = 0,
    ttl_days: int | None = None,
    limit: int | None = None,
    is_prefetch: bool = False,
) -> Admitted[Held[B]]:
    """A memory call's decision facts, from its key check, its admission and what its body asks;
    what forward needs is the admission and the checked body."""
    scope = adm.scope
    lim = p.limits()
    # The scope's hourly count after this call's reservation (against the global value): the policy
    # holds it to the agent's own cap from limits.yaml's agent_limits.
    hourly_used = adm.levels.get(budgets.scope_hour_key(scope.scope_id), 0) if scope is not None else 0
    budget = _budget(adm.refused, hourly_used) if adm.live else Budget()
    saving = call.operation is not Operation.MEMORY_SEARCH
    entries = Entries(count=adm.live_count, cap=lim.max_entries) if adm.live and saving else None
    rf = RequestFacts(
        presented_generation=kf.generation,
        key_valid=kf.key_valid,
        user_id_matches=kf.user_id_matches,
        caller_agent_name=kf.agent_name,
        header_agent_name=kf.header_agent,
        agent_name_matches=scope is not None and kf.agent_matches(scope.agent, p.agents.names),
        item_count=item_count,
        max_item_bytes=max_item_bytes,
        ttl_days=ttl_days,
        limit=limit,
        is_prefetch=is_prefetch,
    )
    facts = Facts(
        agent_ref=scope.agent if scope else None,
        principal=principal_of(scope.principal_mxid, scope.origin) if scope else None,
        agent=agent_of(scope.agent, p.agents.app_name(scope.agent), p.agents.has_memory(scope.agent))
        if scope
        else None,
        scope=scope_of(scope) if scope else None,
        request=rf,
        budget=budget,
        entries=entries,
    )
    release = None
    if adm.op_id is not None:
        admission = p.admission

        async def release() -> None:
            # A refused save gives back its entry slots and its in-flight record at once.
            await admission.release_write(adm)

    scope_id = scope.scope_id if scope else None
    return Admitted(facts, Held(adm, body), scope_id=scope_id, credentialed=kf.key_valid, release=release)
