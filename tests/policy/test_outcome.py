"""From engine verdicts to decisions: fixed deny actions, obligations, unknown codes."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.policy.model import Operation
from sidecar.policy.outcome import Verdict, assemble, deny_action
from sidecar.reasons import Action, Reason
from tests.support.policy import MakeInput


class TestDenyAction:
    @pytest.mark.parametrize(
        ("operation", "action"),
        [
            (Operation.A2A_INVOKE, Action.REWRITE_DISABLED),
            (Operation.MEMORY_SEARCH, Action.EMPTY_RESULT),
            (Operation.MEMORY_SAVE, Action.DENY),
            (Operation.MEMORY_SAVE_BATCH, Action.DENY),
            (Operation.MEMORY_LIST, Action.DENY),
            (Operation.MEMORY_DELETE_ALL, Action.DENY),
            (Operation.MEMORY_UNGOVERNED, Action.DENY),
            (Operation.EMBEDDING, Action.DENY),
            (Operation.CONTROL_INSPECT, Action.DENY),
        ],
    )
    def test_denial_degrades_invokes_and_searches_only(self, operation: Operation, action: Action) -> None:
        """Chat keeps working without memory and searches come back empty; everything else is refused."""
        assert deny_action(operation) is action


class TestAssemble:
    @pytest.mark.parametrize(
        ("base", "changes", "ttl", "limit"),
        [
            ("save", {"request.ttl_days": 15}, 7, None),
            ("save", {"request.ttl_days": 3}, 3, None),
            ("save", {"request.ttl_days": 0}, 7, None),
            ("save", {"request.ttl_days": None}, 7, None),
            ("save_batch", {"request.ttl_days": -1}, 7, None),
            ("search", {"request.limit": 500}, None, 10),
            ("list", {}, None, 10),
            ("invoke", {}, None, None),
        ],
    )
    def test_forward_carries_obligations(
        self, make_input: MakeInput, base: str, changes: dict[str, Any], ttl: int | None, limit: int | None
    ) -> None:
        """Saves get a ttl of at most max_days (kagent's 15-day default included); searches a limit cap."""
        decision = assemble(make_input(base, changes), Verdict(True, frozenset()), make_input(base).deployment.limits)
        assert (decision.action, decision.reasons) == (Action.FORWARD, [Reason.ALLOWED])
        assert (decision.obligations.ttl_days, decision.obligations.max_limit) == (ttl, limit)

    def test_denial_without_a_reason_reads_route_denied(self, make_input: MakeInput) -> None:
        """A pack that simply grants nothing still names a reason."""
        inp = make_input("save")
        decision = assemble(inp, Verdict(False, frozenset()), inp.deployment.limits)
        assert (decision.action, decision.reasons) == (Action.DENY, [Reason.ROUTE_DENIED])

    def test_unknown_reason_code_becomes_policy_unavailable(self, make_input: MakeInput) -> None:
        """A typo in a pack's reason code never reaches a client; the known codes are kept."""
        inp = make_input("search")
        decision = assemble(inp, Verdict(False, frozenset({"consent_missing", "made_up_code"})), inp.deployment.limits)
        assert decision.action is Action.EMPTY_RESULT
        assert decision.reasons == [Reason.CONSENT_MISSING, Reason.POLICY_UNAVAILABLE]
