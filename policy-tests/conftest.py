"""A real OPA server on loopback serving the reference Rego pack as a bundle, shared by the case tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.policy.opa_server import start_opa

PACK_DIR = Path(__file__).resolve().parent.parent / "policies"


@pytest.fixture(scope="session")
def reference_opa_url() -> Iterator[str]:
    """URL of a real OPA server serving the reference Rego pack."""
    server = start_opa(PACK_DIR)
    try:
        yield server.url
    finally:
        server.stop()
