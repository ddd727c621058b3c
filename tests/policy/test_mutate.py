"""Mutated inputs of the differential run: near-miss strings on every side, and changed deployment data."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.policy.cases import load_bases
from sidecar.policy.mutate import data_mutants, perturb
from sidecar.policy.pack import read_pack
from tests.support.policy import CASES_DIR, PACK_DIR


@pytest.fixture(scope="module")
def bases() -> dict[str, dict[str, Any]]:
    """The reference tables' base inputs with the reference pack's data."""
    return load_bases(CASES_DIR, read_pack(PACK_DIR))


class TestPerturb:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("example.org", "evilexample.org"),
            ("example.org", "a.example.org"),
            ("example.org", "example.org.evil.net"),
            ("example.org", "example.orgx"),
            ("example.org", "example.or"),
            ("team/my-helper", "team/my_helper"),
            ("team/helper", "TEAM/HELPER"),
        ],
        ids=["prefix", "label-in-front", "suffix-domain", "one-more", "one-fewer", "swap", "upper"],
    )
    def test_near_misses_on_every_side(self, text: str, expected: str) -> None:
        """A suffix, prefix or substring match admits one of these where an exact comparison does not."""
        assert expected in perturb(text)

    def test_never_the_string_itself(self) -> None:
        """The original is never among its perturbations, and none repeats."""
        found = perturb("a_b")
        assert "a_b" not in found
        assert len(found) == len(set(found))


class TestDataMutants:
    def test_each_limit_at_its_smallest(self, bases: dict[str, dict[str, Any]]) -> None:
        """Every integer limit gets a variant at its minimum; the rest of the input is unchanged."""
        found = {m.shown: m for m in data_mutants("embedding", bases["embedding"])}
        assert found["deployment.limits.max_fact_bytes=1"].inp.deployment.limits.max_fact_bytes == 1
        assert found["deployment.limits.prefetch_searches=0"].inp.deployment.limits.prefetch_searches == 0
        one = found["deployment.limits.embedding_item_bytes=1"].inp
        assert one.deployment.limits.max_fact_bytes == 512
        assert one.request.max_item_bytes == bases["embedding"]["request"]["max_item_bytes"]

    def test_a_cap_of_one_for_the_inputs_agent(self, bases: dict[str, dict[str, Any]]) -> None:
        """The input's agent gets an agent_limits entry of 1 for each limit an entry may set."""
        found = {m.shown: m for m in data_mutants("save", bases["save"])}
        entry = found["agent_limits+{team/helper: hourly_operations 1}"].inp.deployment.limits.agent_limits[0]
        assert (entry.agents, entry.hourly_operations) == (["team/helper"], 1)
        assert "agent_limits+{team/helper: embedding_items_per_agent_hour 1}" in found

    def test_partner_records_for_the_principals_server(self, bases: dict[str, dict[str, Any]]) -> None:
        """A complete record admitting the principal's origin, and one admitting another origin."""
        remote = {**bases["invoke"], "principal": {**bases["invoke"]["principal"], "origin": "remote"}}
        found = {m.shown: m for m in data_mutants("row", remote)}
        admits = found["partner+{example.org: remote}"].inp.deployment.federation_partners[0]
        assert [o.value for o in admits.origins] == ["remote"] and admits.controller
        assert "partner+{example.org: appservice}" in found
        assert found["deployment.classification=public"].inp.deployment.classification == "public"

    def test_a_variant_the_model_refuses_is_dropped(self, bases: dict[str, dict[str, Any]]) -> None:
        """A global limit below an existing agent entry is not a valid deployment: no variant for it."""
        doc = bases["save"]
        limits = {**doc["deployment"]["limits"], "agent_limits": [{"agents": ["team/x"], "hourly_operations": 5}]}
        capped = {**doc, "deployment": {**doc["deployment"], "limits": limits}}
        shown = [m.shown for m in data_mutants("save", capped)]
        assert "deployment.limits.hourly_operations=1" not in shown
        assert "deployment.limits.max_fact_bytes=1" in shown
