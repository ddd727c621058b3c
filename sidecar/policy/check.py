"""``memgov policy check``: parse, schema-validate, format-check and lint a pack, step by step."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import cedarpy

from sidecar.policy.cedar import FORMAT_WIDTH, compile_pack
from sidecar.policy.opa_bundle import check_layout
from sidecar.policy.opa_server import ToolNotFound, tool_binary
from sidecar.policy.pack import Pack, PackError, read_pack


@dataclass(frozen=True)
class Step:
    """The outcome of one check."""

    name: str
    ok: bool
    detail: str = ""


def _cedar_format(pack: Pack) -> Step:
    unformatted = [
        rel for rel, text in sorted(pack.select("cedar", ".cedar").items())
        if cedarpy.format_policies(text, FORMAT_WIDTH, 2) != text
    ]
    return Step("cedar format", not unformatted, ", ".join(unformatted) or "")


def _tool(name: str, args: list[str], step: str) -> Step:
    try:
        binary = tool_binary(name)
    except ToolNotFound as exc:
        return Step(step, False, str(exc))
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=300, check=False)
    # Tool output names policy files and lines only: policy text is ours, never request data.
    detail = (proc.stdout + proc.stderr).strip()
    return Step(step, proc.returncode == 0, detail if proc.returncode else "")


def check_pack(root: Path) -> list[Step]:
    """Run every check; later steps still run after an earlier one fails, except without a pack."""
    try:
        pack = read_pack(root)
    except PackError as exc:
        return [Step("data files", False, str(exc))]
    steps = [Step("data files", True)]
    try:
        compile_pack(pack)
        steps.append(Step("cedar parse + schema validation + @id", True))
    except PackError as exc:
        steps.append(Step("cedar parse + schema validation + @id", False, str(exc)))
    steps.append(_cedar_format(pack))
    try:
        check_layout(pack.select("rego", ".rego"))
        steps.append(Step("rego package layout", True))
    except PackError as exc:
        steps.append(Step("rego package layout", False, str(exc)))
    rego = str(Path(root) / "rego")
    steps.append(_tool("opa", ["fmt", "--list", "--fail", rego], "opa fmt"))
    steps.append(_tool("opa", ["check", "--strict", rego], "opa check --strict"))
    steps.append(_tool("regal", ["lint", "--format", "compact", rego], "regal lint"))
    return steps
