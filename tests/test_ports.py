"""Handlers reach the state store only through their ports (narrow protocols the store satisfies)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIDECAR = Path(__file__).resolve().parents[1] / "sidecar"
#: Packages whose modules use the store through ``<package>/ports.py`` only.
PORTED = ("enforce", "decide", "control", "erasure")


def _store_uses(path: Path) -> list[int]:
    """Lines of ``path`` that read an attribute named ``store`` (``gov.store``, ``self._gov.store``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "store")


@pytest.mark.parametrize("package", PORTED)
def test_only_the_ports_module_touches_the_store(package: str) -> None:
    """Every other module of the package goes through a port, so what it may call is its protocol."""
    modules = sorted((SIDECAR / package).glob("*.py"))
    assert (SIDECAR / package / "ports.py") in modules
    found = {m.name: lines for m in modules if m.name != "ports.py" and (lines := _store_uses(m))}
    assert found == {}


def test_the_check_sees_a_direct_use(tmp_path: Path) -> None:
    """A module that reads gov.store is caught (the check above can fail)."""
    module = tmp_path / "handler.py"
    module.write_text("async def h(gov):\n    return await gov.store.get_scope('s')\n")
    assert _store_uses(module) == [2]
