"""kagent's own memory table, as the erasure tests read it; a gateway's sweep pass run by hand."""

from __future__ import annotations

from sidecar.dev.devstack import open_memory_store
from sidecar.erasure.machine import ErasureEngine
from sidecar.erasure.sweeper import SweepReport, sweep_once
from sidecar.root import Parts, erasure_parts, sweep_plan
from tests.support.harness import install_role, role_url


async def sweep(parts: Parts, engine: ErasureEngine | None = None) -> SweepReport:
    """One sweep pass of a gateway's parts, as its sweepers run it."""
    return await sweep_once(erasure_parts(parts), sweep_plan(parts), engine)


async def kagent_table(pg_url: str) -> str:
    """Create kagent's memory table (as kagent does at start), install the role; the role's URL."""
    table = await open_memory_store(pg_url)
    await table.close()
    await install_role(pg_url)
    return role_url(pg_url)
