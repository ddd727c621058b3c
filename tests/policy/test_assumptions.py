"""What the symbolic checks assume about requests, and a pack's data inlined into its policies."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cedarpy
import pytest
import yaml

from sidecar.policy.assumptions import EMPTY_SET, any_data, inline_data, pack_data, schema_with_empty_set
from sidecar.policy.cases import build_input, load_bases
from sidecar.policy.cedar_input import entities, request
from sidecar.policy.pack import PackError, read_pack
from sidecar.policy.prove import assume_forbid
from tests.support.policy import CASES_DIR, PACK_DIR


def _schema(pack_dir: Path) -> cedarpy.Schema:
    return cedarpy.Schema.from_str(schema_with_empty_set((pack_dir / "cedar" / "memgov.cedarschema").read_text()))


def _validates(text: str, pack_dir: Path = PACK_DIR) -> list[str]:
    return [str(e.error) for e in cedarpy.validate_policies(text, _schema(pack_dir)).errors]


class TestAssumptions:
    @pytest.mark.parametrize("which", ["pack", "any"])
    def test_type_check_against_the_schema(self, which: str) -> None:
        """Both sets of assumptions are Cedar the validator accepts, as the helper needs."""
        condition = pack_data(read_pack(PACK_DIR)) if which == "pack" else any_data()
        assert _validates(assume_forbid(condition)) == []

    def test_any_data_leaves_the_data_free(self) -> None:
        """Under any data no limit is pinned; the caps are bounded by the global ones."""
        condition = any_data()
        assert "context.deployment.limits ==" not in condition
        assert "context.agent.hourlyCap <= context.deployment.limits.hourlyOperations" in condition

    def test_the_schema_gets_a_pinned_empty_set(self) -> None:
        """Cedar has no empty set literal: a Deployment attribute stands in for one."""
        text = schema_with_empty_set("entity Deployment = {\n  serverName: String,\n};")
        assert "memgovProveEmpty: Set<String>," in text
        with pytest.raises(PackError):
            schema_with_empty_set("entity User = {};")


def _write(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(req: dict[str, Any]) -> None:
        write = {"kind": "agents", "verb": "create", "targets": [], "governed": False, "operator": False, "claims": []}
        req["context"]["write"] = {**req["context"].get("write", write), **changes}

    return edit


def _meets_bounds(base: str, edit: Callable[[dict[str, Any]], None] | None = None) -> bool:
    """Whether a base input's Cedar request, edited, meets the bounds of any valid data."""
    pack = read_pack(PACK_DIR)
    inp = build_input(load_bases(CASES_DIR, pack), base)
    req: dict[str, Any] = json.loads(json.dumps(request(inp)))
    found: list[dict[str, Any]] = json.loads(json.dumps(entities(inp)))
    for entity in found:
        if entity["uid"]["type"] == "Deployment":
            entity["attrs"]["memgovProveEmpty"] = []
    if edit is not None:
        edit(req)
    policies = cedarpy.PolicySet.from_str(f"permit (principal, action, resource) when {{ {any_data()} }};")
    result = cedarpy.is_authorized(req, policies, cedarpy.Entities.from_json_str(json.dumps(found), _schema(PACK_DIR)))
    assert not result.diagnostics.errors
    return bool(result.allowed)


class TestBounds:
    @pytest.mark.parametrize(
        ("base", "edit", "meets"),
        [
            ("controller_write", None, True),
            ("controller_write", _write(kind="modelconfigs", verb="delete", claims=["host_path"]), True),
            ("controller_write", _write(verb="D"), False),
            ("controller_write", _write(kind="secrets"), False),
            ("controller_write", _write(claims=["label", "A"]), False),
            ("save", None, True),
            ("save", _write(), False),
        ],
        ids=["base", "other-kinds", "verb", "kind", "claim", "save", "write-on-save"],
    )
    def test_a_definition_write_stays_within_its_kinds(
        self, base: str, edit: Callable[[dict[str, Any]], None] | None, meets: bool
    ) -> None:
        """A write's kind, verb and claims are the model's, on controller.write alone: the solver cannot pick others."""
        assert _meets_bounds(base, edit) is meets


class TestInlineData:
    def test_limits_caps_partners_and_org_become_constants(self, pack_copy: Path) -> None:
        """Every data read is the pack's value; comments and strings stay as they were."""
        path = pack_copy / "data" / "limits.yaml"
        data = yaml.safe_load(path.read_text())
        data["agent_limits"] = [{"agents": ["kagent/indexer"], "hourly_operations": 20}]
        path.write_text(yaml.safe_dump(data))
        pack = read_pack(pack_copy)
        text = (
            '@rationale("context.deployment.limits.maxFactBytes")\n'
            "forbid (principal, action, resource)\n"
            "// context.deployment.limits.maxEntries\n"
            "when { context.request.maxItemBytes > context.deployment.limits.maxFactBytes ||\n"
            '  context.request.itemCount > context.deployment.limits["maxBatchFacts"] ||\n'
            "  context.budget.hourlyUsed > context.agent.hourlyCap ||\n"
            "  !principal.partnerOrigins.contains(principal.origin) ||\n"
            "  context.audience.classification != context.deployment.classification };\n"
        )
        out = inline_data(pack, text)
        assert '@rationale("context.deployment.limits.maxFactBytes")' in out
        assert "// context.deployment.limits.maxEntries" in out
        assert "context.request.maxItemBytes > (512)" in out
        # The quoted spelling reads a constant record: ({..., maxBatchFacts: 10, ...})["maxBatchFacts"].
        assert 'context.deployment.limits["maxBatchFacts"]' not in out and "maxBatchFacts: 10" in out
        assert '(if context.agent.known && context.agent.ref == "kagent/indexer" then 20 else 60)' in out
        assert f"!({EMPTY_SET}).contains(principal.origin)" in out
        assert 'context.audience.classification != ("private")' in out

    def test_the_inlined_reference_pack_still_validates(self) -> None:
        """The rewritten policies type-check, so the solver can compare them."""
        pack = read_pack(PACK_DIR)
        text = "\n".join(t for _, t in sorted(pack.select("cedar", ".cedar").items()))
        assert _validates(inline_data(pack, text)) == []
