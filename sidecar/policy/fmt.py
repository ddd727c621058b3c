"""``memgov policy fmt``: one formatter for both languages (cedarpy's for Cedar, ``opa fmt`` for Rego)."""

from __future__ import annotations

import difflib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import cedarpy

from sidecar.policy.opa_server import tool_binary

#: Cedar line width and indent memgov formats with.
FORMAT_WIDTH, FORMAT_INDENT = 100, 2
FIX_HINT = "run `memgov policy fmt --write` (or `--diff` to see the changes)"


@dataclass(frozen=True)
class Unformatted:
    """A file whose formatted text differs: its pack-relative path and a unified diff."""

    file: str
    diff: str


def _diff(rel: str, text: str, formatted: str) -> str:
    return "".join(difflib.unified_diff(text.splitlines(True), formatted.splitlines(True), rel, rel + " (formatted)"))


def cedar_unformatted(root: Path, unparsable: list[str] | None = None) -> list[Unformatted]:
    """Cedar files of a pack that cedarpy would format differently.

    A file that does not parse cannot be formatted: it is left out, and named in ``unparsable``.
    """
    out = []
    for path in sorted((root / "cedar").glob("**/*.cedar")):
        text = path.read_text(encoding="utf-8")
        try:
            formatted = cedarpy.format_policies(text, FORMAT_WIDTH, FORMAT_INDENT)
        except ValueError:
            if unparsable is not None:
                unparsable.append(path.relative_to(root).as_posix())
            continue  # the parse step reports it, with file and line
        if formatted != text:
            rel = path.relative_to(root).as_posix()
            out.append(Unformatted(rel, _diff(rel, text, formatted)))
    return out


def rego_unformatted(root: Path) -> list[Unformatted]:
    """Rego files ``opa fmt`` would change, with a unified diff of what it would write."""
    rego = root / "rego"
    if not rego.is_dir():
        return []
    opa = tool_binary("opa")
    listed = subprocess.run([opa, "fmt", "--list", str(rego)], capture_output=True, text=True, timeout=120, check=False)
    out = []
    for name in listed.stdout.split():
        path = Path(name)
        proc = subprocess.run([opa, "fmt", str(path)], capture_output=True, text=True, timeout=120, check=False)
        rel = path.resolve().relative_to(root.resolve()).as_posix()
        out.append(Unformatted(rel, _diff(rel, path.read_text(encoding="utf-8"), proc.stdout)))
    return out


def write(root: Path) -> list[str]:
    """Format every file of both languages in place; return the files that changed."""
    changed = []
    for item in cedar_unformatted(root):
        path = root / item.file
        path.write_text(
            cedarpy.format_policies(path.read_text(encoding="utf-8"), FORMAT_WIDTH, FORMAT_INDENT), encoding="utf-8"
        )
        changed.append(item.file)
    rego = rego_unformatted(root)
    if rego:
        subprocess.run(
            [tool_binary("opa"), "fmt", "--write", str(root / "rego")], capture_output=True, timeout=120, check=True
        )
        changed += [item.file for item in rego]
    return changed
