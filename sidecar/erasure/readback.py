"""Step work every erasure kind shares: the bounded quiesce wait and the read-back that alone may verify.

``read_back`` deletes nothing it has not listed first, claims only what it read (SPEC D4) and
stamps the ledger from that: a namespace a write of unknown outcome may still reach defers the
whole verification (``Deferred``) until its lease ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from sidecar.contentstore.adapters import AdapterError
from sidecar.erasure.parts import ErasureParts
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.state.types import Erasure, Namespace, Scope

if TYPE_CHECKING:
    from sidecar.state.ledger import LedgerOps

log = get_logger("erasure")
_POLL_FIRST_S = 0.02
_POLL_MAX_S = 0.5


class Deferred(Exception):
    """Verification must wait: a write of unknown outcome may still land before ``until``."""

    def __init__(self, until: datetime) -> None:
        super().__init__("deferred")
        self.until = until


async def quiesce(p: ErasureParts, scope: Scope, erasure: Erasure, busy: Callable[[], Awaitable[int]]) -> None:
    """Wait, within ``erasure.quiesce_timeout_s``, until ``busy()`` counts no write under way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + p.quiesce_timeout_s
    delay = _POLL_FIRST_S
    while (left := await busy()) > 0:
        if loop.time() >= deadline:
            # Each such write re-checks its namespace after it lands and deletes its own row; a
            # write whose outcome stays unknown marks its namespace, and verification waits for it.
            log.warning("erasure.quiesce_timeout", erasure_id=erasure.erasure_id, scope_id=scope.scope_id, count=left)
            await p.audit.audit(
                "erasure",
                Reason.STALE_GENERATION.value,
                scope_id=scope.scope_id,
                erasure_id=erasure.erasure_id,
                operation="erasure.quiesce_timeout",
                now=p.clock(),
            )
            return
        await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
        delay = min(delay * 2, _POLL_MAX_S)


async def read_back(p: ErasureParts, scope: Scope, erasure: Erasure, namespaces: list[Namespace]) -> None:
    """Read back each namespace; clear again what is found; record every read-back; stamp the ledger.

    Raises Deferred while a write of unknown outcome may still reach one of them, and
    AdapterError(verification_failed) when rows survive a second delete.
    """
    eraser, agent = p.eraser, p.agents.query_name(scope.agent)
    waits = [n.possibly_until for n in namespaces if n.possibly_until is not None and n.possibly_until > p.clock()]
    if waits:
        raise Deferred(max(waits))
    for ns in namespaces:
        remaining = len(await eraser.remaining(agent, ns.storage_key))
        if remaining:
            # A late write, or a namespace retired by a concurrent erasure since the delete
            # step: delete once more; only rows that survive a second delete fail the erasure.
            await eraser.delete_namespace(agent, ns.storage_key)
            remaining = len(await eraser.remaining(agent, ns.storage_key))
        await p.erasures.record_readback(erasure.erasure_id, ns.ns_id, remaining, "namespace", p.clock())
        if remaining:
            raise AdapterError(Reason.VERIFICATION_FAILED)
    now = p.clock()
    read = {n.ns_id for n in namespaces}
    ids = [e.entry_id for e in await p.history.unswept_entries(scope.scope_id, sorted(read))]
    await stamp_erased(p.ledger, scope.scope_id, ids, now)
    await p.namespaces.mark_cleared(sorted(read), now)


async def stamp_erased(
    ledger: LedgerOps, scope_id: str, ids: list[str], now: datetime, *, tombstone: bool = True
) -> None:
    """Stamp entries a read-back found gone: unreadable (unless already), physically deleted, verified."""
    if tombstone:
        await ledger.tombstone(scope_id, ids, now)
    await ledger.mark_physically_deleted(ids, now)
    await ledger.mark_verified(ids, now)
