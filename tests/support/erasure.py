"""kagent's own memory table, as the erasure tests read it."""

from __future__ import annotations

from sidecar.dev.devstack import open_memory_store
from tests.support.harness import install_role, role_url


async def kagent_table(pg_url: str) -> str:
    """Create kagent's memory table (as kagent does at start), install the role; the role's URL."""
    table = await open_memory_store(pg_url)
    await table.close()
    await install_role(pg_url)
    return role_url(pg_url)
