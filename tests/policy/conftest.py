"""Fixtures for the policy stage: valid inputs, pack copies, real OPA servers on loopback."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.policy.cases import build_input, load_bases
from sidecar.policy.model import DecisionInput
from sidecar.policy.pack import read_pack
from tests.support.policy import (
    CASES_DIR,
    PACK_DIR,
    PERMIT_ALL_CEDAR,
    PERMIT_ALL_REGO,
    MakeInput,
    OpaServers,
)


@pytest.fixture(scope="session")
def make_input() -> MakeInput:
    """Build a valid input from a policy-tests base name plus dotted-path changes."""
    pack = read_pack(PACK_DIR)
    bases = load_bases(CASES_DIR, pack)

    def make(base: str, changes: dict[str, Any] | None = None) -> DecisionInput:
        return build_input(bases, base, changes)

    return make


@pytest.fixture
def pack_copy(tmp_path: Path) -> Path:
    """A private copy of the reference pack that a test may edit."""
    dest = tmp_path / "policies"
    shutil.copytree(PACK_DIR, dest)
    return dest


@pytest.fixture
def permit_all_pack(pack_copy: Path) -> Path:
    """The reference pack's schema and data with policies that permit everything, in both languages."""
    for path in [*pack_copy.glob("cedar/*.cedar"), *pack_copy.rglob("rego/**/*.rego")]:
        path.unlink()
    (pack_copy / "cedar" / "permit_all.cedar").write_text(PERMIT_ALL_CEDAR)
    (pack_copy / "rego" / "memgov" / "decision" / "permit_all.rego").write_text(PERMIT_ALL_REGO)
    return pack_copy


@pytest.fixture
def opa() -> Iterator[OpaServers]:
    """OPA servers for one test, stopped at its end."""
    servers = OpaServers()
    try:
        yield servers
    finally:
        servers.stop_all()
