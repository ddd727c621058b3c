"""Family 7: hostile but small inputs get the contract answer, never a 500 (SPEC R-10, R-18).

Contract: a search answers ``200 []`` (the runtime carries on), a save or batch answers 4xx with a
reason code, both with a decision header; passthrough bodies reach kagent byte for byte.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from tests.support.adversarial import Launch, Target
from tests.support.harness import APP

DEEP = "[" * 100_000 + "]" * 100_000


def _search(key: str, **over: Any) -> dict[str, Any]:
    return {"agent_name": APP, "user_id": key, "vector": [0.5] * 768, "limit": 5, "min_score": 0, **over}


def _save(key: str, **over: Any) -> dict[str, Any]:
    return {"agent_name": APP, "user_id": key, "content": "x", "vector": [0.5] * 768, **over}


def _raw(body: dict[str, Any], field: str, literal: str) -> bytes:
    """The body with one field's value replaced by a JSON literal json.dumps would never write."""
    return json.dumps({**body, field: "@@"}).replace('"@@"', literal).encode()


class TestContractAnswers:
    @pytest.mark.parametrize(
        ("field", "literal"),
        [
            ("vector", DEEP),
            ("limit", str(2**63)),
            ("limit", "1e400"),
            ("vector", "[0" + ", 0" * 767 + "]"),
            ("vector", "[NaN" + ", 0.5" * 767 + "]"),
            ("vector", "[1e40" + ", 0.5" * 767 + "]"),
            ("min_score", "Infinity"),
        ],
    )
    async def test_a_hostile_search_answers_an_empty_list(self, target: Target, field: str, literal: str) -> None:
        """Deep nesting, out-of-range integers, zero, non-finite or float32-overflowing vectors: 200 []."""
        t = target
        await t.consented_scope()
        key = await t.session_key()
        before = len(t.dev.recorder.of_kind("memory"))
        status, body, headers = await t.post(
            "/api/memories/search",
            None,
            raw=_raw(_search(key), field, literal),
            headers={"Content-Type": "application/json", "X-Agent-Name": APP},
        )
        assert (status, body) == (200, [])
        assert headers["X-Memgov-Decision"].startswith("empty_result; reason=bad_request")
        assert t.dev.recorder.of_kind("memory")[before:] == []  # an all-zero vector never reaches kagent

    @pytest.mark.parametrize(
        ("field", "literal"),
        [
            ("vector", DEEP),
            ("ttl_days", str(2**63)),
            ("ttl_days", "1.5"),
            ("vector", "[0" + ", 0" * 767 + "]"),
            ("vector", "[-0.0" + ", 0.0" * 767 + "]"),
            ("vector", "[1e-50" + ", 0" * 767 + "]"),
            ("vector", "[Infinity" + ", 0.5" * 767 + "]"),
        ],
    )
    async def test_a_hostile_save_is_a_reasoned_refusal(self, target: Target, field: str, literal: str) -> None:
        """The same inputs on a save answer 400 bad_request and store nothing."""
        t = target
        await t.consented_scope()
        key = await t.session_key()
        status, body, headers = await t.post(
            "/api/memories/sessions",
            None,
            raw=_raw(_save(key), field, literal),
            headers={"Content-Type": "application/json", "X-Agent-Name": APP},
        )
        assert (status, body["error"]) == (400, "bad_request")
        assert "X-Memgov-Decision" in headers and await t.rows() == []

    @pytest.mark.parametrize("number", [2**53 + 1, 2**63 - 1, -(2**63)])
    async def test_int64_beyond_exact_json_is_bounded_not_a_500(self, target: Target, number: int) -> None:
        """kagent takes any int64 limit or ttl_days; past 2^53 the decision fact saturates, and what memgov
        forwards is its own bounded value (the search ceiling, the longest allowed ttl)."""
        t = target
        await t.consented_scope()
        key = await t.session_key()
        status, body, headers = await t.post("/api/memories/search", _search(key, limit=number))
        assert status == 200 and isinstance(body, list) and headers["X-Memgov-Decision"].startswith("forward")
        sent = json.loads(t.dev.recorder.of_kind("memory")[-1].body)
        assert 1 <= sent["limit"] <= 2**31
        status, body, _ = await t.post("/api/memories/sessions", _save(key, ttl_days=number))
        assert status == 201 and len(await t.rows()) == 1
        sent = json.loads(t.dev.recorder.of_kind("memory")[-1].body)
        assert 1 <= sent["ttl_days"] <= 366

    async def test_an_all_zero_vector_in_a_batch_is_refused_whole(self, target: Target) -> None:
        """One poisoned item refuses the batch: no row that would break every search of the namespace."""
        t = target
        await t.consented_scope()
        key = await t.session_key()
        items = [t.fact(key, "likes green tea"), {**t.fact(key, "zero"), "vector": [0.0] * 768}]
        status, body, _ = await t.post("/api/memories/sessions/batch", {"items": items})
        assert (status, body["error"]) == (400, "bad_request") and await t.rows() == []

    async def test_prefetch_queries_are_bounded_on_the_embedding_route(self, launch: Launch) -> None:
        """A prefetch query is embedded before its search, so its size limit applies to embedding items."""
        t = await launch(limits={"prefetch_query_bytes": 100})
        await t.consented_scope()
        status, body, _ = await t.post("/embeddings/team/helper/v1/embeddings", {"model": "m", "input": ["q" * 200]})
        assert (status, body["error"]) == (403, "embedding_item_too_large")

    async def test_an_empty_object_asks_for_a_confirmation(self, target: Target) -> None:
        """The first forget-all or off call with body {} answers 202 with a confirmation token."""
        t = target
        scope_id = await t.consented_scope()
        for action in ("forget-all", "off"):
            status, body = await t.control("POST", f"/v1/scopes/{scope_id}/{action}", json={})
            assert status == 202 and body["confirm_token"]


@asynccontextmanager
async def _capture() -> AsyncIterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """An upstream that keeps every request's headers and raw body bytes (no decompression)."""
    seen: list[tuple[dict[str, str], bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((dict(request.headers), await request.read()))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


class TestPassthroughBytes:
    async def test_a_compressed_body_reaches_kagent_byte_for_byte(self, launch: Launch) -> None:
        """memgov neither decompresses, truncates nor relabels a passthrough body."""
        async with _capture() as (url, seen):
            t = await launch(upstream={"controller_url": url})
            payload = gzip.compress(json.dumps({"name": "session", "spec": "x" * 5000}).encode())
            async with t.http.post(
                t.gw.data_url + "/api/sessions",
                data=payload,
                headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
            ) as resp:
                assert resp.status == 200
            ((headers, body),) = [s for s in seen if s[1]]
            assert body == payload and headers["Content-Encoding"] == "gzip"
