"""The client's answer shapes mirror the control API's response models, and the check reads them exactly."""

from __future__ import annotations

import typing

import pytest
import typing_extensions
from pydantic import BaseModel

from sidecar.control import answers
from sidecar.control import models as m

SHAPES = {n: v for n, v in vars(answers).items() if typing_extensions.is_typeddict(v) and not n.startswith("_")}
MIRRORS = [(shape, getattr(m, name)) for name, shape in SHAPES.items()]


class TestShapes:
    @pytest.mark.parametrize("shape, model", MIRRORS, ids=lambda v: getattr(v, "__name__", ""))
    def test_fields_match_the_model(self, shape: type, model: type[BaseModel]) -> None:
        """Same keys, and a key is required exactly when the model has no default."""
        hints, required = typing.get_type_hints(shape), shape.__required_keys__
        assert set(hints) == set(model.model_fields)
        assert required == {k for k, f in model.model_fields.items() if f.is_required()}

    def test_every_response_model_has_its_shape(self) -> None:
        outs = {n for n, v in vars(m).items() if isinstance(v, type) and issubclass(v, m._Out) and v is not m._Out}
        assert outs - {"ErrorOut"} <= set(SHAPES)


class TestConforms:
    CREATED: typing.ClassVar = {"scope_id": "s1", "enabled": False, "generation": 0}

    def test_a_well_formed_answer_passes_with_extra_keys(self) -> None:
        assert answers.conforms({**self.CREATED, "added_later": [1]}, answers.ScopeCreated)

    @pytest.mark.parametrize(
        "body",
        [
            None,
            [],
            {"scope_id": "s1", "enabled": False},
            {"scope_id": "s1", "enabled": 0, "generation": 0},
            {"scope_id": "s1", "enabled": False, "generation": True},
            {"scope_id": 1, "enabled": False, "generation": 0},
        ],
    )
    def test_a_missing_key_or_wrong_type_fails(self, body: object) -> None:
        assert not answers.conforms(body, answers.ScopeCreated)

    def test_nested_shapes_literals_and_optional_keys(self) -> None:
        receipt = {
            "receipt_id": "r",
            "action": "grant",
            "purpose": "p",
            "policy_version": "v",
            "generation_after": 1,
            "at": "t",
        }
        change = {"scope_id": "s", "enabled": True, "generation": 1, "receipt": receipt}
        assert answers.conforms(change, answers.ConsentChange)
        assert answers.conforms({**change, "erasure": None}, answers.ConsentChange)
        assert not answers.conforms({**change, "receipt": {**receipt, "action": "revoke"}}, answers.ConsentChange)
        assert not answers.conforms({**change, "erasure": {}}, answers.ConsentChange)
