"""The composition root: built once, imported by the top of the runtime only, never handed down whole."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIDECAR = Path(__file__).resolve().parents[1] / "sidecar"
#: Runtime modules that may import the composition root (dev tooling is not shipped and may).
ROOT_IMPORTERS = {"server.py"}
#: Packages whose modules receive their parts typed, never the root's Parts or the store object.
CONSUMERS = ("enforce", "decide", "control", "erasure")


def _runtime_modules() -> list[Path]:
    return sorted(p for p in SIDECAR.rglob("*.py") if "dev" not in p.relative_to(SIDECAR).parts)


def _imports_root(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "sidecar.root":
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "sidecar" and any(a.name == "root" for a in node.names):
            return True
        if isinstance(node, ast.Import) and any(a.name == "sidecar.root" for a in node.names):
            return True
    return False


def _store_uses(path: Path) -> list[int]:
    """Lines of ``path`` that read an attribute named ``store`` (``parts.store``, ``self._gov.store``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "store")


class TestComposition:
    def test_the_root_is_imported_by_the_server_only(self) -> None:
        """At most two runtime modules know the root: the root itself and ``memgov serve``."""
        importers = {p.relative_to(SIDECAR).as_posix() for p in _runtime_modules() if _imports_root(p)}
        assert importers == ROOT_IMPORTERS

    @pytest.mark.parametrize("package", CONSUMERS)
    def test_consumers_never_reach_the_store_object(self, package: str) -> None:
        """A stage, handler or step is given its facets; none reaches through a store object for more."""
        found = {m.name: lines for m in sorted((SIDECAR / package).glob("*.py")) if (lines := _store_uses(m))}
        assert found == {}

    def test_the_checks_can_fail(self, tmp_path: Path) -> None:
        """A module importing the root, or reading ``x.store``, is caught (the checks above can fail)."""
        module = tmp_path / "handler.py"
        module.write_text(
            "from sidecar.root import Parts\n\nasync def h(p):\n    return await p.store.get_scope('s')\n"
        )
        assert _imports_root(module)
        assert _store_uses(module) == [4]


#: The most lines one class may span: a class that grows past it is split by concern.
MAX_CLASS_LINES = 250


def test_no_class_spans_more_than_the_limit() -> None:
    """Every class in sidecar/ (dev tooling included) spans at most MAX_CLASS_LINES lines."""
    long = []
    for path in sorted(SIDECAR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                span = node.end_lineno - node.lineno + 1
                if span > MAX_CLASS_LINES:
                    long.append(f"{path.relative_to(SIDECAR)}:{node.lineno} {node.name} ({span} lines)")
    assert long == []
