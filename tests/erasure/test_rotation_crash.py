"""Rotation crash safety: SIGKILL a gateway process in every rotation step, restart it, the rotation completes.

The rotation runs after a forget-one, under the REST adapter with an embedding provider. Each
crash point is reached without a hook in the gateway: a share lock on the scope row (stuck
before ``fenced``), an in-flight write into the live namespace (``fenced``), the gate holding a
copy into the staged namespace (``quiesced``, before the switch), the delete of the old
namespace (``quiesced``, after the switch) or its read-back (``deleted``). Whatever the crash
point, the restarted gateway ends with one live namespace, none staged, every kept entry in it
exactly once, nothing else in kagent, and the forget-one evidence complete.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from sidecar.contentstore.kagent import namespace_query
from tests.erasure.test_crash import Crash, _read_after_delete, _scope_with_memory, crashing, locked_scope_row
from tests.support.harness import AGENT, APP
from tests.support.upstream import Upstream, runtime_headers
from tests.support.wait import until

STUCK = ["requested", "fenced", "copying", "switched", "deleted"]


@pytest.fixture
async def crash(
    tmp_path: Path, pg_url: str, upstream: Upstream, request: pytest.FixtureRequest
) -> AsyncIterator[Crash]:
    """A gateway process with rotation on and short write leases, on PostgreSQL, in front of a gated stand-in
    (or real kagent)."""
    async with crashing(
        tmp_path,
        pg_url,
        upstream,
        request,
        rotation=True,
        enforce={"write_lease_s": 2},
        upstream_settings={"memory_timeout_s": 1.0},
    ) as c:
        yield c


def _hold(c: Crash, stuck_in: str) -> None:
    """Make the gate hold the request of a crash point (the others are held in the state store)."""
    if stuck_in == "copying":
        c.gate.hold = lambda r: (
            r.method == "POST" and r.path == "/api/memories/sessions" and any(m == "GET" for m, _ in c.gate.seen)
        )
    elif stuck_in == "switched":
        c.gate.hold = lambda r: r.method == "DELETE"
    elif stuck_in == "deleted":
        c.gate.hold = _read_after_delete(c)


class TestKillDuringRotation:
    @pytest.mark.kagent
    @pytest.mark.parametrize("stuck_in", STUCK)
    async def test_a_killed_rotation_completes_after_restart(self, crash: Crash, stuck_in: str) -> None:
        """Wherever the process died, the restarted gateway verifies the rotation; never two live namespaces."""
        c = crash
        scope_id = await _scope_with_memory(c)  # "likes green tea", "lives in Lisbon"
        entries = {e.entry_id: e for e in await c.store.ledger.entries_of_scope(scope_id)}
        doomed = next(iter(entries))
        live_ns = (await c.store.scopes.get_scope(scope_id)).namespace  # type: ignore[union-attr]  # the scope exists
        assert live_ns is not None
        lock = op = None
        if stuck_in == "requested":
            # Blocks the freeze (a row lock for update) but not the forget-one's share lock.
            lock = await locked_scope_row(c.state_url, scope_id, "FOR SHARE")
        elif stuck_in == "fenced":
            op = await c.store.scopes.begin_write(scope_id, 1, live_ns.ns_id, 600.0, datetime.now(UTC))
        _hold(c, stuck_in)
        forgetting = asyncio.create_task(c.api().forget(scope_id, doomed))

        async def reached() -> bool:
            rotations = [e for e in await c.store.erasures.erasures_of_scope(scope_id) if e.kind == "rotate"]
            if not rotations:
                return False
            state, switched = rotations[0].state, rotations[0].ns_id is not None
            want = {
                "requested": ("requested", False),
                "fenced": ("fenced", False),
                "copying": ("quiesced", False),
                "switched": ("quiesced", True),
                "deleted": ("deleted", True),
            }[stuck_in]
            held = stuck_in in ("requested", "fenced") or c.gate.arrived.is_set()
            return held and (state, switched) == want

        await until(reached)
        await c.gp.kill()
        with pytest.raises(aiohttp.ClientError):
            await forgetting
        if lock is not None:
            await lock.close()
        if op is not None:
            await c.store.scopes.end_write(op)
        staged = [n for n in await c.store.namespaces.namespaces_of_scope(scope_id) if n.state == "staged"]
        c.gate.hold = None
        c.gate.release.set()  # a held copy now commits into the staged namespace, as kagent would
        if stuck_in == "copying":
            (orphan,) = staged

            async def landed() -> bool:
                return any(r.user_id == orphan.storage_key for r in await c.stack.store.rows())

            await until(landed)
        await c.gp.start()

        async def rotated() -> bool:
            rotations = [e for e in await c.store.erasures.erasures_of_scope(scope_id) if e.kind == "rotate"]
            return bool(rotations) and rotations[0].state == "verified"

        await until(rotated, timeout_s=60)  # a copy that may have landed is waited for, then cleared
        (rotation,) = [e for e in await c.store.erasures.erasures_of_scope(scope_id) if e.kind == "rotate"]
        assert [s for s, _ in rotation.steps] == ["requested", "fenced", "quiesced", "deleted", "verified"]
        namespaces = await c.store.namespaces.namespaces_of_scope(scope_id)
        assert [n.state for n in namespaces].count("live") == 1 and "staged" not in {n.state for n in namespaces}
        (live,) = [n for n in namespaces if n.state == "live"]
        rows = [r for r in await c.stack.store.rows() if (r.user_id or "").startswith(f"mgs1.{scope_id}.")]
        assert [(r.content, r.user_id, r.agent_name) for r in rows] == [("lives in Lisbon", live.storage_key, APP)]
        assert live.ns_id != live_ns.ns_id and live.storage_key != live_ns.storage_key
        async with c.http.get(
            c.stack.kagent_url + namespace_query(APP, live_ns.storage_key), headers=runtime_headers(c.upstream, AGENT)
        ) as resp:
            assert await resp.json() == []
        if stuck_in == "copying":  # the orphaned staged namespace was retired, waited for, cleared and read back
            assert [n.state for n in namespaces if n.ns_id == orphan.ns_id] == ["cleared"]
            assert orphan.ns_id in {ns_id for ns_id, _, found, _ in rotation.readbacks if found == 0}
        forget = next(e for e in await c.store.erasures.erasures_of_scope(scope_id) if e.kind == "forget_one")
        record = await c.api().erasure(forget.erasure_id)
        assert (record["state"], record["physical_deletion"]) == ("verified", "complete")
