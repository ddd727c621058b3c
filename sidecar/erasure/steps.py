"""The work of each erasure state, one strategy per kind (rotation's is ``rotation.py``).

The machine advances ``requested → fenced → quiesced → deleted → verified``; reaching each state
means doing its step first. :func:`step_to` is the one table from a state to the step that
reaches it, and every strategy fills it: whole-scope erasures (forget-all, off, withdrawal,
offboarding) fence by retiring the live namespace and then delete and read back every namespace
the scope ever had; forget-one tombstones its entries (and every copy a rotation made of them)
and deletes and reads back those ids where the adapter can.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from sidecar.contentstore.adapters import AdapterError
from sidecar.erasure.parts import ErasureParts, audit_erasure
from sidecar.erasure.readback import quiesce, read_back, stamp_erased
from sidecar.logs import get_logger
from sidecar.reasons import Reason
from sidecar.state.types import Erasure, ErasureKind, ErasureState, LedgerEntry, Namespace, Scope

log = get_logger("erasure")

Step = Callable[[Scope, Erasure], Awaitable[None]]


class Steps(Protocol):
    """One erasure kind's work per state; each step is idempotent (a resumed erasure redoes the last)."""

    async def fence(self, scope: Scope, erasure: Erasure) -> None: ...

    async def quiesce(self, scope: Scope, erasure: Erasure) -> None: ...

    async def delete(self, scope: Scope, erasure: Erasure) -> None: ...

    async def verify(self, scope: Scope, erasure: Erasure) -> None: ...

    async def failed(self, scope: Scope | None, erasure: Erasure) -> None:
        """Make the scope safe before the failure is recorded."""
        ...


def step_to(steps: Steps, target: ErasureState) -> Step:
    """The step that reaches ``target`` (the one table from state to step)."""
    table: dict[ErasureState, Step] = {
        ErasureState.FENCED: steps.fence,
        ErasureState.QUIESCED: steps.quiesce,
        ErasureState.DELETED: steps.delete,
        ErasureState.VERIFIED: steps.verify,
    }
    return table[target]


class _Disables:
    """A failed erasure of personal memory leaves its scope disabled, with a reason code (never resumed)."""

    _p: ErasureParts

    async def failed(self, scope: Scope | None, erasure: Erasure) -> None:
        if scope is not None and scope.enabled:
            # SECURITY: the scope is disabled before the failure is recorded, so a crash in between
            # can never leave a failed erasure on an enabled scope.
            await self._p.scopes.disable(scope.scope_id, self._p.clock())


class WholeScopeSteps(_Disables):
    """Forget-all, off, withdrawal and offboarding: every entry, every namespace the scope ever had."""

    __slots__ = ("_p",)

    def __init__(self, parts: ErasureParts) -> None:
        self._p = parts

    async def fence(self, scope: Scope, erasure: Erasure) -> None:
        p, now = self._p, self._p.clock()
        # A disabled scope admits no write at any generation, so it is fenced already. Re-consent
        # is refused while an erasure is unfinished, so an enabled scope here was never fenced.
        if not scope.enabled:
            return
        if erasure.kind is ErasureKind.WITHDRAW:
            _, receipt = await p.scopes.withdraw(scope.scope_id, now)
            await audit_erasure(p, erasure, Reason.ALLOWED, "consent.withdraw", kind="consent", now=now)
            log.info(
                "consent.withdrawn",
                scope_id=scope.scope_id,
                receipt_id=receipt.receipt_id,
                generation=receipt.generation_after,
            )
        elif erasure.kind is ErasureKind.FORGET_ALL:
            await p.scopes.advance_generation(scope.scope_id, now)
        else:
            await p.scopes.disable(scope.scope_id, now)

    async def quiesce(self, scope: Scope, erasure: Erasure) -> None:
        """Wait for writes into retired namespaces that were already under way."""
        p = self._p
        live = scope.namespace.ns_id if scope.namespace is not None else None
        await quiesce(p, scope, erasure, lambda: p.scopes.inflight_count(scope.scope_id, p.clock(), except_ns=live))

    async def _retired(self, scope: Scope) -> list[Namespace]:
        """Every namespace of the scope except the live one: each storage key it can no longer write."""
        return [n for n in await self._p.namespaces.namespaces_of_scope(scope.scope_id) if n.state != "live"]

    async def delete(self, scope: Scope, erasure: Erasure) -> None:
        eraser, agent = self._p.eraser, self._p.agents.query_name(scope.agent)
        for ns in await self._retired(scope):
            # Over REST an empty namespace costs one read; the delete only runs where rows remain.
            if ns.state == "retired" and (eraser.exact or await eraser.remaining(agent, ns.storage_key)):
                await eraser.delete_namespace(agent, ns.storage_key)

    async def verify(self, scope: Scope, erasure: Erasure) -> None:
        """Every namespace the scope ever had but its live one reads back empty (SPEC D4)."""
        await read_back(self._p, scope, erasure, await self._retired(scope))


def _by_namespace(entries: Iterable[LedgerEntry]) -> dict[str | None, list[str]]:
    groups: dict[str | None, list[str]] = {}
    for e in entries:
        groups.setdefault(e.ns_id, []).append(e.entry_id)
    return groups


class EntrySteps(_Disables):
    """Forget-one: the entry and its rotation copies, by id; physically deleted where the adapter can."""

    __slots__ = ("_p",)

    def __init__(self, parts: ErasureParts) -> None:
        self._p = parts

    async def fence(self, scope: Scope, erasure: Erasure) -> None:
        # The entry, and every copy a rotation made of it, is unreadable through memgov from this
        # moment, whatever the adapter.
        await self._p.lineage.tombstone_forgotten(
            scope.scope_id, erasure.erasure_id, erasure.entry_ids, self._p.clock()
        )

    async def quiesce(self, scope: Scope, erasure: Erasure) -> None:
        return None  # the live namespace is not retired: nothing in flight can land in a dead one

    async def _entries(self, scope: Scope, erasure: Erasure) -> dict[Namespace, list[str]]:
        p = self._p
        groups = _by_namespace(await p.history.entries_by_id(scope.scope_id, erasure.entry_ids))
        by_id = {n.ns_id: n for n in await p.namespaces.namespaces_by_id(scope.scope_id, [g for g in groups if g])}
        return {by_id[ns_id]: ids for ns_id, ids in groups.items() if ns_id in by_id}

    async def delete(self, scope: Scope, erasure: Erasure) -> None:
        eraser = self._p.eraser
        if not eraser.exact:
            return  # tombstoned; physically deleted when its namespace is cleared
        for ns, ids in (await self._entries(scope, erasure)).items():
            await eraser.delete_entries(self._p.agents.query_name(scope.agent), ns.storage_key, ids)

    async def verify(self, scope: Scope, erasure: Erasure) -> None:
        p = self._p
        for ns, ids in (await self._entries(scope, erasure)).items():
            # Read-after-delete: never readable through memgov again, and gone from kagent when exact.
            if await p.ledger.filter_live(scope.scope_id, ns.ns_id, ids, p.clock()):
                raise AdapterError(Reason.VERIFICATION_FAILED)
            if p.eraser.exact:
                remaining = len(await p.eraser.remaining(p.agents.query_name(scope.agent), ns.storage_key, ids))
                await p.erasures.record_readback(erasure.erasure_id, ns.ns_id, remaining, "entries", p.clock())
                if remaining:
                    raise AdapterError(Reason.VERIFICATION_FAILED)
                await stamp_erased(p.ledger, scope.scope_id, ids, p.clock(), tombstone=False)


class NoRotation:
    """A rotation resumed where rotation is no longer configured: it fails, safely (nothing moved)."""

    async def _refuse(self, scope: Scope, erasure: Erasure) -> None:
        raise AdapterError(Reason.ERASURE_FAILED)

    fence = quiesce = delete = verify = _refuse

    async def failed(self, scope: Scope | None, erasure: Erasure) -> None:
        return None
