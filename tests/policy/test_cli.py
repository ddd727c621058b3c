"""``memgov policy check | test | schema`` as a policy author runs them."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from sidecar.policy import cli
from tests.policy.conftest import CASES_DIR, PACK_DIR, OpaServers


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run ``memgov policy …`` through the command's own parser."""
    parser = argparse.ArgumentParser(prog="memgov")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["policy", *argv])
    code = int(args.func(args))
    return code, capsys.readouterr().out


class TestPolicyCheck:
    def test_reference_pack_is_clean(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Parse, schema validation, formatting and lint all pass on the shipped pack."""
        code, out = _run(capsys, "check", "--dir", str(PACK_DIR))
        assert code == 0, out
        for step in ("cedar parse + schema validation + @id", "cedar format", "opa fmt", "opa check --strict",
                     "regal lint"):
            assert f"ok   {step}" in out

    @pytest.mark.parametrize(
        ("rel", "text", "step"),
        [
            ("cedar/extra.cedar", '@id("route-denied") @rationale("r") forbid(principal,action,resource);\n',
             "cedar format"),
            ("rego/memgov/decision/extra.rego", "package memgov.decision\nx:=1\n", "opa fmt"),
            ("rego/memgov/decision/extra.rego", "package memgov.decision\n\n# " + "x" * 130 + "\nx := 1\n",
             "regal lint"),
            ("cedar/extra.cedar", '@id("nope")\n@rationale("r")\nforbid (principal, action, resource);\n',
             "cedar parse + schema validation + @id"),
        ],
        ids=["cedar-format", "rego-format", "regal", "cedar-id"],
    )
    def test_each_problem_fails_its_step(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, rel: str, text: str, step: str
    ) -> None:
        """A badly formatted, unlinted or invalid file fails the check and names the step."""
        (pack_copy / rel).write_text(text)
        code, out = _run(capsys, "check", "--dir", str(pack_copy))
        assert code == 1
        assert f"FAIL {step}" in out


class TestPolicyTest:
    def test_cedar_passes_the_tables_with_a_coverage_table(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Every case passes on Cedar and the table lists every rule."""
        code, out = _run(capsys, "test", "--engine", "cedar", "--dir", str(PACK_DIR), "--cases", str(CASES_DIR))
        assert code == 0, out
        assert "entry_cap_reached" in out and "ungoverned_store" in out
        assert out.strip().endswith("1 engine(s), 0 disagreement(s)")

    def test_both_engines_agree_on_a_local_opa(self, capsys: pytest.CaptureFixture[str]) -> None:
        """With --engine all a local OPA is started and both packs pass with no disagreement."""
        code, out = _run(capsys, "test", "--engine", "all", "--dir", str(PACK_DIR), "--cases", str(CASES_DIR))
        assert code == 0, out
        assert out.strip().endswith("2 engine(s), 0 disagreement(s)")

    def test_wrong_expectation_fails(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """A case whose expectation the pack does not meet exits non-zero and is named."""
        cases = tmp_path / "cases"
        shutil.copytree(CASES_DIR, cases, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        path = cases / "limits.yaml"
        path.write_text(path.read_text().replace("reasons: [batch_too_large]}", "reasons: [fact_too_large]}", 1))
        code, out = _run(capsys, "test", "--engine", "cedar", "--dir", str(PACK_DIR), "--cases", str(cases))
        assert code == 1
        assert "FAIL [cedar] limits::automatic save of 11 facts is refused" in out

    def test_engine_disagreement_fails(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, opa: OpaServers
    ) -> None:
        """When the Rego pack answers differently from the Cedar pack, the run fails and shows where."""
        (pack_copy / "rego" / "memgov" / "decision" / "extra.rego").write_text(
            'package memgov.decision\n\ndeny contains "rate_limited" if input.operation == "memory.list"\n'
        )
        code, out = _run(capsys, "test", "--engine", "all", "--opa-url", opa.serve(pack_copy), "--dir", str(pack_copy),
                         "--cases", str(CASES_DIR))
        assert code == 1
        assert "DISAGREE consent::list at the current generation is forwarded" in out


class TestSchemaCommand:
    def test_published_schemas_are_current(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`memgov policy schema --check` passes on the committed docs/schema/."""
        assert _run(capsys, "schema", "--check") == (0, "")
