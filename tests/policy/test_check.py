"""``memgov policy check``'s in-process steps: data checks, permits carrying codes, typed limit keys (Cedar)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sidecar.policy.cedar import compile_pack
from sidecar.policy.check import _agents, _ceilings, property_gaps, schema_actions
from sidecar.policy.pack import PackError, read_pack
from sidecar.policy.properties import load_properties
from sidecar.policy.reads import cedar_misreads, cedar_reads
from sidecar.policy.vet import rego_permits, vet
from tests.support.policy import PACK_DIR

DECISION = "rego/memgov/decision"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _limits(pack: Path, **changes: object) -> None:
    path = pack / "data" / "limits.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data))


class TestCeilings:
    def test_reference_limits_are_the_adrs(self) -> None:
        """The shipped limits.yaml sits at or below every ADR value."""
        assert _ceilings(read_pack(PACK_DIR)).ok

    @pytest.mark.parametrize(
        ("name", "value", "ceiling"),
        [("max_fact_bytes", 5120, 512), ("max_days", 8, 7), ("embedding_items_per_agent_hour", 601, 600)],
    )
    def test_a_global_limit_above_the_adr_fails(self, pack_copy: Path, name: str, value: int, ceiling: int) -> None:
        """A looser global limit (5120 fact bytes) fails the step, naming the limit and the ADR's value."""
        _limits(pack_copy, **{name: value})
        step = _ceilings(read_pack(pack_copy))
        assert not step.ok
        assert f"data/limits.yaml: {name} {value} is above the ADR's {ceiling}" in step.detail

    def test_a_stricter_limit_passes(self, pack_copy: Path) -> None:
        """Below the ADR is fine: the ceiling only bounds from above."""
        _limits(pack_copy, max_fact_bytes=256)
        assert _ceilings(read_pack(pack_copy)).ok


class TestAgentReferences:
    def test_a_name_without_its_namespace_refuses_the_pack(self, pack_copy: Path) -> None:
        """`indexer` limits nobody: the data file is refused, naming the entry and the reference."""
        _limits(pack_copy, agent_limits=[{"agents": ["indexer"], "hourly_operations": 5}])
        with pytest.raises(PackError) as err:
            read_pack(pack_copy)
        assert "agent_limits[0] names 'indexer', which is not an agent reference namespace/name" in str(err.value)

    def test_an_unconfigured_agent_is_a_warning(self, pack_copy: Path) -> None:
        """A well-formed reference no configured agent has passes with a warning naming it."""
        _limits(pack_copy, agent_limits=[{"agents": ["kagent/indexer", "team/helper"], "hourly_operations": 5}])
        step = _agents(read_pack(pack_copy), ["team/helper"])
        assert step.ok and step.status == "warn"
        assert step.detail == "data/limits.yaml: agent_limits names kagent/indexer, which is not a configured agent"

    def test_configured_agents_pass_quietly(self, pack_copy: Path) -> None:
        """Every named agent configured: ok, nothing to say."""
        _limits(pack_copy, agent_limits=[{"agents": ["team/helper"], "hourly_operations": 5}])
        assert _agents(read_pack(pack_copy), ["team/helper"]).status == "ok"

    def test_without_a_configuration_it_says_so(self, pack_copy: Path) -> None:
        """No agents configured: a warning that the references were not compared."""
        _limits(pack_copy, agent_limits=[{"agents": ["team/helper"], "hourly_operations": 5}])
        step = _agents(read_pack(pack_copy), None)
        assert step.status == "warn" and "not compared" in step.detail


class TestPermitCarryingACode:
    def test_a_cedar_permit_with_a_deny_code_is_refused(self, pack_copy: Path) -> None:
        """A permit whose @id is a reason code would count as that code's rule while it only admits."""
        (pack_copy / "cedar" / "extra.cedar").write_text(
            '@id("rate-limited/ops")\n@rationale("r")\npermit (principal, action, resource)\n'
            'when { context.agent.ref == "kagent/ops-bot" };\n'
        )
        with pytest.raises(PackError) as err:
            compile_pack(read_pack(pack_copy))
        assert "cedar/extra.cedar:1: @id 'rate-limited/ops' carries a reason code on a permit" in str(err.value)

    def test_a_forbid_named_allowed_is_refused(self, pack_copy: Path) -> None:
        """@id("allowed") belongs to the permit only."""
        _edit(
            pack_copy / "cedar" / "routes.cedar",
            "permit (principal, action, resource);",
            "forbid (principal, action, resource) when { false };",
        )
        with pytest.raises(PackError) as err:
            compile_pack(read_pack(pack_copy))
        assert '@id("allowed") is a forbid: it must be the permit' in str(err.value)

    def test_a_rego_rule_that_admits_with_a_code_is_flagged(self, pack_copy: Path) -> None:
        """A second allow definition with a reason in its METADATA: both problems are named, the pack refused."""
        (pack_copy / DECISION / "exempt.rego").write_text(
            "package memgov.decision\n\n# METADATA\n# description: Ops bot.\n# custom:\n#   reason: rate_limited\n"
            'allow if input.agent.ref == "kagent/ops-bot"\n'
        )
        problems = rego_permits(read_pack(pack_copy))
        assert problems == [
            f"{DECISION}/exempt.rego:7: allow carries METADATA custom.reason 'rate_limited', but only deny rules"
            " answer reason codes",
            f"{DECISION}/exempt.rego:7: allow is defined by something other than an empty deny set; every exemption"
            " belongs in the deny rules",
        ]
        with pytest.raises(PackError):
            vet(read_pack(pack_copy), compile_rego=False)

    def test_the_reference_pack_has_none(self) -> None:
        """The shipped Rego pack's allow is exactly "nothing denies"."""
        assert rego_permits(read_pack(PACK_DIR)) == []


SCHEMA = "cedar/memgov.cedarschema"
NEW_ACTION = '\naction "session.export"{groups}\n  appliesTo {{ principal: User, resource: Scope, context: Facts }};\n'


def _gaps(pack: Path) -> list[str]:
    return property_gaps(read_pack(pack), load_properties(pack))


class TestProperties:
    def test_the_reference_pack_has_a_property_for_every_code_and_action(self) -> None:
        """Every code is some property's enforced_by and every requestable action some property's."""
        assert _gaps(PACK_DIR) == []

    def test_the_schema_actions_and_their_groups_are_read(self) -> None:
        """Each action with the line that declares it and its groups; a group alone is not requested."""
        actions = schema_actions(read_pack(PACK_DIR))
        assert actions["memory.save"].groups == {"keyed", "saves", "scoped", "memoryWork"}
        assert actions["memory.save"].requested and not actions["keyed"].requested
        assert actions["controller.write"].where.startswith(f"{SCHEMA}:")
        assert actions["controller.write"].groups == frozenset()

    def test_a_new_operation_without_a_property_is_named_with_its_declaration(self, pack_copy: Path) -> None:
        """An action no property covers: the line names it, where the schema declares it, and what to add."""
        schema = pack_copy / SCHEMA
        line = schema.read_text().count("\n") + 2
        with schema.open("a") as f:
            f.write(NEW_ACTION.format(groups=""))
        assert _gaps(pack_copy) == [
            f"properties.yaml: no property covers action session.export ({SCHEMA}:{line}): add a property with"
            " actions: [session.export] (or a group it is in) saying what the pack guarantees for it"
        ]

    def test_a_new_operation_in_a_covered_group_needs_nothing_more(self, pack_copy: Path) -> None:
        """The group properties cover an action that joins their group (memoryWork here)."""
        with (pack_copy / SCHEMA).open("a") as f:
            f.write(NEW_ACTION.format(groups=" in [memoryWork]"))
        assert _gaps(pack_copy) == []

    def test_a_code_no_property_names_is_named_with_its_rules(self, pack_copy: Path) -> None:
        """A code left out of every enforced_by: the line names it and each rule answering it, in both languages."""
        _edit(pack_copy / "properties.yaml", "enforced_by: [operator_required]", "enforced_by: []")
        (gap,) = _gaps(pack_copy)
        assert gap.startswith(
            "properties.yaml: no property is enforced_by operator_required (cedar/definitions.cedar:7 @id"
            f' operator-required, {DECISION}/definitions.rego:10 deny["operator_required"]): add operator_required'
        )

    @pytest.mark.parametrize(
        ("old", "new", "gap"),
        [
            (
                "actions: [controller.write]\n    enforced_by: [operator_required]",
                "actions: [controller.writes]\n    enforced_by: [operator_required]",
                "properties.yaml: governed-definitions-need-an-operator: action 'controller.writes' is not in the"
                " schema",
            ),
            (
                "enforced_by: [operator_required]",
                "enforced_by: [operator_required, operator_missing]",
                "properties.yaml: governed-definitions-need-an-operator: enforced_by 'operator_missing' is not a"
                " reason code",
            ),
        ],
        ids=["action", "code"],
    )
    def test_a_misspelt_name_is_named(self, pack_copy: Path, old: str, new: str, gap: str) -> None:
        """A property naming an action or code that does not exist says which and where."""
        _edit(pack_copy / "properties.yaml", old, new)
        assert gap in _gaps(pack_copy)


class TestTypedKeysCedar:
    @pytest.mark.parametrize(
        ("text", "reads"),
        [
            ("when { context.request.maxItemBytes > context.deployment.limits.maxFactBytes }", {"max_fact_bytes"}),
            ('when { x > context.deployment.limits["embeddingItemBytes"] }', {"embedding_item_bytes"}),
            ("when { context.deployment.limits == y }", {"*"}),
            ("when { context.budget.hourlyUsed > context.agent.hourlyCap }", {"hourly_operations"}),
            ('@rationale("context.deployment.limits.maxDays")\n// context.deployment.limits.maxDays\nforbid', set()),
        ],
        ids=["dotted", "bracket", "whole-record", "agent-cap", "comments-and-annotations"],
    )
    def test_reads(self, text: str, reads: set[str]) -> None:
        """Limit reads are found in code, in both spellings, never in comments or annotations."""
        assert cedar_reads(text) == reads

    def test_the_reference_pack_reads_only_its_own_limits(self) -> None:
        """Every shipped policy reads exactly its code's limits."""
        assert cedar_misreads(read_pack(PACK_DIR)) == []

    def test_the_embedding_size_rule_reading_the_fact_limit_is_named(self, pack_copy: Path) -> None:
        """Latent while both limits are 512: the typed keys name it anyway."""
        _edit(
            pack_copy / "cedar" / "limits.cedar",
            "context.deployment.limits.embeddingItemBytes",
            "context.deployment.limits.maxFactBytes",
        )
        found = [str(m) for m in cedar_misreads(read_pack(pack_copy))]
        assert found == [
            "cedar/limits.cedar:42: @id embedding-item-too-large reads limit max_fact_bytes, but"
            " embedding_item_too_large reads only embedding_item_bytes"
        ]
