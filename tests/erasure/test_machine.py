"""The erasure state machine: quiescing in-flight writes, resuming from every state, concurrent runners."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sidecar.root import erasure_engine
from sidecar.state.types import ErasureKind
from tests.support.harness import Harness, harness
from tests.support.wait import until

STATES = ["requested", "fenced", "quiesced", "deleted"]


async def _erasure_state(h: Harness, scope_id: str) -> str | None:
    history = await h.parts.store.erasures.erasures_of_scope(scope_id, limit=1)
    return history[0].state if history else None


class TestQuiesce:
    async def test_erasure_waits_for_a_write_of_the_old_generation(self, sh: Harness) -> None:
        """Deletion starts only after the in-flight write of the fenced generation has finished."""
        scope_id = await sh.scope()
        await sh.saved(scope_id, "likes green tea")
        op = await sh.begin_write(scope_id, 1, 30.0)
        withdrawal = asyncio.create_task(sh.client().withdraw(scope_id))

        async def fenced() -> bool:
            return await _erasure_state(sh, scope_id) == "fenced"

        await until(fenced)
        released_at = sh.parts.clock()
        await sh.parts.store.scopes.end_write(op)
        record = (await withdrawal)["erasure"]
        quiesced = next(s["at"] for s in record["steps"] if s["state"] == "quiesced")
        assert quiesced >= released_at.isoformat().replace("+00:00", "Z")
        assert record["state"] == "verified" and await sh.rows(scope_id) == []

    async def test_the_wait_is_bounded_and_the_overrun_is_audited(self, tmp_path: Path) -> None:
        """A write still in flight after quiesce_timeout_s no longer holds the erasure; an audit row says so."""
        async with harness(tmp_path, store_url=None, erasure={"quiesce_timeout_s": 0.2}) as h:
            scope_id = await h.scope()
            await h.begin_write(scope_id, 1, 300.0)
            record = (await h.client().withdraw(scope_id))["erasure"]
            assert record["state"] == "verified"
            rows = await h.parts.store.audit_log.audit_rows(scope_id)
            assert any(r["operation"] == "erasure.quiesce_timeout" and r["reason"] == "stale_generation" for r in rows)

    async def test_forget_all_does_not_wait_for_writes_of_the_new_generation(self, sh: Harness) -> None:
        """Only fenced generations are quiesced: a write already at the new generation is not waited for."""
        scope_id = await sh.scope()
        await sh.parts.store.scopes.advance_generation(scope_id, sh.parts.clock())  # generation 2, still enabled
        await sh.begin_write(scope_id, 2, 300.0)
        scope = await sh.parts.store.scopes.get_scope(scope_id)
        assert scope is not None
        erasure = await sh.parts.store.erasures.create_erasure(
            scope_id, ErasureKind.FORGET_ALL.value, [], "rest", "subject", sh.parts.clock()
        )
        await sh.parts.store.erasures.advance_erasure(erasure.erasure_id, "fenced", sh.parts.clock())
        done = await erasure_engine(sh.parts).run(erasure.erasure_id)
        assert done.state == "verified"


class TestResume:
    @pytest.mark.parametrize("stopped_at", STATES)
    @pytest.mark.parametrize(
        "kind", [ErasureKind.WITHDRAW, ErasureKind.FORGET_ALL, ErasureKind.OFF, ErasureKind.FORGET_ONE]
    )
    async def test_an_erasure_stopped_after_any_step_completes_on_resume(
        self, any_adapter: Harness, kind: ErasureKind, stopped_at: str
    ) -> None:
        """A fresh engine (a restarted process) resumes from the recorded state and ends verified and empty."""
        h = any_adapter
        scope_id = await h.scope()
        entry = await h.saved(scope_id, "likes green tea")
        scope = await h.parts.store.scopes.get_scope(scope_id)
        assert scope is not None
        first = erasure_engine(h.parts)
        erasure = await first.request(scope, kind, "subject", [entry] if kind is ErasureKind.FORGET_ONE else [])
        await first.run(erasure.erasure_id, until=stopped_at)
        (resumed,) = await erasure_engine(h.parts).resume_all()
        assert resumed.state == "verified"
        assert [s for s, _ in resumed.steps] == ["requested", "fenced", "quiesced", "deleted", "verified"]
        if kind in (ErasureKind.FORGET_ALL, ErasureKind.FORGET_ONE):
            assert (await h.client().inspect(scope_id, h.context()))["entries"] == []
        pending_over_rest = kind is ErasureKind.FORGET_ONE and not h.parts.eraser.exact
        assert len(await h.rows(scope_id)) == (1 if pending_over_rest else 0)

    @pytest.mark.kagent
    async def test_two_runners_of_one_erasure_record_each_step_once(self, any_adapter: Harness) -> None:
        """Replicas resuming the same erasure at once both finish it; the compare-and-set keeps steps unique."""
        h = any_adapter
        scope_id = await h.scope()
        await h.saved(scope_id, "likes green tea")
        scope = await h.parts.store.scopes.get_scope(scope_id)
        assert scope is not None
        erasure = await erasure_engine(h.parts).request(scope, ErasureKind.OFF, "subject")
        results = await asyncio.gather(
            erasure_engine(h.parts).run(erasure.erasure_id), erasure_engine(h.parts).run(erasure.erasure_id)
        )
        assert {r.state for r in results} == {"verified"}
        final = await h.parts.store.erasures.get_erasure(erasure.erasure_id)
        assert final is not None and [s for s, _ in final.steps] == [
            "requested",
            "fenced",
            "quiesced",
            "deleted",
            "verified",
        ]
        assert await h.rows(scope_id) == []
