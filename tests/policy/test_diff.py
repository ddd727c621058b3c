"""``memgov policy diff``: old and new tables both decided, each pack with its own data, one-sided inputs kept
apart, changes grouped by direction, and every change to properties.yaml and the data listed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.policy.test_cli import _edit, run_diff
from tests.policy.test_prove import PLANTED
from tests.support.policy import CASES_DIR, PACK_DIR


def _tables(tmp_path: Path) -> Path:
    dest = tmp_path / "tables"
    shutil.copytree(CASES_DIR, dest)
    return dest


class TestDiff:
    def test_a_loosening_whose_rows_were_deleted_shows_in_the_old_rows(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, tmp_path: Path
    ) -> None:
        """The audience check and its remote-server rows removed together: the old tables' rows now forward."""
        for rel, old, new in PLANTED[2][1]:
            _edit(pack_copy / rel, old, new)
        tables = _tables(tmp_path)
        doc = yaml.safe_load((tables / "identity.yaml").read_text())
        doc["cases"] = [c for c in doc["cases"] if "audience" not in c["name"] or "accepted" in c["name"]]
        (tables / "identity.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        code, out = run_diff(capsys, pack_copy, "--old-cases", str(CASES_DIR), "--exit-code", cases=tables)
        assert code == 1, out
        loosened = out[out.index("LOOSENED (refused before, forwarded now):") :]
        assert (
            "  [cedar+opa] case identity::remote homeserver in the audience is refused\n"
            "      rewrite_disabled ['audience_mismatch']  ->  forward ['allowed']"
        ) in loosened

    def test_an_org_list_no_rule_reads_changes_no_decision(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """A new, unused org list changes no decision and loosens nothing; the contract still counts it."""
        (pack_copy / "data/org.yaml").write_text("unused_agents: [kagent/a-bot, kagent/b-bot]\n")
        _edit(pack_copy / "cedar/memgov.cedarschema", "type Org = {};", "type Org = { unused_agents: Set<String> };")
        code, out = run_diff(capsys, pack_copy, "--exit-code", "--loosening-only")
        assert code == 0, out
        assert out.startswith("contract: 1 change(s) to properties.yaml and the data files\n")
        assert "0 change(s): 0 loosened, 0 tightened, 0 with other reasons" in out
        assert "exist for one pack only" not in out

    def test_a_weakened_property_is_flagged(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """No decision changes, yet properties.yaml loses a condition: diff says so, and --exit-code fails."""
        _edit(pack_copy / "properties.yaml", " &&\n       !context.room.serverAcl.allowIpLiterals", "")
        code, out = run_diff(capsys, pack_copy, "--exit-code", "--loosening-only")
        assert code == 1, out
        assert "LOOSER   properties.yaml: room-state-valid: allows_only_if -" in out
        assert "!context.room.serverAcl.allowIpLiterals" in out
        assert "0 change(s)" in out

    def test_a_looser_limit_loosens_the_rows_under_each_packs_data(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """Each pack decides its rows with its own data: a larger fact limit forwards the 513-byte rows, as JSON
        for tools and as a pull-request comment of the loosenings alone."""
        _edit(pack_copy / "data" / "limits.yaml", "max_fact_bytes: 512", "max_fact_bytes: 600")
        code, out = run_diff(capsys, pack_copy, "--format", "json")
        assert code == 0, out
        data = json.loads(out)
        assert data["loosened"] is True
        assert {
            "area": "data/limits.yaml",
            "item": "max_fact_bytes",
            "direction": "looser",
            "detail": "512 -> 600",
        } in (data["contract"])
        loosened = [c for c in data["changes"] if c["direction"] == "loosened"]
        assert any(c["input"] == "case limits::fact of 513 ASCII bytes is refused" for c in loosened)
        assert data["summary"]["memory.save"]["loosened"] >= 1
        code, out = run_diff(capsys, pack_copy, "--format", "markdown", "--loosening-only", "--exit-code")
        assert code == 1, out
        assert out.startswith(f"### memgov policy diff `{PACK_DIR}` → `{pack_copy}`: **loosens** the pack\n")
        assert "| ⚠ looser | data/limits.yaml | `max_fact_bytes` | 512 -> 600 |" in out
        assert (
            "- `case limits::fact of 513 ASCII bytes is refused` (cedar+opa): `deny ['fact_too_large']` →"
            " `forward ['allowed']`"
        ) in out
        assert "<details>" not in out  # --loosening-only: nothing but what admits more

    def test_each_row_is_also_decided_with_each_unknown_object(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """A Rego rule written with `not x == ""` admits a null principal; the rows' null variants show it."""
        _edit(
            pack_copy / "rego/memgov/decision/federation.rego",
            '\thas_principal\n\tinput.principal.localpart != ""\n\tinput.principal.server_name != ""\n',
            '\tnot input.principal.localpart == ""\n\tnot input.principal.server_name == ""\n',
        )
        code, out = run_diff(capsys, pack_copy)
        assert code == 0, out
        assert "  [opa] case identity::" in out and " ~ principal=null\n" in out
        assert "[cedar" not in out

    def test_a_rule_needing_two_conditions_shows_on_a_pair_of_rows(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """Encrypted *and* public rooms exempted: no row or one-field mutant reaches it, the pair of their rows does."""
        _edit(
            pack_copy / "cedar/room.cedar",
            "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n"
            'unless { action == Action::"a2a.invoke" && !context.agent.memoryEnabled };',
            "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n"
            'unless {\n  (action == Action::"a2a.invoke" && !context.agent.memoryEnabled) ||\n'
            '  (context has room && context.room.encrypted && context.room.joinRule == "public")\n};',
        )
        _edit(
            pack_copy / "rego/memgov/decision/room.rego",
            "\tattested\n\tnot room_ok\n}\n",
            "\tattested\n\tnot room_ok\n\tnot exempt_room\n}\n\nexempt_room if {\n"
            '\tinput.room.encrypted == true\n\tinput.room.join_rule == "public"\n}\n',
        )
        code, out = run_diff(capsys, pack_copy, "--exit-code")
        assert code == 1, out
        pair = (
            "  [cedar+opa] pair room::encrypted room is refused + room::public join rule is refused\n"
            "      rewrite_disabled ['room_state_invalid']  ->  forward ['allowed']"
        )
        assert out.count(pair) == 1  # once, for both engines
        assert "] case room::encrypted room is refused\n" not in out
        assert "] case room::public join rule is refused\n" not in out
