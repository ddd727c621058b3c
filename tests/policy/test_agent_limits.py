"""Per-agent limits as pack data (limits.yaml agent_limits): only stricter, decided alike by both engines, proved."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from sidecar.policy.floor import floor_reasons
from sidecar.policy.model import Limits
from sidecar.policy.pack import read_pack
from sidecar.reasons import Reason
from tests.policy.test_cli import _edit, run_cli
from tests.support.policy import CASES_DIR, PACK_DIR, MakeInput

_EMPTY = "agent_limits: []\n"


def _limit(pack: Path, entries: str) -> None:
    _edit(pack / "data" / "limits.yaml", _EMPTY, f"agent_limits:\n{entries}")


def _bulk_list(pack: Path) -> None:
    """An org list of two agents, declared for Cedar as every org list is, capped at 50 items an hour."""
    (pack / "data" / "org.yaml").write_text("bulk_agents: [team/indexer, team/bulk]\n")
    _edit(pack / "cedar" / "memgov.cedarschema", "type Org = {};", "type Org = {\n  bulk_agents: Set<String>,\n};")
    _limit(pack, "  - {lists: [bulk_agents], embedding_items_per_agent_hour: 50}\n")


#: Case rows through an org list, on top of the reference tables.
_BULK = "agent: {ref: team/bulk, app_name: team__NS__bulk, memory_enabled: true}"
_LIST_CASES = f"""
cases:
  - name: a listed agent at its list's cap of 50 is forwarded
    rule: hourly_budget_exhausted
    kind: allow
    base: embedding
    set: {{{_BULK}, budget.embedding_items_used: 50}}
    expect: {{action: forward}}
  - name: a listed agent over its list's cap of 50 is refused
    rule: hourly_budget_exhausted
    kind: deny
    base: embedding
    set: {{{_BULK}, budget.embedding_items_used: 51}}
    expect: {{action: deny, reasons: [hourly_budget_exhausted]}}
  - name: an agent outside the list keeps the global 600
    rule: hourly_budget_exhausted
    kind: allow
    base: embedding
    set: {{budget.embedding_items_used: 600}}
    expect: {{action: forward}}
  - name: a stricter direct entry beats the list
    rule: hourly_budget_exhausted
    kind: deny
    base: embedding
    set:
      {_BULK}
      deployment.limits.agent_limits:
        - {{lists: [bulk_agents], embedding_items_per_agent_hour: 50}}
        - {{agents: [team/bulk], embedding_items_per_agent_hour: 20}}
      budget.embedding_items_used: 21
    expect: {{action: deny, reasons: [hourly_budget_exhausted]}}
"""


#: (agent_limits entry, what check says about it)
REFUSED = [
    (
        "{agents: [team/helper], embedding_items_per_agent_hour: 601}",
        "data/limits.yaml: agent_limits[0].embedding_items_per_agent_hour 601 is looser than the global"
        " embedding_items_per_agent_hour 600; an agent limit can only be stricter",
    ),
    (
        "{agents: [team/helper], hourly_operations: 61}",
        "agent_limits[0].hourly_operations 61 is looser than the global hourly_operations 60",
    ),
    (
        "{lists: [bulk_agent], embedding_items_per_agent_hour: 50}",
        "agent_limits[0] names the list 'bulk_agent', which data/org.yaml does not define",
    ),
    ("{agents: [team/helper]}", "agent_limits[0] sets no limit"),
    ("{embedding_items_per_agent_hour: 50}", "agent_limits[0] names no agent and no list"),
]


class TestOnlyStricter:
    @pytest.mark.parametrize(("entry", "message"), REFUSED, ids=[e for e, _ in REFUSED])
    def test_check_refuses_with_a_clear_message(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, entry: str, message: str
    ) -> None:
        """A looser value (or a misspelt list, an entry limiting nothing or nobody) fails check, named in one line."""
        _limit(pack_copy, f"  - {entry}\n")
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 1, out
        assert message in out
        assert "Traceback" not in out

    def test_a_looser_agent_limit_is_never_applied(self, pack_copy: Path) -> None:
        """The pack does not load, so no runtime can use it (a reload keeps the last good pack)."""
        _limit(pack_copy, "  - {agents: [team/helper], embedding_items_per_agent_hour: 601}\n")
        with pytest.raises(Exception, match="looser than the global"):
            read_pack(pack_copy)

    def test_equal_to_the_global_value_is_accepted(self, pack_copy: Path) -> None:
        """The global value itself is not looser."""
        _limit(pack_copy, "  - {agents: [team/helper], embedding_items_per_agent_hour: 600}\n")
        assert read_pack(pack_copy).limits.agent_cap("embedding_items_per_agent_hour", "team/helper", {}) == 600

    def test_a_decision_input_cannot_carry_a_looser_agent_limit(self, make_input: MakeInput) -> None:
        """The input model refuses it too, so no table or replayed input can state one."""
        loose = [{"agents": ["team/helper"], "embedding_items_per_agent_hour": 601}]
        with pytest.raises(ValueError, match="looser than the global"):
            make_input("embedding", {"deployment.limits.agent_limits": loose})


class TestResolution:
    def test_smallest_entry_wins_and_others_keep_the_global_value(self) -> None:
        limits = Limits.model_validate(
            {
                **yaml.safe_load((PACK_DIR / "data" / "limits.yaml").read_text()),
                "agent_limits": [
                    {"lists": ["bulk"], "embedding_items_per_agent_hour": 50},
                    {"agents": ["team/helper"], "embedding_items_per_agent_hour": 70},
                    {"agents": ["team/indexer"], "embedding_items_per_agent_hour": 20},
                ],
            }
        )
        org = {"bulk": ["team/helper", "team/indexer"]}
        assert limits.agent_caps("embedding_items_per_agent_hour", org) == {"team/helper": 50, "team/indexer": 20}
        assert limits.agent_cap("embedding_items_per_agent_hour", "team/chat", org) == 600
        assert limits.agent_cap("embedding_items_per_agent_hour", None, org) == 600
        # An entry without hourly_operations leaves the agents it names at the global 60.
        assert limits.agent_caps("hourly_operations", org) == {}
        assert limits.agent_cap("hourly_operations", "team/helper", org) == 60

    def test_answering_leaves_equality_alone(self) -> None:
        """Caps are remembered outside the model: limits that have answered still equal a fresh copy
        (the Cedar engine reuses a scope's parsed entities only for an equal deployment)."""
        data = {
            **yaml.safe_load((PACK_DIR / "data" / "limits.yaml").read_text()),
            "agent_limits": [{"agents": ["team/helper"], "hourly_operations": 5}],
        }
        used, fresh = Limits.model_validate(data), Limits.model_validate(data)
        assert used.agent_cap("hourly_operations", "team/helper", {}) == 5
        assert used == fresh
        # Each object answers from its own values, never from an equal object's remembered caps.
        other = Limits.model_validate({**data, "agent_limits": [{"agents": ["team/helper"], "hourly_operations": 3}]})
        assert other.agent_cap("hourly_operations", "team/helper", {}) == 3
        assert used.agent_cap("hourly_operations", "team/helper", {}) == 5


class TestThroughAnOrgList:
    def test_list_cases_pass_on_both_engines(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, tmp_path: Path
    ) -> None:
        """A cap given to an org list decides the same on Cedar and OPA, at, over and outside the list."""
        _bulk_list(pack_copy)
        assert run_cli(capsys, "check", "--dir", str(pack_copy))[0] == 0
        tables = tmp_path / "tables"
        shutil.copytree(CASES_DIR, tables, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        (tables / "agent_limits.yaml").write_text(_LIST_CASES)
        code, out = run_cli(capsys, "test", "--dir", str(pack_copy), "--cases", str(tables))
        assert code == 0, out
        assert "0 disagreement(s)" in out.splitlines()[-1]

    @pytest.mark.slow  # a proof, as in tests/policy/test_prove.py
    def test_prove_holds_the_listed_agents_to_their_cap(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """With a list capped, the property is proved; a Cedar rule reading the global value instead fails it."""
        _bulk_list(pack_copy)
        prove = ("prove", "--dir", str(pack_copy), "--cases", str(CASES_DIR), "--property", "agent-caps")
        code, out = run_cli(capsys, *prove)
        assert code == 0, out
        assert "proved  agent-caps: " in out
        _edit(
            pack_copy / "cedar" / "limits.cedar",
            "context.budget.embeddingUsed > context.agent.embeddingCap",
            "context.budget.embeddingUsed > context.deployment.limits.embeddingItemsPerAgentHour",
        )
        code, out = run_cli(capsys, *prove)
        assert code == 1, out
        assert "FAILS   agent-caps: " in out
        assert "team/indexer" in out or "team/bulk" in out


class TestFloor:
    @pytest.mark.parametrize(
        ("entry", "operation", "fact", "cap"),
        [
            ("embedding_items_per_agent_hour: 50", "embedding", "budget.embedding_items_used", 50),
            ("hourly_operations: 20", "save", "budget.hourly_operations_used", 20),
        ],
    )
    def test_floor_holds_an_agent_to_the_pack_cap_not_the_input(
        self, make_input: MakeInput, pack_copy: Path, entry: str, operation: str, fact: str, cap: int
    ) -> None:
        """The floor reads agent_limits from the loaded pack: an input without the entry does not lift the cap."""
        _limit(pack_copy, f"  - {{agents: [team/helper], {entry}}}\n")
        pack = read_pack(pack_copy)
        at, over = (make_input(operation, {fact: n}) for n in (cap, cap + 1))
        assert floor_reasons(at, pack.limits, pack.federation, pack.org) == set()
        assert floor_reasons(over, pack.limits, pack.federation, pack.org) == {Reason.HOURLY_BUDGET_EXHAUSTED}
