"""The pack's contract between two versions: every change to properties.yaml and to the data, with its direction."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sidecar.policy.contract import CHANGED, LOOSER, STRICTER, data_changes, properties_changes
from sidecar.policy.pack import read_pack
from sidecar.policy.properties import load_properties
from tests.support.policy import PACK_DIR


def _yaml_edit(path: Path, change: dict[str, object]) -> None:
    data = yaml.safe_load(path.read_text())
    data.update(change)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


class TestPropertiesChanges:
    def test_same_file_no_change(self) -> None:
        """The reference file against itself changes nothing."""
        props = load_properties(PACK_DIR)
        assert properties_changes(props, props) == []

    def test_removed_weakened_added_and_assumptions(self, pack_copy: Path) -> None:
        """A dropped or rewritten property or assumption is looser; an added one stricter; a rewording changed."""
        path = pack_copy / "properties.yaml"
        data = yaml.safe_load(path.read_text())
        names = [p["name"] for p in data["properties"]]
        data["properties"] = [p for p in data["properties"] if p["name"] != "context-single-use"]
        fresh = next(p for p in data["properties"] if p["name"] == "context-fresh")
        fresh["allows_only_if"] = fresh["allows_only_if"].replace("context.now < ", "context.now <= ")
        valid = next(p for p in data["properties"] if p["name"] == "context-valid")
        valid["description"] = "Reworded."
        data["properties"].append({**fresh, "name": "context-fresh-too", "enforced_by": []})
        data["assume"] = data["assume"] + " && true"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        found = {c.item: c for c in properties_changes(load_properties(PACK_DIR), load_properties(pack_copy))}
        assert "context-single-use" in names
        assert found["context-single-use"].direction == LOOSER
        assert "removed" in found["context-single-use"].detail
        assert found["context-fresh"].direction == LOOSER
        assert "context.now <= context.delegation.expiresAt" in found["context-fresh"].detail
        assert found["context-valid"].direction == CHANGED
        assert found["context-fresh-too"].direction == STRICTER
        assert found["assume"].direction == LOOSER


class TestDataChanges:
    @pytest.mark.parametrize(
        ("change", "item", "direction", "detail"),
        [
            ({"max_fact_bytes": 5120}, "max_fact_bytes", LOOSER, "512 -> 5120"),
            ({"max_entries": 50}, "max_entries", STRICTER, "100 -> 50"),
            (
                {"agent_limits": [{"agents": ["kagent/indexer"], "hourly_operations": 20}]},
                "agent_limits kagent/indexer hourly_operations",
                STRICTER,
                "global -> 20",
            ),
        ],
        ids=["limit-up", "limit-down", "agent-cap-added"],
    )
    def test_limits(self, pack_copy: Path, change: dict[str, object], item: str, direction: str, detail: str) -> None:
        """Each limit and each agent's cap is compared, a larger number being looser."""
        _yaml_edit(pack_copy / "data" / "limits.yaml", change)
        found = {c.item: c for c in data_changes(read_pack(PACK_DIR), read_pack(pack_copy))}
        assert (found[item].direction, found[item].detail) == (direction, detail)

    def test_an_agent_cap_dropped_is_looser(self, pack_copy: Path) -> None:
        """Removing an agent's entry gives it the global value back: looser."""
        _yaml_edit(
            pack_copy / "data" / "limits.yaml", {"agent_limits": [{"agents": ["kagent/x"], "hourly_operations": 5}]}
        )
        (changed,) = data_changes(read_pack(pack_copy), read_pack(PACK_DIR))
        assert (changed.direction, changed.detail) == (LOOSER, "5 -> global")

    def test_partners_classification_and_org(self, pack_copy: Path) -> None:
        """A partner record added is looser (and says whether it is complete); classification and org lists changed."""
        partner = {"server_name": "partner.example", "origins": ["remote"], "controller": "C"}
        _yaml_edit(pack_copy / "data" / "federation.yaml", {"classification": "team", "partners": [partner]})
        (pack_copy / "data" / "org.yaml").write_text("bulk_agents: [kagent/a]\n")
        found = {c.item: c for c in data_changes(read_pack(PACK_DIR), read_pack(pack_copy))}
        assert found["partner partner.example"].direction == LOOSER
        assert "incomplete (admits nothing)" in found["partner partner.example"].detail
        assert found["classification"].detail == "private -> team"
        assert found["bulk_agents"].detail == "added ['kagent/a'], removed []"
