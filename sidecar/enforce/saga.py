"""The write half of one admitted save: held slots, the in-flight record, the rows kagent created (SPEC D4).

An admitted save holds one entry slot per fact and an in-flight record (so an erasure waits for it).
:class:`WriteSaga` is used as ``async with`` around forwarding the facts one by one, and tells the
state store how each ended:

- a row kagent created fills its slot (the last fill also ends the in-flight record, in the
  same state call that checks the namespace is still live);
- a refused save, or a namespace withdrawn meanwhile, is undone: created rows become unreadable at
  once (physically deleted where the adapter can), unused slots are released;
- a failure or cancellation while a save is on its way leaves that save's slot and the in-flight
  record in place until the lease ends, and marks the namespace possibly written: the row may still
  commit in kagent, so an erasure waits for it or clears again afterwards.

Its phase is one value: ``HELD`` (nothing on its way), ``SENDING`` (a save's outcome unknown),
``FINISHED`` (the in-flight record ended with the last fill).
"""

from __future__ import annotations

import enum
from datetime import timedelta
from types import TracebackType

from sidecar.contentstore.adapters import AdapterError
from sidecar.enforce.memory import MemoryParts
from sidecar.state.types import Namespace, Scope


class Phase(enum.Enum):
    HELD = "held"
    SENDING = "sending"
    FINISHED = "finished"


class WriteSaga:
    """The slots and in-flight record of one admitted write, settled whatever happens to the forwarding."""

    __slots__ = ("_op_id", "_p", "_slots", "created", "ns", "phase", "scope")

    def __init__(self, parts: MemoryParts, scope: Scope, ns: Namespace, op_id: str, slots: list[str]) -> None:
        self._p, self.scope, self.ns, self._op_id, self._slots = parts, scope, ns, op_id, slots
        self.created: list[str] = []
        self.phase = Phase.HELD

    async def __aenter__(self) -> WriteSaga:
        return self

    def sending(self) -> None:
        """A save is about to be sent: from here its outcome is unknown until it is answered."""
        self.phase = Phase.SENDING

    def answered(self) -> None:
        """The save in flight was answered, or certainly never left (its connection never opened)."""
        self.phase = Phase.HELD

    async def landed(self, entry_id: str, lifetime: timedelta, *, last: bool) -> bool:
        """kagent created ``entry_id``: fill the next slot. On the last fact the fill, the check that the
        namespace is still live and the end of the in-flight record are one state call; False when the
        namespace was withdrawn or retired meanwhile (the caller undoes the write)."""
        self.phase = Phase.HELD
        at = self._p.clock()
        fill = (self._slots[len(self.created)], entry_id, at, at + lifetime)
        self.created.append(entry_id)
        if not last:
            await self._p.ledger.fill_entry(*fill)
            return True
        if await self._p.admission.finish_write(self._op_id, self.scope.scope_id, self.ns.ns_id, [fill]):
            self.phase = Phase.FINISHED
            return True
        return False

    async def undo(self, *, dead_namespace: bool = False) -> None:
        """Make every created row unreadable now and release the slots no row filled."""
        await self._roll_back(self._slots[len(self.created) :], dead_namespace=dead_namespace)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        p = self._p
        if exc_type is not None:
            # The save in flight (if any) keeps its slot: it may have landed. The others are undone.
            in_doubt = self.phase is Phase.SENDING
            await self._roll_back(self._slots[len(self.created) + int(in_doubt) :])
            if in_doubt:
                # SECURITY: that save may still commit in kagent. The in-flight record stays until its
                # lease ends and the namespace is marked possibly written (SPEC D4).
                until = p.clock() + timedelta(seconds=p.write_lease_s)
                await p.scopes.write_outcome_unknown(self._op_id, until)
        if self.phase is Phase.HELD:
            await p.scopes.end_write(self._op_id)

    async def _roll_back(self, unused_slots: list[str], *, dead_namespace: bool = False) -> None:
        p, scope, created = self._p, self.scope, self.created
        if unused_slots:
            await p.ledger.release_entries(unused_slots)
        if not created:
            return
        await p.ledger.tombstone(scope.scope_id, created, p.clock())
        agent, eraser = p.agents.query_name(scope.agent), p.eraser
        try:
            if dead_namespace:
                await eraser.delete_namespace(agent, self.ns.storage_key)  # a retired namespace is never read
            elif eraser.exact:
                await eraser.delete_entries(agent, self.ns.storage_key, created)
            else:
                return  # rest adapter: tombstoned, physical deletion pending until the namespace is cleared
            await p.ledger.mark_physically_deleted(created, p.clock())
        except AdapterError:
            pass  # tombstoned already; the sweepers retry the physical deletion
