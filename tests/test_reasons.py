"""Reason codes: pack-declared codes are accepted, ranked and bounded; built-in ones cannot be redefined."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from sidecar import reasons
from sidecar.logs import ALLOWED
from sidecar.policy.model import Action, Decision
from sidecar.reasons import DeclaredCode, Reason, Refusal, code, declare, error_body, primary


class TestDeclaredCodes:
    def test_declared_code_works_like_a_reason_ranked_after_its_anchor(self) -> None:
        """A declared code works like a built-in one and is reported right after the code it names."""
        declare([("test_org_rule", "agent_mismatch")])
        declared = code("test_org_rule")
        assert isinstance(declared, DeclaredCode) and declared is code("test_org_rule")
        assert declared.value == "test_org_rule"
        assert primary([Reason.CONSENT_MISSING, declared]) is declared
        assert primary([Reason.AGENT_MISMATCH, declared]) is Reason.AGENT_MISMATCH
        assert error_body(declared, "d_1") == b'{"error":"test_org_rule","decision_id":"d_1"}'
        assert Refusal(declared).reason is declared and Refusal(declared).status == 403
        assert ALLOWED["reasons"](["test_org_rule", "consent_missing"]) and ALLOWED["reason"]("test_org_rule")
        decision = Decision.model_validate({"action": "deny", "reasons": ["test_org_rule", "consent_missing"]})
        assert decision.reasons == [declared, Reason.CONSENT_MISSING] and decision.action is Action.DENY
        assert decision.model_dump(mode="json")["reasons"] == ["test_org_rule", "consent_missing"]

    def test_the_reason_enum_never_changes(self) -> None:
        """Declaring codes adds nothing to Reason: its members are the built-in codes only."""
        declare([("test_org_rule", "agent_mismatch")])
        assert {r.value for r in Reason} == reasons.BUILT_IN
        with pytest.raises(ValueError):
            Reason("test_org_rule")

    @pytest.mark.parametrize(
        ("code", "after"),
        [("consent_missing", "allowed"), ("Bad-Code", "allowed"), ("x", "allowed"), ("fine_code", "no_such_code")],
        ids=["built-in", "not-snake-case", "too-short", "unknown-anchor"],
    )
    def test_bad_declarations_are_refused(self, code: str, after: str) -> None:
        """Built-in codes stay fixed, codes have one shape, and the anchor must exist."""
        with pytest.raises(ValueError):
            declare([(code, after)])

    def test_undeclared_text_is_never_a_reason(self) -> None:
        """Anything not built in or declared stays an error, so it cannot reach a body or a log."""
        with pytest.raises(ValueError):
            code("free text from a request")
        with pytest.raises(ValueError):
            Decision.model_validate({"action": "deny", "reasons": ["free text from a request"]})
        assert not ALLOWED["reason"]("free text from a request")

    def test_a_process_accepts_a_bounded_number_of_codes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Metric labels and log values stay bounded however many packs are loaded."""
        monkeypatch.setattr(reasons, "MAX_DECLARED", len(reasons._DECLARED))
        with pytest.raises(ValueError, match="more than"):
            declare([("one_code_too_many", "allowed")])


class TestDecisionIds:
    def test_ids_have_their_shape_and_never_repeat_across_pool_refills(self) -> None:
        """Each id takes its own 8 random bytes; 3,000 ids span several 4 KiB refills."""
        ids = [reasons.new_decision_id() for _ in range(3000)]
        assert all(re.fullmatch(r"d_[0-9a-f]{16}", i) for i in ids)
        assert len(set(ids)) == len(ids)

    def test_ids_from_concurrent_threads_never_collide(self) -> None:
        with ThreadPoolExecutor(4) as pool:
            batches = list(pool.map(lambda _: [reasons.new_decision_id() for _ in range(2000)], range(4)))
        ids = [i for batch in batches for i in batch]
        assert len(set(ids)) == len(ids)

    def test_a_forked_worker_does_not_repeat_its_parents_next_ids(self) -> None:
        """A worker forked mid-pool draws fresh bytes; without the fork hook both would hand out the same ids."""
        reasons.new_decision_id()  # the pool now holds unused bytes the child would otherwise inherit
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe and exits
            os.write(write, ",".join(reasons.new_decision_id() for _ in range(50)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as fh:
            child = set(fh.read().split(","))
        os.waitpid(pid, 0)
        parent = {reasons.new_decision_id() for _ in range(50)}
        assert len(child) == 50 and not child & parent
