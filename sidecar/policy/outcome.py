"""From an engine verdict to a :class:`Decision`: the per-operation action and the obligations.

Engines only answer allow or deny plus reason codes. What a denial *does* is fixed here, in
code, per operation (SPEC D6), so two engines can never disagree about it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from sidecar.policy.model import Decision, DecisionInput, Limits, Obligations, Operation
from sidecar.reasons import REASON_VALUES, Action, Code, Reason, code

#: Memory calls that carry a session key as user_id.
KEYED: Final = frozenset(
    {
        Operation.MEMORY_SAVE,
        Operation.MEMORY_SAVE_BATCH,
        Operation.MEMORY_SEARCH,
        Operation.MEMORY_LIST,
        Operation.MEMORY_DELETE_ALL,
    }
)
SAVES: Final = frozenset({Operation.MEMORY_SAVE, Operation.MEMORY_SAVE_BATCH})
SEARCHES: Final = frozenset({Operation.MEMORY_SEARCH, Operation.MEMORY_LIST})

_DENY_ACTION: Final = {Operation.A2A_INVOKE: Action.REWRITE_DISABLED, Operation.MEMORY_SEARCH: Action.EMPTY_RESULT}


@dataclass(frozen=True)
class Verdict:
    """An engine's answer before the action mapping: allowed or not, and the reason codes."""

    allowed: bool
    reasons: frozenset[str]


def deny_action(operation: Operation) -> Action:
    """Return what a denial does for an operation: degrade invokes and searches, refuse the rest."""
    return _DENY_ACTION.get(operation, Action.DENY)


def governed_invoke(inp: DecisionInput) -> bool:
    """True when an invoke targets a memory-enabled agent; other invokes carry no memory."""
    return inp.operation is Operation.A2A_INVOKE and inp.agent is not None and inp.agent.memory_enabled


def attested(inp: DecisionInput) -> bool:
    """True for operations that need an attested room, audience and delegation context."""
    return inp.operation is Operation.CONTROL_INSPECT or governed_invoke(inp)


def scoped(inp: DecisionInput) -> bool:
    """True for operations that need an enabled consent scope."""
    return attested(inp) or inp.operation in KEYED


def memory_work(inp: DecisionInput) -> bool:
    """True for operations charged against budgets."""
    return scoped(inp) or inp.operation is Operation.EMBEDDING


def obligations(inp: DecisionInput, limits: Limits) -> Obligations:
    """Ceilings for a forwarded request: the save ttl and the search limit."""
    if inp.operation in SAVES:
        asked = inp.request.ttl_days
        ttl = limits.max_days if asked is None or asked <= 0 else min(asked, limits.max_days)
        return Obligations(ttl_days=ttl)
    if inp.operation in SEARCHES:
        return Obligations(max_limit=limits.search_max_limit)
    return Obligations()


def _codes(reasons: Iterable[str]) -> list[Code]:
    # SECURITY: a code neither built in nor declared (a typo in a pack) must not reach a client.
    known = {code(r) for r in reasons if r in REASON_VALUES and r != Reason.ALLOWED}
    if len(known) != len(set(reasons) - {Reason.ALLOWED.value}):
        known.add(Reason.POLICY_UNAVAILABLE)
    return sorted(known)


def assemble(inp: DecisionInput, verdict: Verdict, limits: Limits) -> Decision:
    """Turn a verdict into a decision; a denial without a reason reads as route_denied."""
    if verdict.allowed:
        return Decision(action=Action.FORWARD, reasons=[Reason.ALLOWED], obligations=obligations(inp, limits))
    reasons: list[Code] = _codes(verdict.reasons) or [Reason.ROUTE_DENIED]
    return Decision(action=deny_action(inp.operation), reasons=reasons)


def unavailable(inp: DecisionInput) -> Decision:
    """The fail-closed decision when an engine cannot answer."""
    return Decision(action=deny_action(inp.operation), reasons=[Reason.POLICY_UNAVAILABLE])
