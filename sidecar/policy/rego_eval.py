"""Offline Rego evaluation for the authoring tools: many inputs in one ``opa eval``, rule coverage, a trace.

The tools (test, diff, explain) run the pack's Rego files as written, through the pinned ``opa``
binary, without a server: one process evaluates every input, and ``--coverage`` tells which
``deny`` rules fired (a rule fired when its head was covered). The gateway itself never uses this.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Final

from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.opa import PACKAGE, RULE, parse_verdict
from sidecar.policy.opa_server import tool_binary
from sidecar.policy.outcome import Verdict
from sidecar.policy.pack import Pack, PackError
from sidecar.policy.rules import Site, rego_sites

_QUERY: Final = f"[[i, r] | some i, x in data.memgov_tool_inputs; r := data.{PACKAGE}.{RULE} with input as x]"


class RegoEval:
    """The Rego half of one pack, written to a private folder and evaluated with ``opa eval``."""

    def __init__(self, pack: Pack) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="memgov-eval-")
        self.root = Path(self._tmp.name)
        for rel, text in pack.select("rego", ".rego").items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text, encoding="utf-8")
        self.sites = rego_sites(pack)

    def close(self) -> None:
        """Remove the private copy."""
        self._tmp.cleanup()

    def _eval(self, inputs: list[dict[str, Any]], *extra: str, query: str = _QUERY) -> dict[str, Any]:
        data = self.root / "inputs.json"
        data.write_text(json.dumps({"memgov_tool_inputs": inputs}), encoding="utf-8")
        proc = subprocess.run(
            [
                tool_binary("opa"),
                "eval",
                "--format",
                "json",
                *extra,
                "-d",
                str(self.root / "rego"),
                "-d",
                str(data),
                query,
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if proc.returncode != 0:
            detail = (proc.stdout + proc.stderr).replace(f"{self.root}/", "").strip()
            raise PackError(f"opa eval failed:\n{detail}", file="rego/", step="rego")
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    @staticmethod
    def _verdicts(out: dict[str, Any], count: int) -> list[Verdict | None]:
        rows = out.get("result", [{}])[0].get("expressions", [{}])[0].get("value", [])
        found: list[Verdict | None] = [None] * count
        for index, value in rows:
            try:
                found[index] = parse_verdict({"result": value})
            except EngineUnavailable:
                found[index] = None
        return found

    def probe(self, inputs: list[dict[str, Any]], module: str, rule: str) -> list[list[Any]]:
        """The value of ``rule`` (of the extra Rego ``module``, in the pack's package) for each input."""
        extra = self.root / "memgov_probe.rego"
        extra.write_text(f"package {PACKAGE}\n\n{module}", encoding="utf-8")
        try:
            query = f"[v | some x in data.memgov_tool_inputs; v := data.{PACKAGE}.{rule} with input as x]"
            out = self._eval(inputs, "-d", str(extra), query=query)
        finally:
            extra.unlink()
        values: list[list[Any]] = out.get("result", [{}])[0].get("expressions", [{}])[0].get("value", [])
        return values

    def verdicts(self, inputs: list[dict[str, Any]]) -> list[Verdict | None]:
        """One verdict per input; None where the pack gave no usable answer (the gateway would deny)."""
        return self._verdicts(self._eval(inputs), len(inputs)) if inputs else []

    def covered(self, inputs: list[dict[str, Any]]) -> tuple[list[Verdict | None], list[Site], set[tuple[str, int]]]:
        """Verdicts, the deny rules that fired for at least one input, and every covered (file, line)."""
        out = self._eval(inputs, "--coverage")
        lines: set[tuple[str, int]] = set()
        heads: set[tuple[str, int]] = set()
        for path, report in out.get("coverage", {}).get("files", {}).items():
            # OPA reports the path as given, sometimes without its leading "/": cut at our folder name.
            rel = path.split(self.root.name + "/", 1)[-1]
            for span in report.get("covered", []):
                start, end = span["start"], span["end"]
                lines.update((rel, row) for row in range(start["row"], end["row"] + 1))
                if start.get("col") == 1:
                    heads.add((rel, start["row"]))
        fired = [s for s in self.sites if (s.file, s.line) in heads]
        return self._verdicts(out, len(inputs)), fired, lines
