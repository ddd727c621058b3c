"""Family 4: fair use of the gateway under abuse.

The attacks: hold every upstream connection with slow request bodies or long SSE streams, so
memory calls time out; spend a whole agent's embedding budget anonymously; slip past the
per-sender rate with one-item batches; grow the audit table with anonymous refusals.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator

import aiohttp

from tests.support.adversarial import Launch, Target

STREAM = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "message/stream",
    "params": {"message": {"role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "hi"}]}},
}


async def _slow_body(url: str, stop: asyncio.Event) -> int:
    """POST a body one byte every half second (a slowloris); the status it ends with."""

    async def trickle() -> AsyncIterator[bytes]:
        while not stop.is_set():
            yield b" "
            await asyncio.sleep(0.5)

    async with aiohttp.ClientSession() as s:
        try:
            async with s.post(url, data=trickle(), headers={"Content-Type": "application/json"}) as resp:
                return resp.status
        except (aiohttp.ClientError, ConnectionError):
            return 0


async def _held_stream(t: Target, opened: asyncio.Queue[int]) -> None:
    """Open an SSE stream on a passthrough agent and read it to the end."""
    async with t.http.post(t.gw.data_url + "/api/a2a/team/plain-agent/", json=STREAM) as resp:
        await opened.put(resp.status)
        await resp.read()


async def _memory_still_answers(t: Target, key: str) -> None:
    """Saves and searches succeed; the bound only tells a starved call (minutes) from a served one."""
    for i in range(3):
        async with asyncio.timeout(15):
            status, _, _ = await t.save(key, f"fact {i}")
            assert status == 201
            status, found, _ = await t.search(key, f"fact {i}")
            assert status == 200 and found


class TestStarvation:
    async def test_memory_keeps_answering_while_streams_hold_every_passthrough_connection(self, launch: Launch) -> None:
        """With every passthrough connection held by long SSE streams, governed calls still answer: they
        have their own pool."""
        t = await launch(stream_delay_s=10, upstream={"pool_size": 8})
        await t.consented_scope()
        key = await t.session_key()
        opened: asyncio.Queue[int] = asyncio.Queue()
        streams = [asyncio.create_task(_held_stream(t, opened)) for _ in range(8)]
        try:
            assert [await opened.get() for _ in range(8)] == [200] * 8  # the passthrough pool is now full
            await _memory_still_answers(t, key)
        finally:
            for task in streams:
                task.cancel()
            await asyncio.gather(*streams, return_exceptions=True)

    async def test_slow_bodies_are_cut_and_memory_keeps_answering(self, launch: Launch) -> None:
        """A body trickling one byte at a time is cut with 408 once it falls below the minimum rate, so it
        holds its connection for about a second; memory calls answer throughout."""
        t = await launch(upstream={"pool_size": 8})
        await t.consented_scope()
        key = await t.session_key()
        stop = asyncio.Event()
        slow = [
            asyncio.create_task(_slow_body(t.gw.data_url + path, stop))
            for path in ["/api/sessions"] * 8 + ["/api/memories/search"] * 8
        ]
        try:
            await _memory_still_answers(t, key)
            async with asyncio.timeout(30):
                codes = await asyncio.gather(*slow)
            assert codes == [408] * 16
        finally:
            stop.set()
            for task in slow:
                task.cancel()
            await asyncio.gather(*slow, return_exceptions=True)

    async def test_one_client_cannot_hold_every_slot(self, launch: Launch) -> None:
        """Beyond its per-client concurrency, a client's extra streams answer 429 concurrency_limited; its
        other traffic groups still pass."""
        t = await launch(stream_delay_s=0.5, listen={"max_concurrent_per_client": 4})
        opened: asyncio.Queue[int] = asyncio.Queue()
        streams = [asyncio.create_task(_held_stream(t, opened)) for _ in range(4)]
        try:
            assert [await opened.get() for _ in range(4)] == [200] * 4
            async with t.http.post(t.gw.data_url + "/api/a2a/team/plain-agent/", json=STREAM) as resp:
                assert (resp.status, (await resp.json())["error"]) == (429, "concurrency_limited")
            async with t.http.get(t.gw.data_url + "/version") as resp:
                assert resp.status == 200  # the same client's other traffic groups are not affected
        finally:
            for task in streams:
                task.cancel()
            await asyncio.gather(*streams, return_exceptions=True)


class TestBudgets:
    async def test_one_item_batches_pay_the_senders_rate(self, launch: Launch) -> None:
        """Ten one-item batches in a burst of three: the rate that bounds explicit saves bounds them too."""
        t = await launch(limits={"rate_per_minute": 6, "rate_burst": 3})
        await t.consented_scope()
        key = await t.session_key()
        results = []
        for i in range(10):
            status, body, _ = await t.post("/api/memories/sessions/batch", {"items": [t.fact(key, f"fact {i}")]})
            results.append((status, body.get("error")))
        assert results[:3] == [(201, None)] * 3
        assert results[3:] == [(403, "rate_limited")] * 7

    async def test_an_anonymous_caller_cannot_spend_the_agents_embedding_budget(self, launch: Launch) -> None:
        """One source address spends at most its share; the agent's own pod, elsewhere, still embeds."""
        t = await launch()
        await t.consented_scope()
        url = t.gw.data_url + "/embeddings/team/helper/v1/embeddings"
        refused = 0
        for i in range(60):  # 600 items: the whole hourly budget of the agent
            async with t.http.post(url, json={"model": "m", "input": [f"x{i}-{j}" for j in range(10)]}) as resp:
                refused += resp.status == 403
        assert refused > 0
        body = {"model": "m", "input": ["real query"]}
        async with _client_from("127.0.0.2") as pod, pod.post(url, json=body) as resp:
            assert resp.status == 200, await resp.text()


class TestAuditAmplification:
    async def test_anonymous_refusals_do_not_grow_the_audit_table(self, target: Target) -> None:
        """Three hundred refusals without a genuine credential (data plane and control API) add no audit
        row; they are counted per hour."""
        t = target
        before = t.state_count("SELECT COUNT(*) FROM audit")
        bogus = {"agent_name": "team__NS__helper", "user_id": "mg1.bogus", "content": "x", "vector": [0.5] * 768}
        for _ in range(100):
            await t.post("/api/memories/sessions", bogus)
            await t.invoke(context=secrets.token_hex(40))
            await t.control("GET", "/v1/scopes/s" + "0" * 24, token="not-a-token")
        assert t.state_count("SELECT COUNT(*) FROM audit") == before
        assert t.state_count("SELECT SUM(n) FROM audit_counts") == 300
        assert t.state_count("SELECT COUNT(*) FROM audit_counts") == 3  # one row per hour, operation and reason


@contextlib.asynccontextmanager
async def _client_from(address: str) -> AsyncIterator[aiohttp.ClientSession]:
    """A client whose connections leave from another loopback address (another pod)."""
    connector = aiohttp.TCPConnector(local_addr=(address, 0))
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session
