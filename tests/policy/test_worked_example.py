"""docs/policies.md's worked example, run from the page: it passes check and test, and the planted bug is caught."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.policy.test_cli import run_cli, run_diff
from tests.support.policy import CASES_DIR, PACK_DIR, REPO

_BLOCK = re.compile(r"^```\w+ file=(\S+)\n(.*?)^```$", re.M | re.S)


def apply_example(into: Path) -> tuple[Path, Path]:
    """Copy the reference pack and tables into ``into`` and write every file block of the example."""
    pack, tables = into / "my-pack", into / "my-tests"
    shutil.copytree(PACK_DIR, pack)
    shutil.copytree(CASES_DIR, tables, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    blocks = _BLOCK.findall((REPO / "docs" / "policies.md").read_text())
    assert len(blocks) == 7
    for target, text in blocks:
        path, _, declaration = target.partition("#")
        dest = into / path
        if declaration == "append":
            dest.write_text(dest.read_text() + "\n" + text)
        elif declaration:
            # A declaration replaced in an existing file (the schema's Org type).
            original = dest.read_text()
            assert re.search(rf"^type {declaration} = {{}};$", original, re.M)
            dest.write_text(re.sub(rf"^type {declaration} = {{}};$", text.strip(), original, flags=re.M))
        else:
            dest.write_text(text)
    return pack, tables


class TestWorkedExample:
    def test_example_passes_check_and_test(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """The finance-bot rule from the docs, with its property, is clean under check and passes test."""
        pack, tables = apply_example(tmp_path)
        code, out = run_cli(capsys, "check", "--dir", str(pack))
        assert code == 0, out
        code, out = run_cli(capsys, "test", "--dir", str(pack), "--cases", str(tables))
        assert code == 0, out
        assert "agent_memory_denied" in out and "cedar/org.cedar:2" in out
        assert "rego/memgov/decision/org.rego:8" in out

    def test_example_proves_its_property(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """The new property holds for every request, Rego refuses the solver's finance-bot requests too,
        and the reference pack's properties still hold."""
        pack, tables = apply_example(tmp_path)
        code, out = run_cli(
            capsys,
            "prove",
            "--dir",
            str(pack),
            "--cases",
            str(tables),
            "--baseline",
            str(PACK_DIR),
            "--property",
            "org-memory-denied",
        )
        assert code == 0, out
        assert "proved  org-memory-denied: a2a.invoke, control.inspect, embedding, memory.delete_all" in out
        assert "solver inputs that break one property alone, 0 decided otherwise by the Rego pack" in out

    def test_too_broad_rule_is_caught_by_the_differential_run(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A prefix match in Rego passes check, every case and opa test, and fails the differential run."""
        pack, tables = apply_example(tmp_path)
        rego = pack / "rego" / "memgov" / "decision" / "org.rego"
        rego.write_text(
            rego.read_text().replace(
                "input.agent.ref in input.deployment.org.memory_denied_agents",
                'startswith(input.agent.ref, "kagent/finance")',
            )
        )
        table = tables / "org.yaml"
        doc = yaml.safe_load(table.read_text())
        doc["cases"] = [c for c in doc["cases"] if c["kind"] != "bypass"]
        table.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert run_cli(capsys, "check", "--dir", str(pack))[0] == 0
        code, out = run_cli(capsys, "test", "--dir", str(pack), "--cases", str(tables))
        assert code == 1
        assert "FAIL [" not in out and "DISAGREE" not in out
        assert 'DIFFER embedding ~ agent.ref="kagent/finance-botx": cedar: forward' in out
        assert "engines disagree on" in out.splitlines()[-1]

    def test_diff_lists_the_decisions_the_rule_changes(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """policy diff between the reference pack and the example names the finance-bot cases on both engines."""
        pack, tables = apply_example(tmp_path)
        code, out = run_diff(capsys, pack, "--exit-code", cases=tables)
        assert code == 1
        assert "stricter properties.yaml: org-memory-denied: added (memoryWork)" in out
        assert (
            "  [cedar+opa] case org::finance-bot save is refused despite consent\n"
            "      forward ['allowed']  ->  deny ['agent_memory_denied']"
        ) in out
        assert "case org::another agent keeps its memory" not in out
