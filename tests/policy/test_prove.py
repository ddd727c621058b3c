"""``memgov policy prove``: the reference pack proves; planted loosenings fail with a replayable counterexample."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from sidecar.policy import opa_server
from tests.policy.test_cli import DECISION, _edit, run_cli
from tests.support.policy import CASES_DIR, PACK_DIR

_INVOKE_UNLESS = 'unless { action == Action::"a2a.invoke" && !context.agent.memoryEnabled };'

#: (name, [(file, old, new)], the property and action that fail, cedar's and opa's answer on the counterexample)
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
        ("room-state-valid", "a2a.invoke"),
        ("forward ['allowed']", "forward ['allowed']"),
    ),
    (
        "native principal's server matched by suffix, in both languages",
        [
            (
                "cedar/federation.cedar",
                "principal.serverName != context.deployment.serverName",
                '!(principal.serverName like "*example.org")',
            ),
            (
                f"{DECISION}/federation.rego",
                "\tinput.principal.server_name != input.deployment.server_name\n",
                '\tnot endswith(input.principal.server_name, "example.org")\n',
            ),
        ],
        ("federation-deny-by-default", "a2a.invoke"),
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
        ("consent-and-generation", "a2a.invoke"),
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
        ("audience-local-and-partners", "a2a.invoke"),
        ("forward ['allowed']", "forward ['allowed']"),
    ),
    (
        "agent embedding cap dropped, in both languages",
        [
            ("cedar/limits.cedar", " ||\n  context.budget.embeddingUsed > context.agent.embeddingCap", ""),
            (
                f"{DECISION}/limits.rego",
                '\tinput.budget.embedding_items_used <= agent_cap("embedding_items_per_agent_hour")\n',
                "",
            ),
        ],
        ("agent-caps", "a2a.invoke"),
        ("forward ['allowed']", "forward ['allowed']"),
    ),
]


class TestProve:
    def test_reference_pack_proves_every_property(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Each shipped property and never-errors is proved on the shipped pack, for every action it covers."""
        code, out = run_cli(capsys, "prove", "--dir", str(PACK_DIR))
        assert code == 0, out
        for prop in (
            "consent-and-generation",
            "federation-deny-by-default",
            "audience-local-and-partners",
            "room-state-valid",
            "no-unknown-agent",
            "agent-caps",
            "definitions-claim-nothing",
            "governed-definitions-need-an-operator",
            "never-errors",
        ):
            assert f"proved  {prop}: " in out
        assert "proved  room-state-valid: a2a.invoke, control.inspect" in out
        assert "proved  governed-definitions-need-an-operator: controller.write" in out
        assert "9 of 9 properties proved" in out
        assert "FAILS" not in out

    @pytest.mark.parametrize(("name", "edits", "fails", "replayed"), PLANTED, ids=[p[0] for p in PLANTED])
    def test_planted_loosening_gives_a_counterexample_replayed_on_both_engines(
        self,
        capsys: pytest.CaptureFixture[str],
        pack_copy: Path,
        tmp_path: Path,
        name: str,
        edits: list[tuple[str, str, str]],
        fails: tuple[str, str],
        replayed: tuple[str, str],
    ) -> None:
        """prove exits 1 naming the property and action; its counterexample file replays through explain --input."""
        for rel, old, new in edits:
            _edit(pack_copy / rel, old, new)
        out_dir = tmp_path / "found"
        code, out = run_cli(capsys, "prove", "--dir", str(pack_copy), "--out", str(out_dir))
        assert code == 1, out
        prop, action = fails
        assert f"FAILS   {prop}: {action}" in out
        example = out_dir / f"{prop}-{action.replace('.', '_')}.yaml"
        assert f"cedar: {replayed[0]}" in out
        assert f"opa:   {replayed[1]}" in out
        code, explained = run_cli(capsys, "explain", "--dir", str(pack_copy), "--input", str(example))
        assert code == 0, explained
        assert f"cedar: {replayed[0]}" in explained
        assert f"opa:   {replayed[1]}" in explained
        # The same input on the reference pack is refused by both engines: the planted change is the cause.
        code, reference = run_cli(capsys, "explain", "--dir", str(PACK_DIR), "--input", str(example))
        assert code == 0, reference
        assert "cedar: forward" not in reference and "opa:   forward" not in reference

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
        code, out = run_cli(capsys, "prove", "--dir", str(pack_copy))
        assert code == 1, out
        assert "FAILS   never-errors: memory.save (@id entry-cap-reached)" in out
        assert "FAILS   never-errors: memory.save_batch (@id entry-cap-reached)" in out
        assert "counterexample outside the decision input's bounds" in out
        assert "8 of 9 properties proved" in out

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
    def test_a_pack_is_equivalent_to_itself(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """Every action is proved to decide alike, and --exit-code stays 0."""
        code, out = run_cli(
            capsys, "diff", str(PACK_DIR), str(pack_copy), "--cases", str(CASES_DIR), "--semantic", "--exit-code"
        )
        assert code == 0, out
        assert "10 of 10 actions decide every request alike" in out
        assert "equivalent  a2a.invoke" in out
        assert "base inputs), 0 change(s)" in out

    def test_a_two_condition_loosening_the_tables_miss_is_a_concrete_changed_request(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """The ops-bot exemption changes no Cedar answer to any case or mutant; the proof shows an ops-bot request."""
        for rel, old, new in PLANTED[0][1]:
            _edit(pack_copy / rel, old, new)
        code, out = run_cli(
            capsys, "diff", str(PACK_DIR), str(pack_copy), "--cases", str(CASES_DIR), "--semantic", "--exit-code"
        )
        assert code == 1, out
        # No case row or mutant that Cedar decides changes (Rego's null-agent rows do; see test_diff).
        assert "\ncedar:" not in out[out.index("policy diff ") :]
        assert "8 of 10 actions decide every request alike" in out
        section = out[out.index("CHANGED     a2a.invoke") :]
        assert "ref: kagent/ops-bot" in section
        for line in (
            "old cedar: rewrite_disabled ['room_state_invalid']",
            "old opa:   rewrite_disabled ['room_state_invalid']",
            "new cedar: forward ['allowed']",
            "new opa:   forward ['allowed']",
        ):
            assert line in section


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
