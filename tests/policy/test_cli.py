"""``memgov policy check | fmt | test | explain | revision | schema`` as authors run them, with planted mistakes."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from sidecar.policy import cli, opa_server
from sidecar.policy.pack import fingerprint
from tests.support.policy import CASES_DIR, PACK_DIR, OpaServers

DECISION = "rego/memgov/decision"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run ``memgov policy …`` through the command's own parser."""
    parser = argparse.ArgumentParser(prog="memgov")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["policy", *argv])
    code = int(args.func(args))
    return code, capsys.readouterr().out


def run_diff(capsys: pytest.CaptureFixture[str], new: Path, *args: str, cases: Path = CASES_DIR) -> tuple[int, str]:
    """Run ``memgov policy diff`` from the reference pack to ``new``, on ``cases``."""
    return run_cli(capsys, "diff", str(PACK_DIR), str(new), "--cases", str(cases), *args)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


class TestPolicyCheck:
    def test_reference_pack_is_clean(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Every step passes on the shipped pack, both languages."""
        code, out = run_cli(capsys, "check", "--dir", str(PACK_DIR))
        assert code == 0, out
        for step in (
            "data files",
            "limits within the ADR's values",
            "agent_limits name configured agents",
            "cedar parse + schema validation + @id",
            "cedar format",
            "rego rules",
            "rules in both packs",
            "rules read their own limits (typed keys)",
            "properties.yaml names every code and action",
            "opa fmt",
            "opa check --strict --schema",
            "opa test",
            "regal lint",
        ):
            assert f"ok   {step}" in out

    @pytest.mark.parametrize(
        ("rel", "old", "new", "step", "message"),
        [
            (
                "cedar/consent.cedar",
                "when { !resource.exists }",
                "when { !resource.exists ",
                "cedar parse",
                "cedar/consent.cedar:14:1: unexpected token `unless`",
            ),
            (
                "cedar/consent.cedar",
                "!context.request.keyValid",
                "!context.request.keyVald",
                "cedar parse",
                "cedar/consent.cedar:47:25 (@id key-invalid): attribute `request.keyVald` not found;"
                " did you mean `keyValid`?",
            ),
            (
                "cedar/room.cedar",
                'context.room.historyVisibility != "joined"',
                'context.room.historyVisiblity != "joined"',
                "cedar parse",
                "cedar/room.cedar:21:18 (@id room-state-invalid): attribute `room.historyVisiblity` not found;"
                " did you mean `historyVisibility`?",
            ),
            (
                "cedar/routes.cedar",
                "permit (principal, action, resource);",
                "permit(principal,action,resource);",
                "cedar format",
                "-permit(principal,action,resource);\n     +permit (principal, action, resource);",
            ),
            (
                f"{DECISION}/consent.rego",
                'deny contains "agent_mismatch"',
                'deny contains "agent_mismatc"',
                "rego rules",
                f"{DECISION}/consent.rego:50: 'agent_mismatc' is not a reason code",
            ),
            (
                f"{DECISION}/consent.rego",
                "#   reason: key_invalid",
                "#   reason: key_invalidd",
                "rego rules",
                "deny contains 'key_invalid' but METADATA custom.reason is 'key_invalidd'",
            ),
            (
                f"{DECISION}/consent.rego",
                "is_number(input.request.presented_generation)",
                "is_number(input.request.presented_generaton)",
                "opa check --strict --schema",
                "presented_generaton",
            ),
            *(
                (
                    f"{DECISION}/{file}",
                    right,
                    wrong,
                    "opa check --strict --schema",
                    f"rego_type_error: undefined ref: {wrong.split()[0].removeprefix('not ')}",
                )
                for file, right, wrong in (
                    ("federation.rego", 'input.principal.localpart != ""', 'input.principal.localprt != ""'),
                    ("federation.rego", "input.audience.classification ==", "input.audience.clasification =="),
                    ("room.rego", 'room.join_rule == "invite"', 'input.room.join_rul == "invite"'),
                    ("consent.rego", "input.scope.enabled", "input.scope.enabeld"),
                    ("consent.rego", "input.agent.memory_enabled", "input.agent.memory_enabld"),
                )
            ),
            (
                f"{DECISION}/consent.rego",
                "\tkeyed\n\tnot key_ok",
                "\tkeyed\n\tnot key_ok\n\tinput.operation == 1",
                "opa test",
                "FAIL: ",
            ),
            (
                f"{DECISION}/limits.rego",
                "hourly_ok if {",
                "weekend if input.now < 0\n\nhourly_ok if {",
                "regal lint",
                "missing metadata",
            ),
        ],
        ids=[
            "cedar-syntax",
            "cedar-field-typo",
            "cedar-field-typo-after-comments",
            "cedar-format",
            "rego-reason-typo",
            "rego-metadata-mismatch",
            "rego-schema-typo",
            *(f"rego-nullable-{name}-typo" for name in ("principal", "audience", "room", "scope", "agent")),
            "rego-test-broken",
            "regal-metadata",
        ],
    )
    def test_each_planted_mistake_names_file_line_and_cause(
        self,
        capsys: pytest.CaptureFixture[str],
        pack_copy: Path,
        rel: str,
        old: str,
        new: str,
        step: str,
        message: str,
    ) -> None:
        """A planted mistake fails its step with file:line and the tool's message, never a traceback."""
        _edit(pack_copy / rel, old, new)
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 1
        assert f"FAIL {step}" in out
        assert message in out
        assert "Traceback" not in out

    def test_cedar_format_failure_says_how_to_fix_it(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """A badly indented Cedar file shows its diff and the command that formats it."""
        _edit(pack_copy / "cedar" / "limits.cedar", "  principal,", "    principal,")
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 1
        assert "memgov policy fmt --write" in out

    @pytest.mark.parametrize(
        ("old", "new", "line", "message"),
        [
            ("  mxid: String,", "  mxid: Strng,", 25, "failed to resolve type: Strng"),
            ("type Org = {};", "type Org = {,};", 43, "error parsing schema: unexpected token `,`"),
        ],
        ids=["unknown-type", "syntax"],
    )
    def test_a_schema_error_names_its_line(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, old: str, new: str, line: int, message: str
    ) -> None:
        """cedarpy gives a schema error without a line; check names the line that holds it."""
        _edit(pack_copy / "cedar" / "memgov.cedarschema", old, new)
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 1
        assert f"cedar/memgov.cedarschema:{line}: the schema does not parse: {message}" in out

    def test_a_file_that_does_not_parse_is_never_called_formatted(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """The format step fails for a Cedar file it could not parse, naming it, instead of saying ok."""
        _edit(pack_copy / "cedar" / "consent.cedar", "when { !resource.exists }", "when { !resource.exists ")
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 1
        assert "FAIL cedar format\n     cedar/consent.cedar: does not parse, so its format was not checked" in out

    def test_every_step_runs_after_a_broken_data_file(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """A broken limits.yaml fails its step, and a Cedar typo in the same pack is still reported."""
        _edit(pack_copy / "data" / "limits.yaml", "max_entries: 100", "max_entries: [100")
        _edit(pack_copy / "cedar" / "consent.cedar", "!context.request.keyValid", "!context.request.keyVald")
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 1
        assert "FAIL data files\n     data/limits.yaml:" in out
        assert "attribute `request.keyVald` not found" in out
        for step in ("rego rules", "opa fmt", "opa test", "regal lint"):
            assert f"ok   {step}" in out

    def test_without_opa_and_regal_their_checks_are_skipped_and_said_so(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """A plain pip install: the in-process checks run, the tool checks say SKIP and why; --require-tools fails."""
        monkeypatch.setattr(opa_server, "_REPO_TOOLS", tmp_path)
        monkeypatch.setenv("PATH", str(tmp_path))
        code, out = run_cli(capsys, "check", "--dir", str(PACK_DIR))
        assert code == 0, out
        assert "ok   cedar parse + schema validation + @id" in out
        for step in ("opa fmt", "opa check --strict --schema (decision input)", "opa test"):
            assert f"SKIP {step}\n     skipped: opa not found: run `make tools` or put opa on PATH" in out
        assert "SKIP regal lint\n     skipped: regal not found" in out
        assert "SKIP rules read their own limits (typed keys)\n     skipped: opa not found" in out
        assert "5 check(s) not run for want of a tool: --require-tools makes that a failure" in out
        code, out = run_cli(capsys, "check", "--dir", str(PACK_DIR), "--require-tools")
        assert code == 1
        assert "FAIL regal lint" in out

    def test_a_rego_rule_reading_another_codes_limit_through_a_helper(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """Typed keys through OPA's parse: the entry cap helper reading the fact limit is named at its rule."""
        _edit(
            pack_copy / DECISION / "limits.rego",
            "\tinput.entries.count <= input.deployment.limits.max_entries\n",
            "\tinput.entries.count <= input.deployment.limits.max_fact_bytes\n",
        )
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 1
        assert (
            f'FAIL rules read their own limits (typed keys)\n     {DECISION}/limits.rego:8: deny["entry_cap_reached"]'
            " reads limit max_fact_bytes, but entry_cap_reached reads only max_entries"
        ) in out

    def test_formats_for_tools_and_reviews(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """The same findings as JSON, SARIF located at the file and line, and a Markdown comment."""
        _edit(pack_copy / "data" / "limits.yaml", "max_fact_bytes: 512", "max_fact_bytes: 5120")
        _edit(pack_copy / "cedar" / "consent.cedar", "!context.request.keyValid", "!context.request.keyVald")
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy), "--format", "json")
        assert code == 1
        steps = {s["name"]: s for s in json.loads(out)["steps"]}
        assert steps["limits within the ADR's values"]["status"] == "fail"
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy), "--format", "sarif")
        assert code == 1
        results = json.loads(out)["runs"][0]["results"]
        located = [r["locations"][0]["physicalLocation"] for r in results if "locations" in r]
        assert {
            "artifactLocation": {"uri": "cedar/consent.cedar"},
            "region": {"startLine": 47, "startColumn": 25},
        } in located
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy), "--format", "markdown")
        assert code == 1
        assert "| limits within the ADR's values | fail |" in out

    def test_configured_agents_are_compared(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With a gateway configuration, an agent_limits entry naming an unconfigured agent is a warning."""
        _edit(
            pack_copy / "data" / "limits.yaml",
            "agent_limits: []",
            "agent_limits:\n  - {agents: [team/helper, kagent/indexr], hourly_operations: 20}",
        )
        config = tmp_path / "memgov.yaml"
        config.write_text(
            "agents:\n  team/helper: {disabled_variant: helper-nomem, ghost: '@agent-helper:example.org'}\n"
        )
        monkeypatch.setenv("MEMGOV_CONFIG", str(config))
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 0, out
        assert (
            "warn agent_limits name configured agents\n"
            "     data/limits.yaml: agent_limits names kagent/indexr, which is not a configured agent"
        ) in out

    def test_rule_in_one_pack_only_is_listed(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """A Cedar policy whose code no Rego rule answers, and a code left without Cedar policy, are named."""
        (pack_copy / "cedar" / "room.cedar").unlink()
        code, out = run_cli(capsys, "check", "--dir", str(pack_copy))
        assert code == 1
        assert "FAIL rules in both packs" in out
        assert f'{DECISION}/room.rego:11: deny["room_state_invalid"] has no cedar rule for room_state_invalid' in out
        assert "cedar/: no rule for: room_state_invalid, context_missing" in out


class TestFmt:
    def test_reference_pack_needs_no_formatting(self, capsys: pytest.CaptureFixture[str]) -> None:
        """fmt --check passes on the shipped pack."""
        assert run_cli(capsys, "fmt", "--check", "--dir", str(PACK_DIR)) == (0, "")

    def test_check_diff_and_write_cover_both_languages(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path
    ) -> None:
        """Unformatted Cedar and Rego are listed, diffed, then rewritten so that check passes."""
        permit = "permit (principal, action, resource);"
        _edit(pack_copy / "cedar" / "routes.cedar", permit, permit.replace(" ", "").replace(",", ", "))
        _edit(pack_copy / DECISION / "routes.rego", 'deny contains "ungoverned', 'deny  contains "ungoverned')
        code, out = run_cli(capsys, "fmt", "--check", "--dir", str(pack_copy))
        assert code == 1
        assert "cedar/routes.cedar" in out and f"{DECISION}/routes.rego" in out
        code, out = run_cli(capsys, "fmt", "--diff", "--dir", str(pack_copy))
        assert code == 1
        assert "+permit (principal, action, resource);" in out and '+deny contains "ungoverned_store"' in out
        code, out = run_cli(capsys, "fmt", "--write", "--dir", str(pack_copy))
        assert code == 0
        assert run_cli(capsys, "fmt", "--check", "--dir", str(pack_copy)) == (0, "")


def _tables(tmp_path: Path) -> Path:
    cases = tmp_path / "cases"
    shutil.copytree(CASES_DIR, cases, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return cases


class TestPolicyTest:
    def test_both_engines_pass_with_coverage_per_rule_and_a_differential_run(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Every case passes on both engines, every rule fires, mutated inputs agree."""
        code, out = run_cli(capsys, "test", "--dir", str(PACK_DIR), "--cases", str(CASES_DIR))
        assert code == 0, out
        assert "cedar cedar/limits.cedar:5" in out and f"opa   {DECISION}/limits.rego:8" in out
        assert "never  <-" not in out
        assert ", 0 disagreement(s)" in out.splitlines()[-2]
        assert out.strip().endswith("2 engine(s), 0 disagreement(s)")
        # Coverage per condition: only what the input model makes unreachable is left.
        section = out[out.index("conditions no case exercises") : out.index("differential:")]
        assert section.count("\n  ") == 7
        assert "@id entry-cap-reached: when part is never true: context.entries.count < 0" in section

    def test_json_and_markdown(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """A failing case as data for tools, and the run as a pull-request comment."""
        cases = _tables(tmp_path)
        _edit(cases / "limits.yaml", "reasons: [batch_too_large]}", "reasons: [fact_too_large]}")
        code, out = run_cli(
            capsys, "test", "--engine", "cedar", "--dir", str(PACK_DIR), "--cases", str(cases), "--format", "json"
        )
        assert code == 1
        data = json.loads(out)
        (failure,) = data["failures"]
        assert failure["case"] == "limits::automatic save of 11 facts is refused"
        assert failure["got"] == {"action": "deny", "reasons": ["batch_too_large"]}
        assert "+ request.item_count: 11" in failure["input_diff"]
        code, out = run_cli(
            capsys, "test", "--engine", "cedar", "--dir", str(PACK_DIR), "--cases", str(cases), "--format", "markdown"
        )
        assert code == 1
        assert out.startswith("### memgov policy test: **failed**: 1 failing case result(s)")

    def test_rego_on_an_opa_server(self, capsys: pytest.CaptureFixture[str], opa: OpaServers) -> None:
        """With --opa-url the Rego decisions come from a real OPA server serving the pack and still agree."""
        url = opa.serve(PACK_DIR)
        code, out = run_cli(capsys, "test", "--opa-url", url, "--dir", str(PACK_DIR), "--cases", str(CASES_DIR))
        assert code == 0, out

    def test_wrong_expectation_fails_and_shows_the_input(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A case the pack does not meet is named, with its input as a diff from its base."""
        cases = _tables(tmp_path)
        _edit(cases / "limits.yaml", "reasons: [batch_too_large]}", "reasons: [fact_too_large]}")
        code, out = run_cli(capsys, "test", "--engine", "cedar", "--dir", str(PACK_DIR), "--cases", str(cases))
        assert code == 1
        assert "FAIL [cedar] limits::automatic save of 11 facts is refused" in out
        assert "input (diff from base save_batch):" in out
        assert "- request.item_count: 4" in out and "+ request.item_count: 11" in out

    def test_engine_disagreement_fails(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """When the Rego pack answers differently from the Cedar pack, the run fails and shows where."""
        (pack_copy / DECISION / "extra.rego").write_text(
            "package memgov.decision\n\n# METADATA\n# custom:\n#   reason: rate_limited\n"
            'deny contains "rate_limited" if input.operation == "memory.list"\n'
        )
        code, out = run_cli(capsys, "test", "--dir", str(pack_copy), "--cases", str(CASES_DIR))
        assert code == 1
        assert "DISAGREE consent::list at the current generation is forwarded" in out

    def test_rule_no_case_fires_fails(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """A policy only in Cedar, with no rows, shows as never firing and fails the run."""
        (pack_copy / "cedar" / "extra.cedar").write_text(
            '@id("rate-limited/weekend")\n@rationale("r")\nforbid (\n  principal,\n  action,\n  resource\n)\n'
            "when { context.now < 0 };\n"
        )
        code, out = run_cli(capsys, "test", "--dir", str(pack_copy), "--cases", str(CASES_DIR))
        assert code == 1
        assert "cedar/extra.cedar:1" in out and "never  <- no case fires this rule" in out
        assert "1 rule(s) no case fires" in out

    def test_one_table_file_runs_alone(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--cases FILE runs that table with its folder's bases; coverage is shown, not enforced."""
        code, out = run_cli(capsys, "test", "--dir", str(PACK_DIR), "--cases", str(CASES_DIR / "routes.yaml"))
        assert code == 0, out
        assert out.splitlines()[0] == f"cases: {CASES_DIR / 'routes.yaml'} (5 selected, selection)"
        assert out.strip().splitlines()[-1].startswith("ok:")

    def test_selection_by_name(self, capsys: pytest.CaptureFixture[str]) -> None:
        """-k selects cases by name or a part of file::name."""
        code, out = run_cli(
            capsys,
            "test",
            "--dir",
            str(PACK_DIR),
            "--cases",
            str(CASES_DIR),
            "-k",
            "limits::",
            "-k",
            "save into an enabled scope is forwarded",
        )
        assert code == 0, out
        assert "selection)" in out.splitlines()[0]
        assert "consent_missing" in out

    def test_a_selector_matching_nothing_is_an_error(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A -k typo runs nothing: it fails and names the selector instead of passing."""
        code, out = run_cli(
            capsys, "test", "--dir", str(PACK_DIR), "--cases", str(CASES_DIR), "-k", "limits::", "-k", "cosnent"
        )
        assert code == 2
        assert out.strip() == f"memgov policy test: -k 'cosnent' matches no case in {CASES_DIR}"

    def test_tables_beside_a_copied_pack_or_in_the_working_folder(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """--dir without --cases uses policy-tests/ beside the pack, else ./policy-tests, and says which."""
        pack = tmp_path / "elsewhere" / "policies"
        shutil.copytree(PACK_DIR, pack)
        monkeypatch.chdir(tmp_path)
        code, out = run_cli(capsys, "test", "--engine", "cedar", "--dir", str(pack))
        assert code == 2
        assert "no case tables found in" in out and "pass --cases" in out
        monkeypatch.chdir(PACK_DIR.parent)
        code, out = run_cli(capsys, "test", "--engine", "cedar", "--dir", str(pack))
        assert code == 0, out
        assert out.startswith(f"cases: {PACK_DIR.parent / 'policy-tests'}")


class TestExplain:
    def test_case_on_both_engines_with_rules_trace_and_floor(self, capsys: pytest.CaptureFixture[str]) -> None:
        """explain shows the input, the deciding Cedar policy and Rego rule with its lines, and the floor apart."""
        code, out = run_cli(
            capsys,
            "explain",
            "--dir",
            str(PACK_DIR),
            "--cases",
            str(CASES_DIR),
            "--case",
            "save into a disabled scope is refused",
        )
        assert code == 0, out
        assert "operation: memory.save" in out and "enabled: false" in out
        # The Cedar pack's view of the same input: camelCase context, the entities by uid.
        cedar_view = out[out.index("the same input as the Cedar pack reads it") : out.index("\ncedar: ")]
        assert "  action: memory.save\n  context:\n    agent:\n      known: true\n" in cedar_view
        assert '  entities:\n    Deployment::"local":\n' in cedar_view
        assert '    User::"@alice:example.org":\n      known: true\n' in cedar_view
        assert "      enabled: false\n" in cedar_view
        assert "cedar: deny ['consent_disabled']" in out and "cedar/consent.cedar:16 @id consent-disabled" in out
        assert "opa:   deny ['consent_disabled']" in out
        assert f'{DECISION}/consent.rego:18 deny["consent_disabled"] fired:' in out
        assert "not is_true(input.scope.enabled)" in out
        assert "floor: refuses ['consent_disabled']" in out

    @pytest.mark.parametrize(
        ("case", "expected"),
        [
            (
                "encrypted room is refused",
                [
                    '  cedar cedar/room.cedar:6 @id room-state-invalid: scope (principal, action in Action::"attested",'
                    " resource) applies",
                    "      true  if context has room\n      any of:",
                    '      false context.room.roomVersion != "12"\n      true  context.room.encrypted\n',
                    f'  opa   {DECISION}/room.rego:11 deny["room_state_invalid"]: the body so far is\n'
                    "    true  attested\n    true  not room_ok",
                ],
            ),
            (
                "save into a disabled scope is refused",
                [
                    "resource) does not apply\n",
                    "      false if context has room\n",
                    "    false attested\n    false not room_ok",
                ],
            ),
        ],
        ids=["fired", "not-fired"],
    )
    def test_a_named_rule_condition_by_condition(
        self, capsys: pytest.CaptureFixture[str], case: str, expected: list[str]
    ) -> None:
        """--rule shows whether each Cedar clause part holds and how far the Rego body gets: why it fired or not."""
        code, out = run_cli(
            capsys,
            "explain",
            "--dir",
            str(PACK_DIR),
            "--cases",
            str(CASES_DIR),
            "--case",
            case,
            "--rule",
            "room_state_invalid",
        )
        assert code == 0, out
        section = out[out.index("rule room_state_invalid, condition by condition:") :]
        for text in expected:
            assert text in section

    def test_input_file(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """An input file is validated and explained; the floor verdict stands apart from the engines."""
        from sidecar.policy.cases import build_input, load_bases
        from sidecar.policy.pack import read_pack

        inp = build_input(load_bases(CASES_DIR, read_pack(PACK_DIR)), "save", {"entries.count": 100})
        path = tmp_path / "input.json"
        path.write_text(json.dumps(inp.model_dump(mode="json")))
        code, out = run_cli(capsys, "explain", "--dir", str(PACK_DIR), "--input", str(path))
        assert code == 0, out
        assert "cedar: deny ['entry_cap_reached']" in out and "floor: refuses ['entry_cap_reached']" in out

    def test_unknown_field_in_an_input_file_is_refused(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """An input file with a field the schema does not know (e.g. memory text) is refused, no traceback."""
        path = tmp_path / "input.yaml"
        path.write_text("operation: memory.save\nfacts_text: secret\n")
        code, out = run_cli(capsys, "explain", "--dir", str(PACK_DIR), "--input", str(path))
        assert code == 2
        assert "Traceback" not in out and "secret" not in out


class TestRevisionAndSchema:
    def test_revision_matches_the_runtime_hash(self, capsys: pytest.CaptureFixture[str], pack_copy: Path) -> None:
        """memgov policy revision DIR prints what /readyz reports for that folder."""
        assert run_cli(capsys, "revision", str(pack_copy)) == (0, fingerprint(pack_copy) + "\n")

    def test_published_schemas_are_current(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`memgov policy schema --check` passes on the committed docs/schema/."""
        assert run_cli(capsys, "schema", "--check") == (0, "")
