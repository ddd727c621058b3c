"""A rotation racing hundreds of saves and searches from two gateway processes sharing PostgreSQL.

The contract proved here, for every save that raced the rotation:

- ``201``: its text is in kagent exactly once afterwards, in the scope's live namespace, and
  readable through memgov (copied by the rotation, or saved after the switch);
- ``403 stale_generation``: nothing of it is in kagent (refused while the namespace was frozen,
  or written to the old namespace and deleted with it);
- nothing else: no 5xx, no answer that leaves a row behind or loses one.

And every search that ran during the rotation answered with live entries only, never an empty
list and never the forgotten entry.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sidecar.dev.devstack import start_devstack
from sidecar.dev.devstack.deployment import write_keys
from sidecar.dev.devstack.embedding import EmbeddingFaults
from sidecar.dev.devstack.vectors import embed_text
from sidecar.root import erasure_engine
from tests.support.erasure import sweep
from tests.support.harness import AGENT, APP, policy_pack, with_embedding
from tests.support.procs import governed_like, process_settings, two_gateways
from tests.support.upstream import Upstream, runtime_headers, start_stack

#: Facts saved in all (single saves, and every tenth call an auto-save batch), by this many concurrent savers.
FACTS = 250
SAVERS = 16
BATCH_SIZE = 5
ROTATE_AFTER = 40
_dbs = itertools.count()


def _item(key: str, text: str) -> dict[str, Any]:
    return {"agent_name": APP, "user_id": key, "content": text, "vector": embed_text(text)}


@pytest.fixture
async def setup(tmp_path: Path, pg_server: Any, upstream: Upstream) -> AsyncIterator[dict[str, Any]]:
    """kagent's table (the stand-in's, or kagent v0.9.11's own) and the state store on PostgreSQL, settings for
    two gateways."""
    n = next(_dbs)
    state_url = pg_server.create_database(f"rotation_state_{n}")
    if upstream.real:
        stack = await start_stack(upstream, pg_server=pg_server, log_dir=tmp_path / "kagent", stream_delay_s=0)
    else:
        stack = await start_devstack(store_url=pg_server.create_database(f"rotation_memory_{n}"), stream_delay_s=0)
    keys, pack = write_keys(tmp_path / "keys"), policy_pack(tmp_path)

    def settings() -> dict[str, Any]:
        one = process_settings(
            keys,
            pack,
            stack.kagent_url,
            state_url,
            upstream=upstream,
            erasure={"quiesce_timeout_s": 20.0},
            # One client sends every save, far above a real pod's concurrency: they queue for state
            # connections longer than a gateway's default bound on a loaded machine.
            listen={"max_concurrent_per_client": 1000},
            state={"acquire_timeout_s": 60.0},
        )
        return with_embedding(one, stack.embedding_url, pinned=True)

    try:
        yield {"stack": stack, "keys": keys, "settings": settings, "tmp": tmp_path}
    finally:
        await stack.stop()


#: Why a rotation may fail without a fault of memgov's: the upstream or the provider could not answer.
TRANSIENT = {"upstream_unavailable", "upstream_error"}


async def _swept_until_complete(settings: dict[str, Any], api: Any, erasure_id: str) -> dict[str, Any]:
    """Run sweeper passes (which resume deferred rotations and retry failed ones) until the forget's
    evidence reads complete, or give up after a bounded number of passes."""
    record: dict[str, Any] = {}
    for _ in range(60):
        async with governed_like(settings) as gov:
            await sweep(gov, erasure_engine(gov))
        record = await api.erasure(erasure_id)
        if record["physical_deletion"] == "complete":
            break
        await asyncio.sleep(1.0)
    return record


def _step_time(record: dict[str, Any], state: str) -> float:
    """When an erasure reached ``state``, as a Unix time."""
    at = next(step["at"] for step in record["steps"] if step["state"] == state)
    return datetime.fromisoformat(at).timestamp()


class TestRotationRace:
    @pytest.mark.kagent
    async def test_every_save_is_kept_exactly_once_or_refused_and_leaves_nothing(
        self, setup: dict[str, Any], upstream: Upstream
    ) -> None:
        """Two processes, 250+ facts saved by 16 concurrent savers, a forget-one rotating the scope meanwhile."""
        s = setup
        stack, first, second = s["stack"], s["settings"](), s["settings"]()
        async with two_gateways(s["tmp"], s["keys"], first, second) as pair:
            a, b, http, api, scope_id, key = pair.a, pair.b, pair.http, pair.api, pair.scope_id, pair.key
            headers = {"X-Agent-Name": APP, "X-User-Id": key, **runtime_headers(upstream, AGENT)}
            async with http.post(
                a.data_url + "/api/memories/sessions", json=_item(key, "owns a red bicycle"), headers=headers
            ) as resp:
                assert resp.status == 201
                doomed = (await resp.json())["id"]

            enough, rotated = asyncio.Event(), asyncio.Event()
            outcomes: list[tuple[int, list[str]]] = []  # (status, texts) per save call
            numbers = itertools.count()

            async def saver(url: str) -> None:
                """Save one fact after another (every tenth call an auto-save batch) until the rotation is over."""
                while not rotated.is_set() or sum(len(t) for _, t in outcomes) < FACTS:
                    n = next(numbers)
                    batch = n % 10 == 9
                    texts = [f"batch {n} fact {i}" for i in range(BATCH_SIZE)] if batch else [f"fact {n} about tea"]
                    path, body = (
                        ("/api/memories/sessions/batch", {"items": [_item(key, t) for t in texts]})
                        if len(texts) > 1
                        else ("/api/memories/sessions", _item(key, texts[0]))
                    )
                    async with http.post(url + path, json=body, headers=headers) as resp:
                        await resp.read()
                        outcomes.append((resp.status, texts))
                    if len(outcomes) >= ROTATE_AFTER:
                        enough.set()

            searched: list[tuple[float, list[Any]]] = []  # (when the search was sent, its results)

            async def searcher() -> None:
                body = {
                    "agent_name": APP,
                    "user_id": key,
                    "vector": embed_text("tea bicycle fact"),
                    "limit": 10,
                    "min_score": 0.0,
                }
                while not rotated.is_set():
                    sent = time.time()
                    async with http.post(b.data_url + "/api/memories/search", json=body, headers=headers) as resp:
                        assert resp.status == 200
                        searched.append((sent, await resp.json()))

            workers = [asyncio.create_task(saver(url)) for url in [a.data_url, b.data_url] * (SAVERS // 2)]
            await enough.wait()
            searching = asyncio.create_task(searcher())
            stack.embedding.faults = EmbeddingFaults(delay_s=0.5)  # the copy takes a while: saves meet the freeze
            record = await api.forget(scope_id, doomed)
            rotated.set()
            stack.embedding.faults = EmbeddingFaults()
            await asyncio.gather(*workers, searching)

            assert record["state"] == "verified"
            if record["physical_deletion"] != "complete":
                # The forget call's rotation may end deferred (a save of unknown outcome) or fail on the
                # upstream (kagent under load): the evidence must then say so, and the sweeper finish it.
                async with governed_like(first) as gov:
                    rotations = [
                        (e.state, e.failure_reason, e.not_before is not None)
                        for e in await gov.store.erasures.erasures_of_scope(scope_id, kind="rotate")
                    ]
                assert record["physical_deletion"] == "pending_namespace_clear", rotations
                assert all(
                    state == "verified" or deferred or reason in TRANSIENT for state, reason, deferred in rotations
                ), rotations
                record = await _swept_until_complete(first, api, record["erasure_id"])
            assert (record["state"], record["physical_deletion"]) == ("verified", "complete")
            statuses = [status for status, _ in outcomes]
            assert sum(len(t) for _, t in outcomes) >= FACTS and set(statuses) <= {201, 403}
            assert statuses.count(201) >= ROTATE_AFTER and statuses.count(403) > 0  # the rotation really raced
            # Never empty; never the forgotten entry once its tombstone was recorded (the fence step).
            tombstoned = _step_time(record, "fenced")
            assert len(searched) > 1 and all(results for _, results in searched)
            assert all(doomed not in {r["id"] for r in results} for sent, results in searched if sent > tombstoned)

            async with governed_like(first) as gov:
                report = await sweep(gov, erasure_engine(gov))
                assert report.failures == 0
                scope = await gov.store.scopes.get_scope(scope_id)
                assert scope is not None and scope.namespace is not None
                live = scope.namespace
                ledger = {
                    e.entry_id
                    for e in await gov.store.ledger.entries_of_scope(scope_id)
                    if e.ns_id == live.ns_id and e.tombstoned_at is None
                }

            rows = [r for r in await stack.store.rows() if (r.user_id or "").startswith(f"mgs1.{scope_id}.")]
            kept = sorted(t for status, texts in outcomes if status == 201 for t in texts)
            refused = {t for status, texts in outcomes if status == 403 for t in texts}
            assert sorted(r.content for r in rows) == kept  # each kept fact exactly once, nothing refused, no doomed
            assert not refused & {r.content for r in rows}
            assert {r.user_id for r in rows} == {live.storage_key} and {r.id for r in rows} == ledger
