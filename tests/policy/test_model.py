"""The decision models: published schemas stay current, and malformed inputs are refused."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from sidecar.policy import schema
from sidecar.policy.model import Decision, Obligations
from sidecar.reasons import Action, Reason
from tests.support.policy import MakeInput


class TestSchemaExport:
    def test_published_schemas_match_the_models(self) -> None:
        """docs/schema/ is what the models generate (run `memgov policy schema` after a model change)."""
        assert schema.stale() == []

    def test_valid_input_validates_against_the_published_schema(self, make_input: MakeInput) -> None:
        """An input the gateway builds is valid under the published JSON Schema."""
        published = json.loads((schema.SCHEMA_DIR / "decision-input.schema.json").read_text())
        jsonschema.validate(make_input("invoke").model_dump(mode="json"), published)

    def test_decision_validates_against_the_published_schema(self) -> None:
        """A decision serializes to the published output schema."""
        published = json.loads((schema.SCHEMA_DIR / "decision.schema.json").read_text())
        decision = Decision(action=Action.DENY, reasons=[Reason.CONSENT_MISSING], obligations=Obligations())
        jsonschema.validate(decision.model_dump(mode="json"), published)


class TestDecisionInput:
    @pytest.mark.parametrize(
        "changes",
        [
            {"operation": "memory.update"},
            {"principal.origin": "email"},
            {"request.item_count": -1},
            {"entries.count": 2**60},
            {"request.surprise": True},
            {"scope.kind": "cross_room"},
        ],
    )
    def test_malformed_inputs_are_refused(self, make_input: MakeInput, changes: dict[str, Any]) -> None:
        """Unknown operations, origins, fields and out-of-range counts never reach an engine."""
        with pytest.raises(ValidationError):
            make_input("save", changes)

    def test_input_is_immutable(self, make_input: MakeInput) -> None:
        """An input cannot be changed after it was validated."""
        inp = make_input("save")
        with pytest.raises(ValidationError):
            inp.now = 0  # type: ignore[misc]  # assigning to a frozen model on purpose

    @pytest.mark.parametrize(("action", "allowed"), [(Action.FORWARD, True), (Action.EMPTY_RESULT, False)])
    def test_allowed_means_forwarded(self, action: Action, allowed: bool) -> None:
        """Only a forward counts as allowed; a degraded answer does not."""
        assert Decision(action=action, reasons=[Reason.ALLOWED]).allowed is allowed
