"""scripts/unused_deps.py (make lint): a declared dependency that no file imports fails the check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "unused_deps.py"


def _check(pyproject: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(pyproject)], capture_output=True, text=True, timeout=120, check=False
    )


def _project(root: Path, dependencies: list[str], test_extra: list[str], source: str) -> Path:
    """A small project: its pyproject.toml and one module under src/."""
    listed = ", ".join(f'"{d}"' for d in dependencies)
    extra = ", ".join(f'"{d}"' for d in test_extra)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(
        f'[project]\nname = "demo"\nversion = "0"\ndependencies = [{listed}]\n'
        f"[project.optional-dependencies]\ntest = [{extra}]\n"
    )
    (root / "src").mkdir()
    (root / "src" / "mod.py").write_text(source)
    return pyproject


class TestUnusedDeps:
    @pytest.mark.parametrize(
        ("dependencies", "test_extra", "source", "unused"),
        [
            (["PyYAML>=6", "aiohttp"], [], "import yaml\n", ["aiohttp (dependencies)"]),
            (["PyYAML", "PyJWT[crypto]>=2"], [], "import yaml\nfrom jwt import decode\n", []),
            (["opentelemetry-sdk"], [], "from opentelemetry import trace\n", ["opentelemetry-sdk (dependencies)"]),
            (["opentelemetry-sdk"], [], "from opentelemetry.sdk.trace import TracerProvider\n", []),
            (["orjson"], ["demo[fast]", "ruff==1", "pytest-timeout", "types-PyYAML"], "import orjson\n", []),
            (["orjson"], ["hypothesis"], "def f():\n    import orjson\n", ["hypothesis (extra test)"]),
        ],
        ids=["unused-runtime", "import-names-from-metadata", "namespace-sibling", "namespace-own", "tools", "extra"],
    )
    def test_names_every_declared_dependency_nothing_imports(
        self, tmp_path: Path, dependencies: list[str], test_extra: list[str], source: str, unused: list[str]
    ) -> None:
        """Distributions map to their import names; tools are allowed; anything else unimported fails."""
        result = _check(_project(tmp_path, dependencies, test_extra, source))
        named = [
            line.split(": ", 1)[1].removesuffix(" is declared but never imported")
            for line in result.stderr.splitlines()
            if "declared but never imported" in line
        ]
        assert (result.returncode, named) == (1 if unused else 0, [u.lower() for u in unused])

    def test_this_repository_declares_nothing_unused(self) -> None:
        """Every dependency pyproject.toml declares is imported somewhere, or is a listed tool."""
        result = _check(REPO / "pyproject.toml")
        assert result.returncode == 0, result.stderr
