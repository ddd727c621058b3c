"""Namespace rotation (issue 16): forget-one and hard expiry become exact over REST with an embedding provider."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY

from sidecar.dev.devstack import DbFault
from sidecar.dev.devstack.embedding import EmbeddingFaults
from sidecar.dev.devstack.vectors import embed_text
from sidecar.root import erasure_engine
from sidecar.state.types import Erasure, ErasureKind
from tests.support.erasure import sweep
from tests.support.harness import AGENT, APP, MODEL, Harness, harness, kagent_refuses
from tests.support.sentinel import capture_sinks, make_sentinel
from tests.support.upstream import Upstream, runtime_headers
from tests.support.wait import until


@pytest.fixture
async def rot(tmp_path: Path, upstream: Upstream, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    """A gateway with the REST adapter and an embedding provider, the agent's model pinned in settings, in front
    of the stand-in (or, for tests marked ``kagent``, kagent v0.9.11 itself)."""
    async with harness(
        tmp_path,
        store_url=None,
        rotation="pinned",
        upstream=upstream,
        pg_server=request.getfixturevalue("pg_server") if upstream.real else None,
        upstream_settings={"embedding_timeout_s": 1.0},
    ) as running:
        yield running


def _close(a: Sequence[float], b: Sequence[float]) -> bool:
    """Equal as kagent stores them (float32)."""
    return len(a) == len(b) and all(abs(x - y) < 1e-6 for x, y in zip(a, b, strict=True))


def _runtime(h: Harness, key: str) -> dict[str, str]:
    """The headers the agent runtime sends on a memory call (a bearer in kagent's trusted-proxy mode)."""
    return {"X-Agent-Name": APP, "X-User-Id": key, **runtime_headers(h.upstream, AGENT)}


def _processed(raw: Sequence[float]) -> list[float]:
    """What kagent's runtimes store for a provider vector longer than 768: cut, then L2-normalised."""
    cut = list(raw[:768])
    norm = math.sqrt(sum(x * x for x in cut))
    return [x / norm for x in cut]


async def _save_vector(
    h: Harness, scope_id: str, text: str, vector: list[float], *, ttl_days: int | None = None
) -> tuple[int, Any]:
    """The runtime's save_memory with a vector it embedded itself (and the ttl it asks for)."""
    key = h.session_key(scope_id, 1)
    body: dict[str, Any] = {"agent_name": APP, "user_id": key, "content": text, "vector": vector}
    if ttl_days is not None:
        body["ttl_days"] = ttl_days
    async with h.http.post(h.gw.data_url + "/api/memories/sessions", json=body, headers=_runtime(h, key)) as resp:
        return resp.status, await resp.json(content_type=None)


async def _ranked(h: Harness, scope_id: str, query: str) -> list[tuple[str, float]]:
    """(content, score) of a search by the runtime's own query vector, best first."""
    key = h.session_key(scope_id, 1)
    body = {"agent_name": APP, "user_id": key, "vector": embed_text(query), "limit": 10, "min_score": 0.0}
    async with h.http.post(h.gw.data_url + "/api/memories/search", json=body, headers=_runtime(h, key)) as resp:
        assert resp.status == 200
        return [(r["content"], r["score"]) for r in await resp.json()]


async def _budget_rows(h: Harness) -> list[Any]:
    async with h.parts.store.db.tx("read") as tx:
        return [tuple(r) for r in await tx.fetch("SELECT kind, bkey, level, mark FROM budgets ORDER BY kind, bkey")]


def _counter(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def _live_ns(h: Harness, scope_id: str) -> str:
    scope = await h.parts.store.scopes.get_scope(scope_id)
    assert scope is not None and scope.namespace is not None
    ns_id: str = scope.namespace.ns_id
    return ns_id


class TestForgetOne:
    @pytest.mark.kagent
    async def test_the_forgotten_entry_is_physically_gone_and_the_rest_moved(self, rot: Harness) -> None:
        """Forget-one rotates: the evidence reads complete from a read-back, the kept entry lives on under a
        new id and a new storage key, and kagent holds nothing else of the scope."""
        scope_id = await rot.scope()
        doomed, kept = await rot.saved(scope_id, "likes green tea"), await rot.saved(scope_id, "lives in Lisbon")
        old_ns = await _live_ns(rot, scope_id)
        record = await rot.client().forget(scope_id, doomed)
        assert (record["state"], record["physical_deletion"]) == ("verified", "complete")
        assert record["verification"]["physically_absent"] is True
        assert "pending_namespace_clear" not in record["residuals"]
        assert record["rotated_by"]["state"] == "verified"

        rotation = await rot.client().erasure(record["rotated_by"]["erasure_id"])
        assert (rotation["kind"], rotation["state"], rotation["physical_deletion"]) == (
            "rotate",
            "verified",
            "complete",
        )
        (move,) = rotation["rotation"]["moved"]
        assert move["from_entry_id"] == kept and rotation["rotation"]["from_namespace"] == old_ns
        assert rotation["rotation"]["to_namespace"] == await _live_ns(rot, scope_id) != old_ns
        assert [e["entry_id"] for e in rotation["entries"]] == [doomed]
        checks = {(r["namespace_id"], r["check"]): r["rows_found"] for r in rotation["read_back"]}
        assert checks[(old_ns, "namespace")] == 0 and checks[(await _live_ns(rot, scope_id), "moved")] == 1

        (row,) = await rot.rows(scope_id)
        assert (row.id, row.content) == (move["to_entry_id"], "lives in Lisbon")
        page = await rot.client().inspect(scope_id, rot.context())
        assert [(e["id"], e["text"]) for e in page["entries"]] == [(move["to_entry_id"], "lives in Lisbon")]
        counts = (await rot.client().status(scope_id))["entries"]
        assert (counts["live"], counts["pending_physical_deletion"]) == (1, 0)

    async def test_a_copy_keeps_the_original_hard_expiry(self, rot: Harness) -> None:
        """Re-saving never extends an expiry: the copy has the original created_at and expires_at, and kagent's
        ttl is the whole days left."""
        scope_id = await rot.scope()
        kept = await rot.saved(scope_id, "lives in Lisbon")
        doomed = await rot.saved(scope_id, "likes green tea")
        original = next(e for e in await rot.parts.store.ledger.entries_of_scope(scope_id) if e.entry_id == kept)
        rot.advance(3 * 86400 + 3600)
        await rot.client().forget(scope_id, doomed)
        (copy,) = [
            e
            for e in await rot.parts.store.ledger.entries_of_scope(scope_id)
            if e.tombstoned_at is None and e.entry_id != kept
        ]
        assert (copy.created_at, copy.expires_at) == (original.created_at, original.expires_at)
        (row,) = await rot.rows(scope_id)
        assert row.expires_at is not None and row.created_at is not None
        assert round((row.expires_at - row.created_at).total_seconds() / 86400) == 4

    async def test_an_id_shown_before_a_rotation_still_forgets_the_entry(self, rot: Harness) -> None:
        """The id inspect showed before a rotation re-saved the entry names its copy: forgetting it erases both."""
        scope_id = await rot.scope()
        first, second = await rot.saved(scope_id, "likes green tea"), await rot.saved(scope_id, "lives in Lisbon")
        await rot.client().forget(scope_id, first)  # rotates: `second` now lives under a new id
        (copy,) = [
            e.entry_id for e in await rot.parts.store.ledger.entries_of_scope(scope_id) if e.tombstoned_at is None
        ]
        record = await rot.client().forget(scope_id, second)
        assert record["physical_deletion"] == "complete"
        assert {e["entry_id"] for e in record["entries"]} == {second, copy}
        assert all(e["verified_at"] for e in record["entries"])
        assert await rot.rows(scope_id) == []
        assert (await rot.client().inspect(scope_id, rot.context()))["entries"] == []

    async def test_forgetting_during_an_unfinished_rotation_removes_its_copy_too(self, rot: Harness) -> None:
        """A rotation switched (and copied the entry) but not yet verified when the entry is forgotten by its old
        id: the forget joins it, then rotates once more, so no copy survives and the evidence is complete."""
        scope_id = await rot.scope()
        kept = await rot.saved(scope_id, "lives in Lisbon")
        await rot.saved(scope_id, "has a cat")
        scope = await rot.parts.store.scopes.get_scope(scope_id)
        assert scope is not None
        engine = erasure_engine(rot.parts)
        rotation = await engine.request(scope, ErasureKind.ROTATE, "sweeper")
        assert (await engine.run(rotation.erasure_id, until="deleted")).ns_id is not None  # switched
        record = await rot.client().forget(scope_id, kept)
        assert record["physical_deletion"] == "complete" and len(record["entries"]) == 2
        assert [r.content for r in await rot.rows(scope_id)] == ["has a cat"]
        kinds = [(e.kind, e.state) for e in await rot.parts.store.erasures.erasures_of_scope(scope_id)]
        assert kinds.count(("rotate", "verified")) == 2


class TestEngine:
    @pytest.mark.parametrize("stopped_at", ["requested", "fenced", "quiesced", "deleted"])
    async def test_a_rotation_stopped_after_any_step_completes_on_resume(self, rot: Harness, stopped_at: str) -> None:
        """A fresh engine (a restarted process) resumes a rotation from its recorded state: verified, one live
        namespace, every kept entry readable, nothing else in kagent."""
        scope_id = await rot.scope()
        kept = await rot.saved(scope_id, "lives in Lisbon")
        doomed = await rot.saved(scope_id, "likes green tea")
        await rot.parts.store.ledger.tombstone(scope_id, [doomed], rot.parts.clock())
        scope = await rot.parts.store.scopes.get_scope(scope_id)
        assert scope is not None
        first = erasure_engine(rot.parts)
        erasure = await first.request(scope, ErasureKind.ROTATE, "operator")
        await first.run(erasure.erasure_id, until=stopped_at)
        (resumed,) = await erasure_engine(rot.parts).resume_all()
        assert resumed.state == "verified"
        assert [s for s, _ in resumed.steps] == ["requested", "fenced", "quiesced", "deleted", "verified"]
        states = [n.state for n in await rot.parts.store.namespaces.namespaces_of_scope(scope_id)]
        assert states.count("live") == 1 and "staged" not in states
        rows = await rot.rows(scope_id)
        assert [r.content for r in rows] == ["lives in Lisbon"] and rows[0].id != kept


async def _rotation_with_kept_facts(rot: Harness) -> tuple[str, list[str], Erasure]:
    """24 kept facts and one forgotten (tombstoned) in a new scope, its rotation requested: (scope, kept, rotation)."""
    scope_id = await rot.scope()
    kept = [f"kept fact {n} about tea" for n in range(24)]
    for text in kept:
        await rot.saved(scope_id, text)
    doomed = await rot.saved(scope_id, "likes green tea")
    await rot.parts.store.ledger.tombstone(scope_id, [doomed], rot.parts.clock())
    scope = await rot.parts.store.scopes.get_scope(scope_id)
    assert scope is not None
    return scope_id, kept, await erasure_engine(rot.parts).request(scope, ErasureKind.ROTATE, "sweeper")


async def _kept_exactly_once(rot: Harness, scope_id: str, kept: list[str]) -> None:
    """Each kept fact is in kagent once, the forgotten one not at all, all under the live namespace's storage key
    and the ids the ledger holds live there; one live namespace, none staged."""
    live = await _live_ns(rot, scope_id)
    namespaces = await rot.parts.store.namespaces.namespaces_of_scope(scope_id)
    states = [n.state for n in namespaces]
    assert states.count("live") == 1 and "staged" not in states
    rows = await rot.rows(scope_id)
    assert sorted(r.content for r in rows) == sorted(kept)
    ledger = {
        e.entry_id
        for e in await rot.parts.store.ledger.entries_of_scope(scope_id)
        if e.ns_id == live and e.tombstoned_at is None
    }
    assert {r.id for r in rows} == ledger
    assert {r.user_id for r in rows} == {n.storage_key for n in namespaces if n.ns_id == live}


class TestConcurrentRunners:
    async def test_runners_of_one_rotation_in_several_processes_lose_no_kept_entry(self, rot: Harness) -> None:
        """Three engines (three processes: the one that deferred it, two sweepers) resume the same rotation at
        once while its copy is slow: one of them runs it, the others wait or stand aside; every kept entry is
        in kagent exactly once, in the live namespace, under the id the ledger holds, and nothing is staged."""
        scope_id, kept, erasure = await _rotation_with_kept_facts(rot)
        rot.stack.embedding.faults = EmbeddingFaults(delay_s=0.3)  # the copy takes a while: the runners overlap
        engines = [erasure_engine(rot.parts) for _ in range(3)]
        ends = await asyncio.gather(*(engine.run(erasure.erasure_id) for engine in engines))
        rot.stack.embedding.faults = EmbeddingFaults()
        assert [e.state for e in ends] == ["verified"] * 3, [(e.state, e.failure_reason) for e in ends]
        done = await rot.parts.store.erasures.get_erasure(erasure.erasure_id)
        assert done is not None and [s for s, _ in done.steps] == [
            "requested",
            "fenced",
            "quiesced",
            "deleted",
            "verified",
        ]
        await _kept_exactly_once(rot, scope_id, kept)

    async def test_a_runner_that_lost_its_lease_mid_copy_stops_without_harm(self, rot: Harness) -> None:
        """A runner stalled past its lease while copying (here: the lease is made to lapse) and another took over:
        the first one's remaining copies, its moves and its switch are refused, it fails nothing, and the
        rotation the second one finished keeps every entry exactly once."""
        scope_id, kept, erasure = await _rotation_with_kept_facts(rot)
        stalled, other = erasure_engine(rot.parts), erasure_engine(rot.parts)
        await stalled.run(erasure.erasure_id, until="quiesced")
        rot.stack.embedding.faults = EmbeddingFaults(delay_s=0.3)
        first = asyncio.create_task(stalled.run(erasure.erasure_id))

        async def staged() -> bool:
            return any(n.state == "staged" for n in await rot.parts.store.namespaces.namespaces_of_scope(scope_id))

        await until(staged)  # the first runner is copying
        async with rot.parts.store.db.tx("write") as tx:
            await tx.execute("UPDATE erasures SET runner_until_us = 0 WHERE erasure_id = $1", erasure.erasure_id)
        taken = await other.run(erasure.erasure_id)
        stopped = await first
        rot.stack.embedding.faults = EmbeddingFaults()
        assert taken.state == "verified" and stopped.state != "failed", stopped  # it stood aside, failing nothing
        done = await rot.parts.store.erasures.get_erasure(erasure.erasure_id)
        assert done is not None and done.state == "verified" and done.failure_reason is None
        await _kept_exactly_once(rot, scope_id, kept)


class TestUnknownOutcome:
    async def test_a_save_that_may_still_land_defers_verification_not_the_switch(self, rot: Harness) -> None:
        """A save into the old namespace whose outcome is unknown does not hold the switch; the rotation waits
        for its lease before reading back, clears again, and says so in its evidence."""
        scope_id = await rot.scope()
        doomed = await rot.saved(scope_id, "likes green tea")
        await rot.saved(scope_id, "lives in Lisbon")
        op = await rot.begin_write(scope_id, 1, 30.0)
        await rot.parts.store.scopes.write_outcome_unknown(op, rot.parts.clock() + timedelta(seconds=60))
        record = await rot.client().forget(scope_id, doomed)
        assert (record["physical_deletion"], record["rotated_by"]["state"]) == ("pending_namespace_clear", "deleted")
        pending = await rot.client().erasure(record["rotated_by"]["erasure_id"])
        assert pending["not_before"] is not None
        assert pending["rotation"]["to_namespace"] == await _live_ns(rot, scope_id)
        rot.advance(61)

        async def verified() -> bool:
            return (await rot.client().erasure(record["rotated_by"]["erasure_id"]))["state"] == "verified"

        await until(verified)
        rotation = await rot.client().erasure(record["rotated_by"]["erasure_id"])
        assert rotation["verification"]["rechecked_after_possible_write"] is True
        assert (await rot.client().erasure(record["erasure_id"]))["physical_deletion"] == "complete"
        assert [r.content for r in await rot.rows(scope_id)] == ["lives in Lisbon"]


class TestFailsSafe:
    @pytest.mark.parametrize("broken", ["provider_error", "provider_down", "kagent_refuses"])
    async def test_a_failed_rotation_keeps_the_scope_usable_and_the_evidence_pending(
        self, rot: Harness, broken: str
    ) -> None:
        """Provider or kagent failing: forget-one is verified (tombstoned) but pending with the rotation's reason;
        the scope stays enabled, its old namespace live and writable, re-consent is not blocked; once the
        provider is back, the sweeper's rotation completes the same evidence."""
        scope_id = await rot.scope()
        doomed, kept = await rot.saved(scope_id, "likes green tea"), await rot.saved(scope_id, "lives in Lisbon")
        old_ns = await _live_ns(rot, scope_id)
        if broken == "provider_error":
            rot.stack.embedding.faults = EmbeddingFaults(status=503, body="provider says: likes green tea")
        elif broken == "provider_down":
            rot.stack.embedding.faults = EmbeddingFaults(delay_s=3.0)  # past upstream.embedding_timeout_s
        else:
            rot.stack.store.fault = DbFault(ops=frozenset({"insert"}))
        record = await rot.client().forget(scope_id, doomed)
        reason = {
            "provider_error": "upstream_error",
            "provider_down": "upstream_unavailable",
            "kagent_refuses": "upstream_error",
        }[broken]
        assert (record["state"], record["physical_deletion"]) == ("verified", "pending_namespace_clear")
        assert record["rotated_by"] == {
            "erasure_id": record["rotated_by"]["erasure_id"],
            "state": "failed",
            "failure_reason": reason,
        }
        scope = await rot.parts.store.scopes.get_scope(scope_id)
        assert scope is not None and scope.enabled and scope.generation == 1
        assert await _live_ns(rot, scope_id) == old_ns
        assert [n.state for n in await rot.parts.store.namespaces.namespaces_of_scope(scope_id)].count("staged") == 0
        assert {r.id for r in await rot.rows(scope_id)} >= {doomed, kept}
        rot.stack.store.fault = None
        await rot.saved(scope_id, "has a cat")  # unfrozen: saves land again
        await rot.client().grant(scope_id, "remember my preferences", "v1")  # re-consent is not blocked

    @pytest.mark.kagent
    async def test_a_rotation_kagent_refused_is_retried_by_the_operator(self, rot: Harness) -> None:
        """kagent refusing the copies fails the rotation (the forget-one verified, its deletion pending); once
        kagent writes again, the operator's retry of the rotation completes it and the forget-one's evidence."""
        scope_id = await rot.scope()
        doomed = await rot.saved(scope_id, "likes green tea")
        await rot.saved(scope_id, "lives in Lisbon")
        async with kagent_refuses(rot, "insert"):
            record = await rot.client().forget(scope_id, doomed)
        assert (record["state"], record["physical_deletion"]) == ("verified", "pending_namespace_clear")
        assert record["rotated_by"]["state"] == "failed"
        retried = await rot.client(rot.operator_token()).retry_erasure(record["rotated_by"]["erasure_id"])
        assert (retried["kind"], retried["state"], retried["physical_deletion"]) == ("rotate", "verified", "complete")
        later = await rot.client().erasure(record["erasure_id"])
        assert (later["physical_deletion"], later["verification"]["physically_absent"]) == ("complete", True)
        assert [r.content for r in await rot.rows(scope_id)] == ["lives in Lisbon"]

    async def test_the_sweeper_finishes_what_a_failed_rotation_left(self, rot: Harness) -> None:
        """The tombstoned entry makes its scope a candidate; the next pass rotates and the evidence completes."""
        scope_id = await rot.scope()
        doomed = await rot.saved(scope_id, "likes green tea")
        await rot.saved(scope_id, "lives in Lisbon")
        rot.stack.embedding.faults = EmbeddingFaults(status=500)
        record = await rot.client().forget(scope_id, doomed)
        assert record["physical_deletion"] == "pending_namespace_clear"
        rot.stack.embedding.faults = EmbeddingFaults()
        report = await sweep(rot.parts, erasure_engine(rot.parts))
        assert (report.rotated, report.failures) == (1, 0)
        later = await rot.client().erasure(record["erasure_id"])
        assert (later["physical_deletion"], later["verification"]["physically_absent"]) == ("complete", True)
        assert later["rotated_by"]["state"] == "verified"
        assert [r.content for r in await rot.rows(scope_id)] == ["lives in Lisbon"]

    async def test_a_model_nobody_configured_is_never_guessed(self, tmp_path: Path) -> None:
        """No model configured for the agent: the rotation fails with its own reason, asking no provider."""
        async with harness(tmp_path, store_url=None, rotation="unpinned") as h:
            scope_id = await h.scope()
            doomed = await h.saved(scope_id, "likes green tea")
            await h.saved(scope_id, "lives in Lisbon")
            record = await h.client().forget(scope_id, doomed)
            assert record["rotated_by"]["failure_reason"] == "embedding_model_unknown"
            assert [c for c in h.stack.embedding.calls] == []

    async def test_a_withdrawal_during_a_rotation_wins_and_clears_everything(self, rot: Harness) -> None:
        """Consent withdrawn while a rotation is frozen: the withdrawal is verified and leaves no row, the
        rotation ends failed (stale_generation) without touching the scope further."""
        scope_id = await rot.scope()
        await rot.saved(scope_id, "likes green tea")
        scope = await rot.parts.store.scopes.get_scope(scope_id)
        assert scope is not None
        engine = erasure_engine(rot.parts)
        rotation = await engine.request(scope, ErasureKind.ROTATE, "operator")
        await engine.run(rotation.erasure_id, until="quiesced")
        withdrawal = (await rot.client().withdraw(scope_id))["erasure"]
        assert (withdrawal["state"], withdrawal["physical_deletion"]) == ("verified", "complete")
        done = await engine.run(rotation.erasure_id)
        assert (done.state, done.failure_reason) == ("failed", "stale_generation")
        assert await rot.rows(scope_id) == []
        scope = await rot.parts.store.scopes.get_scope(scope_id)
        assert scope is not None and not scope.enabled
        assert await engine.blocked(scope_id) is None


class TestReembedding:
    async def test_the_configured_model_is_used_whatever_the_traffic_named(self, tmp_path: Path) -> None:
        """After an embedding call naming another model, dimensions and encoding, the rotation asks the provider
        for exactly the configured model, with memgov's own key, and the copies are the runtime's vectors."""
        key_file = tmp_path / "provider.key"
        key_file.write_text("sk-memgov-" + "k" * 24)
        async with harness(
            tmp_path, store_url=None, rotation="pinned", upstream_settings={"embedding_api_key_file": str(key_file)}
        ) as h:
            scope_id = await h.scope()
            async with h.http.post(
                h.gw.data_url + f"/embeddings/{AGENT}/v1/embeddings",
                json={"model": "other-model", "input": ["warm up"], "dimensions": 8, "encoding_format": "base64"},
            ) as resp:
                assert resp.status == 200
            doomed = await h.saved(scope_id, "likes green tea")
            await h.saved(scope_id, "lives in Lisbon")
            record = await h.client().forget(scope_id, doomed)
            assert record["physical_deletion"] == "complete"
            ours = h.stack.embedding.calls[-1]
            assert (ours.model, ours.inputs, ours.authorization_present) == (MODEL, ("lives in Lisbon",), True)
            assert ours.body_keys == {"model", "input", "dimensions"}
            (row,) = await h.rows(scope_id)
            assert row.embedding is not None and _close(row.embedding, embed_text("lives in Lisbon"))

    @pytest.mark.parametrize(
        "odd",
        [
            {"encoding_format": {}},
            {"encoding_format": ["float"]},
            {"dimensions": {}},
            {"model": ["m"]},
            {"dimensions": 2**70},
        ],
    )
    async def test_model_facts_of_any_json_shape_are_refused_not_a_500(
        self, tmp_path: Path, odd: dict[str, object]
    ) -> None:
        """An embedding call whose model facts are objects, arrays or huge numbers gets a reasoned answer."""
        async with harness(tmp_path, store_url=None, rotation="unpinned") as h:
            await h.scope()
            body = {"model": "text-embedding-3-small", "input": ["warm up"], **odd}
            async with h.http.post(h.gw.data_url + f"/embeddings/{AGENT}/v1/embeddings", json=body) as resp:
                assert resp.status < 500 and "X-Memgov-Decision" in resp.headers

    async def test_a_longer_vector_is_cut_and_normalised_as_the_runtime_does(self, tmp_path: Path) -> None:
        """An agent asking for 1024 dimensions stores the first 768, L2-normalised (kagent-adk, go/adk): the
        copy is that same vector."""
        async with harness(tmp_path, store_url=None, rotation="pinned", dimensions=1024) as h:
            scope_id = await h.scope()
            async with h.http.post(
                h.gw.data_url + f"/embeddings/{AGENT}/v1/embeddings",
                json={"model": MODEL, "input": ["lives in Lisbon"], "dimensions": 1024},
            ) as resp:
                runtime_vector = _processed((await resp.json())["data"][0]["embedding"])
            status, body = await _save_vector(h, scope_id, "lives in Lisbon", runtime_vector)
            assert status == 201
            doomed = await h.saved(scope_id, "likes green tea")
            await h.client().forget(scope_id, doomed)
            (row,) = await h.rows(scope_id)
            assert row.id != body["id"] and row.embedding is not None and _close(row.embedding, runtime_vector)

    @pytest.mark.kagent
    async def test_a_search_ranks_rotated_entries_as_it_ranked_the_originals(self, rot: Harness) -> None:
        """The runtime's own query vector finds the copies in the same order with the same scores."""
        scope_id = await rot.scope()
        for text in (
            "likes green tea",
            "drinks green tea every morning",
            "lives in Lisbon",
            "has a black cat",
            "prefers tea to coffee",
        ):
            await rot.saved(scope_id, text)
        doomed = await rot.saved(scope_id, "owns a bicycle")
        before = await _ranked(rot, scope_id, "which tea does the user like")
        await rot.client().forget(scope_id, doomed)
        after = await _ranked(rot, scope_id, "which tea does the user like")
        assert [t for t, _ in after] == [t for t, _ in before if t != "owns a bicycle"]
        assert all(
            abs(a - b) < 1e-6
            for (_, a), (_, b) in zip(after, [p for p in before if p[0] != "owns a bicycle"], strict=True)
        )


class TestCost:
    async def test_re_embedding_is_metered_bounded_and_never_charged_to_the_person(self, rot: Harness) -> None:
        """One provider item per kept entry, counted as embedding work; the scope's hourly budget is untouched;
        a scope holding more live entries than max_entries is not rotated."""
        scope_id = await rot.scope()
        for i in range(4):
            await rot.saved(scope_id, f"fact number {i} about tea")
        doomed = await rot.saved(scope_id, "likes green tea")
        budgets = await _budget_rows(rot)
        embedded = _counter("memgov_memory_operations_total", {"kind": "embedding"})
        verified = _counter("memgov_rotations_total", {"outcome": "verified"})
        await rot.client().forget(scope_id, doomed)
        assert sum(len(c.inputs) for c in rot.stack.embedding.calls) == 4
        assert _counter("memgov_memory_operations_total", {"kind": "embedding"}) - embedded == 4
        assert _counter("memgov_rotations_total", {"outcome": "verified"}) - verified == 1
        assert await _budget_rows(rot) == budgets

        limits = rot.parts.settings.policy.dir / "data" / "limits.yaml"
        limits.write_text(limits.read_text().replace("max_entries: 1000", "max_entries: 2"))
        assert await rot.parts.policy.reload()
        first = next(
            e.entry_id for e in await rot.parts.store.ledger.entries_of_scope(scope_id) if e.tombstoned_at is None
        )
        calls = len(rot.stack.embedding.calls)
        record = await rot.client().forget(scope_id, first)
        assert record["rotated_by"]["failure_reason"] == "entry_cap_reached"
        assert len(rot.stack.embedding.calls) == calls


DAY = 86400


def _later(h: Harness, seconds: float) -> None:
    """Move the gateway's and kagent's clocks together."""
    h.advance(seconds)
    h.stack.clock.advance(seconds)  # type: ignore[attr-defined]  # the stand-in stack has a test clock


class TestSweeper:
    async def test_nothing_expired_stays_in_kagent_a_day_even_when_kagents_prune_keeps_it(self, rot: Harness) -> None:
        """A popular row kagent's prune extends by 15 days is still deleted by rotation well within 24 h of its
        hard expiry, in a scope that keeps saving; until then a pass waits, to take many expiries at once."""
        scope_id = await rot.scope()
        old = await rot.saved(scope_id, "likes green tea")
        for _ in range(10):  # kagent counts an access for every row its search returns
            await _ranked(rot, scope_id, "green tea")
        _later(rot, 3 * DAY)
        fresh = await rot.saved(scope_id, "lives in Lisbon")
        _later(rot, 4 * DAY + 3600)
        await rot.stack.store.prune()
        (extended,) = [r for r in await rot.rows(scope_id) if r.id == old]
        assert extended.expires_at is not None and extended.expires_at > rot.stack.clock() + timedelta(days=14)
        engine = erasure_engine(rot.parts)
        assert (await sweep(rot.parts, engine)).rotated == 0  # an hour past expiry: not yet
        _later(rot, 9 * 3600)
        assert (await sweep(rot.parts, engine)).rotated == 1  # ten hours past expiry: rotated
        rows = await rot.rows(scope_id)
        assert [r.content for r in rows] == ["lives in Lisbon"] and rows[0].id != fresh
        (gone,) = [e for e in await rot.parts.store.ledger.entries_of_scope(scope_id) if e.entry_id == old]
        assert gone.physically_deleted_at is not None and gone.verified_at is not None

    async def test_scopes_without_anything_to_remove_are_never_rotated(self, rot: Harness) -> None:
        """Only scopes with a forgotten or long-expired entry are candidates; others cost nothing."""
        scopes = [await rot.scope(room=f"!room{i}:example.org") for i in range(4)]
        for scope_id in scopes:
            await rot.saved(scope_id, "likes green tea")
        _later(rot, 2 * DAY)
        engine = erasure_engine(rot.parts)
        assert (await sweep(rot.parts, engine)).rotated == 0
        doomed = await rot.saved(scopes[2], "lives in Lisbon")
        await rot.parts.store.ledger.tombstone(scopes[2], [doomed], rot.parts.clock())  # e.g. a rolled-back save
        assert await rot.parts.store.lineage.rotation_candidates(rot.parts.clock(), rot.parts.clock(), 100) == [
            scopes[2]
        ]
        assert (await sweep(rot.parts, engine)).rotated == 1
        for scope_id in scopes:
            kinds = [e.kind for e in await rot.parts.store.erasures.erasures_of_scope(scope_id)]
            assert kinds == (["rotate"] if scope_id == scopes[2] else [])

    async def test_a_legacy_unsalted_namespace_is_rotated_to_a_salted_one(self, rot: Harness) -> None:
        """Rows written before storage salts existed move to an unguessable key; the old key holds nothing."""
        scope_id = await rot.scope()
        async with rot.parts.store.db.tx() as tx:  # as migration 2 leaves a scope's live namespace
            await tx.execute("UPDATE namespaces SET salt = '' WHERE scope_id = $1", scope_id)
        await rot.saved(scope_id, "likes green tea")
        legacy_key = f"mgs1.{scope_id}.1"
        assert [r.user_id for r in await rot.rows(scope_id)] == [legacy_key]
        assert (await sweep(rot.parts, erasure_engine(rot.parts))).rotated == 1
        (row,) = await rot.rows(scope_id)
        assert row.content == "likes green tea" and row.user_id != legacy_key
        scope = await rot.parts.store.scopes.get_scope(scope_id)
        assert scope is not None and scope.namespace is not None and not scope.namespace.legacy


class TestKagentPrune:
    async def test_a_rotation_with_kagents_prune_running_alongside(self, rot: Harness) -> None:
        """kagent's prune runs again and again while a rotation copies: a row it drops (its own shorter ttl) is
        reported not found and leaves the ledger, a popular expired row it extends is erased anyway, the live
        entry is copied, and nothing expired or forgotten is left."""
        scope_id = await rot.scope()
        popular = await rot.saved(scope_id, "likes green tea")
        for _ in range(10):
            await _ranked(rot, scope_id, "green tea")
        _later(rot, 2 * DAY)
        status, body = await _save_vector(
            rot, scope_id, "parks by the river", embed_text("parks by the river"), ttl_days=1
        )
        assert status == 201
        short = body["id"]
        kept = await rot.saved(scope_id, "lives in Lisbon")
        doomed = await rot.saved(scope_id, "has a cat")
        _later(rot, 5 * DAY + 3600)  # `popular` expired an hour ago; kagent's copy of `short` too
        rot.stack.embedding.faults = EmbeddingFaults(delay_s=0.2)  # a copy that takes a while
        stop = asyncio.Event()

        async def prune_again_and_again() -> None:
            while not stop.is_set():
                await rot.stack.store.prune()
                await asyncio.sleep(0.01)

        pruning = asyncio.create_task(prune_again_and_again())
        record = await rot.client().forget(scope_id, doomed)
        stop.set()
        await pruning
        assert record["physical_deletion"] == "complete"
        rotation = await rot.client().erasure(record["rotated_by"]["erasure_id"])
        assert rotation["rotation"]["not_found_in_kagent"] == [short]
        assert [m["from_entry_id"] for m in rotation["rotation"]["moved"]] == [kept]
        assert {e["entry_id"] for e in rotation["entries"]} == {popular, short, doomed}
        assert [r.content for r in await rot.rows(scope_id)] == ["lives in Lisbon"]
        assert (await rot.client().status(scope_id))["entries"]["live"] == 1

    @pytest.mark.kagent
    async def test_whatever_kagents_prune_does_an_expired_row_is_gone_within_a_day(self, rot: Harness) -> None:
        """A row kagent treats as expired and popular (its prune extends it by 15 days), with the prune running
        again and again while the sweeper rotates: within a day of its hard expiry only the live entry is left."""
        scope_id = await rot.scope()
        old = await rot.saved(scope_id, "likes green tea")
        rot.advance(3 * DAY)
        kept = await rot.saved(scope_id, "lives in Lisbon")
        for _ in range(10):  # kagent counts an access for every row its search returns
            await _ranked(rot, scope_id, "green tea")
        await _expire_in_kagent(rot, old)
        await _prune(rot)
        (extended,) = [r for r in await rot.rows(scope_id) if r.id == old]
        assert extended.expires_at is not None and extended.expires_at > rot.stack.clock() + timedelta(days=14)
        rot.advance(4 * DAY + 23 * 3600)  # `old` is 23 h past its hard expiry, `kept` is live
        stop = asyncio.Event()

        async def prune_again_and_again() -> None:
            while not stop.is_set():
                await _prune(rot)

        pruning = asyncio.create_task(prune_again_and_again())
        try:
            report = await sweep(rot.parts, erasure_engine(rot.parts))
        finally:
            stop.set()
            await pruning
        assert (report.rotated, report.failures) == (1, 0)
        rows = await rot.rows(scope_id)
        assert [r.content for r in rows] == ["lives in Lisbon"] and rows[0].id != kept
        (gone,) = [e for e in await rot.parts.store.ledger.entries_of_scope(scope_id) if e.entry_id == old]
        assert gone.physically_deleted_at is not None and gone.verified_at is not None


async def _expire_in_kagent(h: Harness, entry_id: str) -> None:
    """Make kagent hold the row as expired an hour ago (the real kagent's table directly; the stand-in's clock)."""
    if h.stack.real is None:
        h.stack.clock.advance(7 * DAY + 3600)  # type: ignore[attr-defined]  # the stand-in stack has a test clock
        return
    conn = await asyncpg.connect(h.stack.real.db_url)
    try:
        await conn.execute("UPDATE memory SET expires_at = now() - interval '1 hour' WHERE id = $1", entry_id)
    finally:
        await conn.close()


async def _prune(h: Harness) -> None:
    """kagent's PruneExpiredMemories (the real one's own code through its admin route, or the stand-in's)."""
    if h.stack.real is not None:
        await asyncio.to_thread(h.stack.real.prune)
    else:
        await h.stack.store.prune()
        await asyncio.sleep(0.01)


class TestContentStaysInMemory:
    async def test_rotated_text_reaches_no_sink(self, rot: Harness) -> None:
        """The text a rotation reads, embeds and re-saves appears in no log line, metric, audit row, evidence,
        error body or state row, also when the provider fails with the text in its error."""
        kept, doomed = make_sentinel("kept"), make_sentinel("doomed")
        with capture_sinks() as sinks:
            scope_id = await rot.scope()
            await rot.saved(scope_id, f"remembers {kept}")
            first = await rot.saved(scope_id, f"remembers {doomed}")
            rot.stack.embedding.faults = EmbeddingFaults(status=400, body=f'{{"error": "bad input: {kept}"}}')
            failed = await rot.client().forget(scope_id, first)
            rot.stack.embedding.faults = EmbeddingFaults()
            await sweep(rot.parts, erasure_engine(rot.parts))
            for record in (
                failed,
                await rot.client().erasure(failed["erasure_id"]),
                *[
                    await rot.client().erasure(e.erasure_id)
                    for e in await rot.parts.store.erasures.erasures_of_scope(scope_id)
                ],
            ):
                sinks.extra.append(repr(record))
            sinks.extra.append(await rot.audit_text())
            sinks.extra.append(await _state_dump(rot))
        assert [r.content for r in await rot.rows(scope_id)] == [f"remembers {kept}"]
        sinks.assert_clean(kept, doomed)


async def _state_dump(h: Harness) -> str:
    """Every row of every table of the gateway's state store."""
    async with h.parts.store.db.tx("read") as tx:
        tables = [r[0] for r in await tx.fetch("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return "\n".join([repr(await tx.fetch(f"SELECT * FROM {t}")) for t in tables])


class TestSweeperUnderFailure:
    async def test_a_model_nobody_named_leaves_scopes_waiting_without_failed_records(self, tmp_path: Path) -> None:
        """No rotation can succeed without a model: the sweeper leaves the candidates waiting and records nothing."""
        async with harness(tmp_path, store_url=None, rotation="unpinned") as h:
            scope_id = await h.scope()
            doomed = await h.saved(scope_id, "likes green tea")
            await h.parts.store.ledger.tombstone(scope_id, [doomed], h.parts.clock())
            report = await sweep(h.parts, erasure_engine(h.parts))
            assert (report.rotated, report.rotations_waiting, report.failures) == (0, 1, 0)
            assert await h.parts.store.erasures.erasures_of_scope(scope_id) == []

    async def test_a_provider_that_keeps_failing_pauses_the_pass(self, rot: Harness) -> None:
        """After a few failed rotations in a row the rest of the candidates wait for the next pass (bounded
        failure records per pass); the scopes stay enabled and writable."""
        scopes = [await rot.scope(room=f"!room{i}:example.org") for i in range(8)]
        for scope_id in scopes:
            await rot.saved(scope_id, "lives in Lisbon")  # something to keep: the copy needs the provider
            doomed = await rot.saved(scope_id, "likes green tea")
            await rot.parts.store.ledger.tombstone(scope_id, [doomed], rot.parts.clock())
        rot.stack.embedding.faults = EmbeddingFaults(status=503)
        report = await sweep(rot.parts, erasure_engine(rot.parts))
        assert report.rotated == 0 and 3 <= report.failures < 8
        assert report.failures + report.rotations_waiting == 8
        for scope_id in scopes:
            scope = await rot.parts.store.scopes.get_scope(scope_id)
            assert scope is not None and scope.enabled and scope.namespace is not None
            assert scope.namespace.frozen_by is None
