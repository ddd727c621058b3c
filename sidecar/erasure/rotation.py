"""Namespace rotation: exact erasure over kagent's REST API by re-saving what stays (issue 16).

kagent v0.9.11's REST API can only delete a whole namespace. A ``rotate`` erasure therefore moves
everything the scope keeps into a fresh namespace and deletes the old one whole, on the same
state machine as every erasure:

- fenced: the scope's live namespace is frozen (still read, no longer written);
- quiesced: saves already under way into it are waited for, within the erasure bound;
- deleted: its live, unexpired, not forgotten entries are read through kagent's List,
  re-embedded the way the agent's runtime embeds (``contentstore/reembed.py``), saved into a freshly staged
  namespace of the same generation with their original hard expiry, and the scope is switched to
  it in one state transaction; then the old namespace is deleted whole;
- verified: the old namespace (and every retired one) reads back empty and the copies are present.

A crash before the switch abandons the staged namespace (the sweeper clears it) and copies again;
after it, only the delete is redone. A failure unfreezes the scope and keeps its old namespace
live: nothing unsafe happened, so unlike other erasures it never disables the scope. Texts and
vectors live in this process's memory for one step only; nothing of them is logged or stored.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sidecar import metrics
from sidecar.contentstore.adapters import AdapterError
from sidecar.contentstore.kagent import Created
from sidecar.contentstore.reembed import BATCH
from sidecar.contentstore.rotator import Rotator
from sidecar.erasure.parts import ErasureParts
from sidecar.erasure.readback import Deferred, quiesce, read_back
from sidecar.reasons import Reason
from sidecar.state.types import Erasure, LedgerEntry, Namespace, RunTaken, Scope, StateError

#: Copies made under one in-flight lease (each bounded by the memory timeout).
_SAVES_PER_LEASE = 10
#: Copies redone when entries were forgotten (or saves landed) while copying, before giving up.
_ATTEMPTS = 3
_DAY_S = 86400


def ttl_days(expires_at: datetime, now: datetime, max_days: int) -> int:
    """kagent's ``ttl_days`` for a copy: the whole days left until its unchanged hard expiry, at least 1.

    Rounded up, so kagent never drops a copy before memgov's expiry; the sweeper removes it within a
    day of that expiry either way.
    """
    left = (expires_at - now).total_seconds()
    return max(1, min(max_days, math.ceil(left / _DAY_S)))


class RotationSteps:
    """The work of each state of a ``rotate`` erasure; every step may be redone after a crash."""

    def __init__(self, parts: ErasureParts, rotator: Rotator) -> None:
        self._p, self._rotator = parts, rotator

    async def _frozen(self, erasure: Erasure) -> Namespace:
        """The live namespace this rotation froze; AdapterError(stale_generation) once it is not."""
        for ns in await self._p.rotations.rotation_namespaces(erasure.erasure_id):
            if ns.frozen_by == erasure.erasure_id and ns.state == "live":
                return ns
        # The scope moved on (consent changed) or the rotation was released: nothing left to rotate.
        raise AdapterError(Reason.STALE_GENERATION)

    async def fence(self, scope: Scope, erasure: Erasure) -> None:
        """Freeze the live namespace: still read, no longer written."""
        if await self._p.rotations.freeze_namespace(scope.scope_id, erasure.erasure_id) is None:
            raise AdapterError(Reason.STALE_GENERATION)  # disabled, or another rotation holds it

    async def quiesce(self, scope: Scope, erasure: Erasure) -> None:
        """Wait, within the erasure bound, for saves that were already writing into it."""
        frozen = await self._frozen(erasure)
        p = self._p
        await quiesce(
            p,
            scope,
            erasure,
            lambda: p.scopes.inflight_count(scope.scope_id, p.clock(), ns_id=frozen.ns_id, running=True),
        )

    async def delete(self, scope: Scope, erasure: Erasure) -> None:
        """Copy, switch (unless a previous run did), then delete the old and any abandoned namespace whole."""
        if erasure.ns_id is None:
            await self._copy_and_switch(scope, erasure)
        agent = self._p.agents.query_name(scope.agent)
        for ns in await self._p.rotations.rotation_namespaces(erasure.erasure_id):
            if ns.state == "retired":
                await self._p.eraser.delete_namespace(agent, ns.storage_key)

    async def _copy_and_switch(self, scope: Scope, erasure: Erasure) -> None:
        p = self._p
        frozen = await self._frozen(erasure)
        if await p.scopes.inflight_count(scope.scope_id, p.clock(), ns_id=frozen.ns_id, running=True):
            # A save outlived the quiesce bound: copying now could miss it. The namespace stays frozen.
            raise Deferred(p.clock() + timedelta(seconds=p.quiesce_timeout_s))
        for _ in range(_ATTEMPTS):
            try:
                staged = await p.rotations.stage_namespace(scope.scope_id, erasure.erasure_id, p.clock())
            except StateError:
                raise AdapterError(Reason.STALE_GENERATION) from None
            await self._copy(scope, erasure, frozen, staged)
            outcome = await p.rotations.switch_rotation(erasure.erasure_id, staged.ns_id, p.clock())
            if outcome == "switched":
                return
            if outcome == "superseded":
                raise AdapterError(Reason.STALE_GENERATION)
        # Entries kept being forgotten while this copied; the next rotation will try again.
        raise AdapterError(Reason.STALE_GENERATION)

    async def _copy(self, scope: Scope, erasure: Erasure, frozen: Namespace, staged: Namespace) -> None:
        """Re-save the live entries of ``frozen`` into ``staged``; remember the copies (not yet in the ledger)."""
        p, rot = self._p, self._rotator
        now = p.clock()
        live = [
            e
            for e in await p.history.unswept_entries(scope.scope_id, [frozen.ns_id])
            if e.tombstoned_at is None and e.physically_deleted_at is None and e.expires_at > now
        ]
        if len(live) > p.limits().max_entries:
            # SECURITY: re-embedding is bounded per rotation (cost), whatever the ledger holds.
            raise AdapterError(Reason.ENTRY_CAP_REACHED)
        texts = await rot.texts(p.agents.query_name(scope.agent), frozen.storage_key)
        present = [e for e in live if e.entry_id in texts]
        vectors: list[list[float]] = []
        if present:  # nothing kept, nothing to embed: no model needed
            model = rot.model(scope.agent)
            for start in range(0, len(present), BATCH):
                batch = [texts[e.entry_id] for e in present[start : start + BATCH]]
                vectors += await rot.reembedder.embed(model, batch)
                # Counted as embedding work, never charged to the person's hourly budget.
                metrics.MEMORY_OPERATIONS.labels("embedding").inc(len(batch))
                await p.rotations.touch_erasure(erasure.erasure_id, p.clock())
        moves: list[tuple[str, str | None, datetime, datetime]] = [
            (e.entry_id, None, e.created_at, e.expires_at) for e in live if e.entry_id not in texts
        ]
        pairs = list(zip(present, vectors, strict=True))
        for start in range(0, len(pairs), _SAVES_PER_LEASE):
            chunk = pairs[start : start + _SAVES_PER_LEASE]
            moves.extend(await self._save_chunk(scope, erasure, staged, chunk, texts))
        await p.rotations.record_moves(erasure.erasure_id, staged.ns_id, moves)

    async def _save_chunk(
        self,
        scope: Scope,
        erasure: Erasure,
        staged: Namespace,
        pairs: list[tuple[LedgerEntry, list[float]]],
        texts: dict[str, str],
    ) -> list[tuple[str, str | None, datetime, datetime]]:
        p = self._p
        lease = p.write_lease_s + len(pairs) * p.memory_timeout_s
        try:
            # SECURITY: into the namespace this runner staged, or not at all: a copy lands only where
            # the moves recorded for it say (another runner that restaged takes over; RunTaken).
            op_id, staged = await p.rotations.begin_copy(erasure.erasure_id, staged.ns_id, lease, p.clock())
        except RunTaken:
            raise
        except StateError:
            raise AdapterError(Reason.STALE_GENERATION) from None
        app = p.agents.app_name(scope.agent)
        moved: list[tuple[str, str | None, datetime, datetime]] = []
        unknown = False
        try:
            for entry, vector in pairs:
                ttl = ttl_days(entry.expires_at, p.clock(), p.limits().max_days)
                saved = await self._rotator.save(app, staged.storage_key, texts[entry.entry_id], vector, ttl)
                if not isinstance(saved, Created):
                    # SECURITY: the copy may still land; the staged namespace stays possibly written until
                    # the lease ends, so whoever clears it waits (SPEC D4).
                    unknown = True
                    until = p.clock() + timedelta(seconds=p.write_lease_s)
                    await p.scopes.write_outcome_unknown(op_id, until)
                    raise AdapterError(Reason.UPSTREAM_UNAVAILABLE)
                moved.append((entry.entry_id, saved.id, entry.created_at, entry.expires_at))
        finally:
            if not unknown:
                await p.scopes.end_write(op_id)
        await p.rotations.touch_erasure(erasure.erasure_id, p.clock())
        return moved

    async def verify(self, scope: Scope, erasure: Erasure) -> None:
        """The old namespace and every retired one read back empty; the copies read back present."""
        p = self._p
        # The namespaces not yet cleared, and the one this rotation froze even if a sweep cleared it since.
        mine = await p.rotations.rotation_namespaces(erasure.erasure_id)
        namespaces = list({n.ns_id: n for n in [*await p.namespaces.open_namespaces(scope.scope_id), *mine]}.values())
        await read_back(
            p, scope, erasure, [n for n in namespaces if n.state == "retired" or n.frozen_by == erasure.erasure_id]
        )
        target = next((n for n in namespaces if n.ns_id == erasure.ns_id and n.state == "live"), None)
        copies = [new for _, new in erasure.moves if new is not None]
        if target is None or not copies:
            return  # nothing copied, or the scope moved on since: its own erasure covers the copies
        found = len(await p.eraser.remaining(p.agents.query_name(scope.agent), target.storage_key, copies))
        await p.erasures.record_readback(erasure.erasure_id, target.ns_id, found, "moved", p.clock())
        if found != len(copies):
            raise AdapterError(Reason.VERIFICATION_FAILED)

    async def failed(self, scope: Scope | None, erasure: Erasure) -> None:
        """A failed rotation: unfreeze the live namespace, abandon what was staged (the sweeper clears it).

        Nothing unsafe happened: the old namespace stays live and writable again, and the scope enabled."""
        await self._p.rotations.release_rotation(erasure.erasure_id, self._p.clock())
