"""``memgov policy prove`` and ``diff --semantic``: the reference pack proves; loosenings fail with a readable
counterexample (the fewest fields away from a base case, the deployment, both engines' per-condition
explanation, one per property), under any data, against the old properties, and replayed on Rego."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from sidecar.policy import opa_server
from tests.policy.test_cli import DECISION, _edit, run_cli, run_diff
from tests.support.policy import CASES_DIR, PACK_DIR

_INVOKE_UNLESS = 'unless { action == Action::"a2a.invoke" && !context.agent.memoryEnabled };'
BIG = str(2**53)

#: (name, [(file, old, new)], the property that fails, cedar's and opa's answer on the counterexample)
PLANTED = [
    (
        "ops-bot exempt from room state, in both languages",
        [
            (
                "cedar/room.cedar",
                "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n" + _INVOKE_UNLESS,
                "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n"
                'unless {\n  (action == Action::"a2a.invoke" && !context.agent.memoryEnabled) ||\n'
                '  context.agent.ref == "kagent/ops-bot"\n};',
            ),
            (
                f"{DECISION}/room.rego",
                "\tattested\n\tnot room_ok\n",
                '\tattested\n\tinput.agent.ref != "kagent/ops-bot"\n\tnot room_ok\n',
            ),
        ],
        "room-state-valid",
        ("forward ['allowed']", "forward ['allowed']"),
    ),
    (
        "consent unless turned from && to ||, in Cedar only",
        [
            (
                "cedar/consent.cedar",
                "when { !resource.exists }\n" + _INVOKE_UNLESS,
                'when { !resource.exists }\nunless { action == Action::"a2a.invoke" || !context.agent.memoryEnabled };',
            )
        ],
        "consent-and-generation",
        ("forward ['allowed']", "rewrite_disabled ['consent_missing']"),
    ),
    (
        "audience check deleted, in both languages",
        [
            (
                "cedar/federation.cedar",
                " ||\n    !context.deployment.audienceServers.containsAll(context.audience.servers)",
                "",
            ),
            (
                f"{DECISION}/federation.rego",
                "\tevery server in input.audience.servers {\n\t\tserver in audience_servers\n\t}\n",
                "",
            ),
        ],
        "audience-local-and-partners",
        ("forward ['allowed']", "forward ['allowed']"),
    ),
]

#: An exemption of two conditions: ops-bot, and only on inspect, in both languages.
OPS_BOT_INSPECTS = [
    (
        "cedar/room.cedar",
        "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n" + _INVOKE_UNLESS,
        "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n"
        'unless {\n  (action == Action::"a2a.invoke" && !context.agent.memoryEnabled) ||\n'
        '  (context.agent.ref == "kagent/ops-bot" && action == Action::"control.inspect")\n};',
    ),
    (
        f"{DECISION}/room.rego",
        "\tattested\n\tnot room_ok\n",
        "\tattested\n\tnot room_ok\n\tnot ops_bot_inspects\n}\n\n# METADATA\n# description: ops-bot inspecting.\n"
        'ops_bot_inspects if {\n\tinput.agent.ref == "kagent/ops-bot"\n\tinput.operation == "control.inspect"\n',
    ),
]

#: Every property the reference pack's properties.yaml declares, and never-errors.
PROPERTIES = [
    "consent-and-generation",
    "key-valid",
    "agent-bound",
    "no-unknown-agent",
    "scope-match",
    "principal-valid",
    "federation-deny-by-default",
    "audience-local-and-partners",
    "room-state-valid",
    "context-present",
    "context-valid",
    "context-fresh",
    "context-single-use",
    "entry-cap",
    "fact-size",
    "batch-size",
    "embedding-item-size",
    "budgets-reserved",
    "agent-caps",
    "ungoverned-store-refused",
    "definitions-claim-nothing",
    "governed-definitions-need-an-operator",
    "memory-sessions-are-never-shared",
    "never-errors",
]


def _plant(pack: Path, edits: list[tuple[str, str, str]]) -> None:
    for rel, old, new in edits:
        _edit(pack / rel, old, new)


def _prove(capsys: pytest.CaptureFixture[str], pack: Path, *args: str) -> tuple[int, str]:
    return run_cli(capsys, "prove", "--dir", str(pack), "--cases", str(CASES_DIR), *args)


def _block(out: str, heading: str) -> list[str]:
    """The lines of one property's report: its heading and everything indented under it."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


class TestProve:
    @pytest.mark.timeout(1200)  # every property and its solver inputs: a few minutes on a busy machine
    def test_reference_pack_proves_every_property_and_rego_agrees(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Every property holds under any valid data, and Rego decides every solver input as Cedar does."""
        code, out = _prove(capsys, PACK_DIR)
        assert code == 0, out
        for prop in PROPERTIES:
            assert f"proved  {prop}: " in out
        assert "proved  room-state-valid: a2a.invoke, control.inspect" in out
        assert "proved  governed-definitions-need-an-operator: controller.write" in out
        assert f"{len(PROPERTIES)} of {len(PROPERTIES)} properties proved" in out
        assert "FAILS" not in out
        assert ", 0 decided otherwise by the Rego pack" in out

    @pytest.mark.parametrize(
        ("edits", "actions", "unless", "stops"),
        [
            (
                PLANTED[0][1],
                "a2a.invoke, control.inspect",
                'context.agent.ref == "kagent/ops-bot"',
                'line 13: input.agent.ref != "kagent/ops-bot"',
            ),
            (
                OPS_BOT_INSPECTS,
                "control.inspect",
                '(context.agent.ref == "kagent/ops-bot" && action == Action::"control.inspect")',
                "line 14: not ops_bot_inspects",
            ),
        ],
        ids=["ops-bot", "ops-bot-and-inspect"],
    )
    def test_the_ops_bot_counterexample_reads_in_at_most_25_lines(
        self,
        capsys: pytest.CaptureFixture[str],
        pack_copy: Path,
        tmp_path: Path,
        edits: list[tuple[str, str, str]],
        actions: str,
        unless: str,
        stops: str,
    ) -> None:
        """One counterexample for every failing action, a few fields from a base, the deployment, both
        engines' answers and their per-condition explanation: at most 25 lines, no solver values."""
        _plant(pack_copy, edits)
        found = tmp_path / "found"
        code, out = _prove(capsys, pack_copy, "--property", "room-state-valid", "--out", str(found))
        assert code == 1, out
        block = _block(out, "FAILS   room-state-valid")
        assert len(block) <= 25, "\n".join(block)
        assert len(out.splitlines()) <= 25, out  # the whole report of the one property
        text = "\n".join(block)
        assert block[0] == f"FAILS   room-state-valid: {actions}"
        assert out.count("FAILS") == 1
        assert (
            "  counterexample: base invoke with 4 change(s)" in text
            or "  counterexample: base inspect with 4 change(s)" in text
        )
        for change in ("agent.ref", "scope.agent", "request.context_agent"):
            assert f'    {change}: "team/helper" -> "kagent/ops-bot"' in text
        assert "  deployment: server_name example.org, bridge_bot @bridge:example.org," in text
        assert "  cedar: forward ['allowed']; opa: forward ['allowed']" in text
        assert "  why room_state_invalid did not refuse it:" in text
        assert "    cedar cedar/room.cedar:6 @id room-state-invalid:" in text
        assert f"      unless true  {unless}" in text
        assert f'    opa   {DECISION}/room.rego:11 deny["room_state_invalid"]: stops at {stops}' in text
        assert BIG not in out
        # The file replays through explain, and the reference pack refuses the same input.
        example = found / "room-state-valid.yaml"
        code, explained = run_cli(capsys, "explain", "--dir", str(pack_copy), "--input", str(example))
        assert code == 0 and "cedar: forward" in explained and "opa:   forward" in explained
        code, reference = run_cli(capsys, "explain", "--dir", str(PACK_DIR), "--input", str(example))
        assert code == 0 and "cedar: forward" not in reference and "opa:   forward" not in reference

    @pytest.mark.parametrize(("name", "edits", "prop", "replayed"), PLANTED[1:], ids=[p[0] for p in PLANTED[1:]])
    def test_planted_loosening_is_replayed_on_both_engines(
        self,
        capsys: pytest.CaptureFixture[str],
        pack_copy: Path,
        name: str,
        edits: list[tuple[str, str, str]],
        prop: str,
        replayed: tuple[str, str],
    ) -> None:
        """The counterexample shows what each engine answers, so a Rego pack without the hole shows as such."""
        _plant(pack_copy, edits)
        code, out = _prove(capsys, pack_copy, "--property", prop)
        assert code == 1, out
        assert f"FAILS   {prop}: " in out
        assert f"cedar: {replayed[0]}; opa: {replayed[1]}" in out

    def test_a_rule_right_only_for_the_shipped_data_fails(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """The embedding size rule reading the fact limit holds while both are 512; prove says so and shows
        other data (the two limits apart) under which it lets an oversized input through."""
        _edit(
            pack_copy / "cedar/limits.cedar",
            "context.deployment.limits.embeddingItemBytes",
            "context.deployment.limits.maxFactBytes",
        )
        code, out = _prove(capsys, pack_copy, "--property", "embedding-item-size")
        assert code == 1, out
        assert "FAILS   embedding-item-size: embedding (holds for this pack's data, not for all valid data)" in out
        block = "\n".join(_block(out, "FAILS   embedding-item-size"))
        assert "deployment.limits." in block and "request.max_item_bytes: 200 -> " in block

    def test_the_old_properties_hold_the_new_pack(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """A loosening with its property weakened to match proves alone, and fails against the baseline's."""
        _plant(pack_copy, PLANTED[0][1])
        _edit(
            pack_copy / "properties.yaml",
            '    allows_only_if: |\n      (action == Action::"a2a.invoke" && !context.agent.memoryEnabled) ||\n'
            "      (context has room &&",
            '    allows_only_if: |\n      (action == Action::"a2a.invoke" && !context.agent.memoryEnabled) ||\n'
            '      context.agent.ref == "kagent/ops-bot" || (context has room &&',
        )
        code, out = _prove(capsys, pack_copy, "--property", "room-state-valid")
        assert code == 0, out
        code, out = _prove(capsys, pack_copy, "--property", "room-state-valid", "--baseline", str(PACK_DIR))
        assert code == 1, out
        assert "proved  room-state-valid: a2a.invoke, control.inspect" in out
        assert (
            "FAILS   room-state-valid@baseline: a2a.invoke, control.inspect"
            " (the baseline's property, which this change dropped or weakened)"
        ) in out

    def test_a_rego_only_drift_fails_on_the_solvers_inputs(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """Rego exempting inspect from replay: the property is proved on Cedar, the replay shows Rego's hole."""
        _edit(
            pack_copy / DECISION / "room.rego",
            'deny contains "context_replayed" if {\n\tattested\n',
            'deny contains "context_replayed" if {\n\tattested\n\tinput.operation != "control.inspect"\n',
        )
        code, out = _prove(capsys, pack_copy, "--property", "context-single-use")
        assert code == 1, out
        assert "proved  context-single-use: a2a.invoke, control.inspect" in out
        assert "FAILS   rego replay: 2 solver inputs that break one property alone, 1 decided otherwise" in out
        assert "    counterexample: base inspect with 1 change(s)\n      request.context.replayed: false -> true" in out
        assert "cedar: deny ['context_replayed']; opa: forward ['allowed']" in out

    def test_json_and_markdown(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """The same counterexample as data for tools and as a pull-request comment."""
        _plant(pack_copy, PLANTED[0][1])
        code, out = _prove(capsys, pack_copy, "--property", "room-state-valid", "--format", "json")
        assert code == 1
        data = json.loads(out)
        (prop,) = data["properties"]
        assert prop["name"] == "room-state-valid" and prop["proved"] is False
        assert prop["failed_actions"] == ["a2a.invoke", "control.inspect"]
        changes = {c["path"]: c["after"] for c in prop["counterexample"]["changes"]}
        assert changes["agent.ref"] == "kagent/ops-bot"
        assert prop["counterexample"]["deployment"]["server_name"] == "example.org"
        assert prop["counterexample"]["answers"] == {"cedar": "forward ['allowed']", "opa": "forward ['allowed']"}
        code, out = _prove(capsys, pack_copy, "--property", "room-state-valid", "--format", "markdown")
        assert code == 1
        assert out.startswith("### memgov policy prove: **failed** (0 of 1 properties proved)")
        assert "| `room-state-valid` | **fails** | a2a.invoke, control.inspect |" in out

    def test_overflowing_cap_sum_is_an_evaluation_error(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """count + itemCount can overflow a Long: never-errors names the policy with the Cedar request that does it."""
        text = (pack_copy / "cedar/limits.cedar").read_text()
        start = text.index("  // The room left under each cap")
        end = text.index("};", start)
        (pack_copy / "cedar/limits.cedar").write_text(
            text[:start]
            + "  context.entries.count + context.request.itemCount > context.entries.cap ||\n"
            + "  context.entries.count + context.request.itemCount > context.deployment.limits.maxEntries\n"
            + text[end:]
        )
        code, out = _prove(capsys, pack_copy, "--property", "never-errors")
        assert code == 1, out
        assert (
            "FAILS   never-errors: memory.save (@id entry-cap-reached), memory.save_batch (@id entry-cap-reached)"
        ) in out
        assert "counterexample outside the decision input's bounds" in out
        assert "0 of 1 properties proved" in out

    def test_an_unknown_property_is_named(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--property with a typo names it instead of proving nothing."""
        code, out = _prove(capsys, PACK_DIR, "--property", "room-state-vaild")
        assert code == 2
        assert "--property room-state-vaild: no such property" in out

    def test_an_unrealistic_property_file_is_refused_with_its_field(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """A property without a condition is named by field, not a traceback."""
        path = pack_copy / "properties.yaml"
        data = yaml.safe_load(path.read_text())
        del data["properties"][0]["allows_only_if"]
        path.write_text(yaml.safe_dump(data))
        code, out = run_cli(capsys, "prove", "--dir", str(pack_copy))
        assert code == 2
        assert out.strip() == "memgov policy prove: properties.yaml: invalid (properties.0.allows_only_if)"


class TestSemanticDiff:
    def _diff(self, capsys: pytest.CaptureFixture[str], new: Path, *args: str) -> tuple[int, str]:
        return run_diff(capsys, new, "--semantic", *args)

    def test_a_pack_is_equivalent_to_itself(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """Every action is proved to decide alike, and --exit-code stays 0."""
        code, out = self._diff(capsys, pack_copy, "--exit-code")
        assert code == 0, out
        assert "11 of 11 actions decide every request alike" in out
        assert "equivalent  a2a.invoke" in out
        assert "0 change(s): 0 loosened, 0 tightened, 0 with other reasons" in out

    def test_a_two_condition_loosening_the_tables_miss_is_a_concrete_changed_request(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """The ops-bot exemption changes no Cedar answer to any case or mutant; the proof shows an ops-bot request."""
        _plant(pack_copy, PLANTED[0][1])
        code, out = self._diff(capsys, pack_copy, "--exit-code")
        assert code == 1, out
        assert "[cedar" not in out[out.index("policy diff ") :]
        assert "9 of 11 actions decide every request alike" in out
        section = out[out.index("LOOSENS     a2a.invoke (rules)") :]
        assert '    agent.ref: "team/helper" -> "kagent/ops-bot"' in section
        assert (
            "old cedar: rewrite_disabled ['room_state_invalid']; old opa: rewrite_disabled ['room_state_invalid'];"
            " new cedar: forward ['allowed']; new opa: forward ['allowed']"
        ) in section

    def test_a_data_only_change_is_a_semantic_change(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """Only limits.yaml changes: the old pack with its data refuses a fact the new one forwards."""
        _edit(pack_copy / "data" / "limits.yaml", "max_fact_bytes: 512", "max_fact_bytes: 600")
        code, out = self._diff(capsys, pack_copy, "--exit-code", "--loosening-only")
        assert code == 1, out
        assert "LOOSER   data/limits.yaml: max_fact_bytes: 512 -> 600" in out
        assert "LOOSENS     memory.save (data)" in out
        section = out[out.index("LOOSENS     memory.save (data)") :]
        assert "old cedar: deny ['fact_too_large']" in section and "new cedar: forward ['allowed']" in section
        assert "equivalent  a2a.invoke" in out


class TestProveWithoutTools:
    def test_without_the_helper_it_says_how_to_build_it(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """No memgov-symcc in .tools/bin or on PATH: one line naming `make tools`, exit 2."""
        monkeypatch.setattr(opa_server, "_REPO_TOOLS", tmp_path)
        monkeypatch.setenv("PATH", str(tmp_path))
        code, out = run_cli(capsys, "prove", "--dir", str(PACK_DIR))
        assert code == 2
        assert out.strip() == (
            "memgov policy prove: memgov-symcc not found: run `make tools` (builds tools/symcc/ with cargo)"
            " or put memgov-symcc on PATH"
        )

    def test_without_a_solver_it_says_how_to_install_one(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """No $CVC5, no cvc5 on PATH and no memgov-cvc5 beside Python: one line naming the installs, exit 2."""
        monkeypatch.delenv("CVC5", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))
        monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
        code, out = run_cli(capsys, "prove", "--dir", str(PACK_DIR))
        assert code == 2
        assert out.strip() == (
            "memgov policy prove: no SMT solver: pip install 'memgov[prove]' (cvc5 1.3.1),"
            " or put cvc5 on PATH or in $CVC5"
        )
