"""Reason codes: pack-declared codes are accepted, ranked and bounded; built-in ones cannot be redefined."""

from __future__ import annotations

import pytest

from sidecar import reasons
from sidecar.logs import ALLOWED
from sidecar.reasons import Reason, declare, error_body, primary


class TestDeclaredCodes:
    def test_declared_code_is_a_reason_ranked_after_its_anchor(self) -> None:
        """A declared code works like a built-in one and is reported right after the code it names."""
        declare([("test_org_rule", "agent_mismatch")])
        code = Reason("test_org_rule")
        assert code is Reason("test_org_rule") and code.value == "test_org_rule"
        assert primary([Reason.CONSENT_MISSING, code]) is code
        assert primary([Reason.AGENT_MISMATCH, code]) is Reason.AGENT_MISMATCH
        assert error_body(code, "d_1") == b'{"error":"test_org_rule","decision_id":"d_1"}'
        assert ALLOWED["reasons"](["test_org_rule", "consent_missing"]) and ALLOWED["reason"]("test_org_rule")

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
            Reason("free text from a request")
        assert not ALLOWED["reason"]("free text from a request")

    def test_a_process_accepts_a_bounded_number_of_codes(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Metric labels and log values stay bounded however many packs are loaded."""
        monkeypatch.setattr(reasons, "MAX_DECLARED", len(reasons._DECLARED))
        with pytest.raises(ValueError, match="more than"):
            declare([("one_code_too_many", "allowed")])
