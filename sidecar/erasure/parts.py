"""What the erasure machine, its steps and the sweepers use: the state facets they reach, the content
store's adapter and rotation handles, the agents' names, the clock and the erasure settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sidecar.clock import Clock
from sidecar.contentstore.adapters import EraseAdapter
from sidecar.contentstore.rotator import Rotator
from sidecar.identity.appname import Agents
from sidecar.policy.model import Limits
from sidecar.reasons import Reason
from sidecar.state.types import Erasure

if TYPE_CHECKING:
    from sidecar.state.audit import AuditOps, ErasureOps
    from sidecar.state.history import HistoryOps
    from sidecar.state.ledger import LedgerOps
    from sidecar.state.lineage import LineageOps
    from sidecar.state.namespaces import NamespaceOps
    from sidecar.state.rotations import RotationOps
    from sidecar.state.scopes import ScopeOps


@dataclass(frozen=True, slots=True)
class ErasureParts:
    """One bundle for the erasure package; ``root.py`` fills it once."""

    erasures: ErasureOps
    scopes: ScopeOps
    namespaces: NamespaceOps
    ledger: LedgerOps
    history: HistoryOps
    rotations: RotationOps
    lineage: LineageOps
    audit: AuditOps
    eraser: EraseAdapter
    #: Namespace rotation's handles (exact erasure over REST), when an embedding provider is configured.
    rotator: Rotator | None
    agents: Agents
    limits: Callable[[], Limits]
    clock: Clock
    #: The live policy pack's revision, named in erasure audit rows.
    revision: Callable[[], str | None]
    #: One runner per erasure across processes: its lease, renewed while it runs.
    run_lease_s: float
    #: The longest wait for writes already under way before deleting.
    quiesce_timeout_s: float
    #: A rotation's copies are saves like any other: their in-flight lease and call timeout.
    write_lease_s: float
    memory_timeout_s: float


async def audit_erasure(
    p: ErasureParts,
    erasure: Erasure,
    reason: Reason,
    operation: str | None = None,
    *,
    kind: str = "erasure",
    now: datetime | None = None,
) -> None:
    """The content-free audit row of an erasure, under the live pack's revision: its reaching ``reason``'s
    outcome in its current state, or the ``operation`` (of another audit ``kind``) done for it."""
    await p.audit.audit(
        kind,
        reason.value,
        scope_id=erasure.scope_id,
        erasure_id=erasure.erasure_id,
        operation=operation or f"erasure.{erasure.kind}.{erasure.state}",
        policy_revision=p.revision(),
        now=p.clock() if now is None else now,
    )
