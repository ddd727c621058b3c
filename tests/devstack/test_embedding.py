"""The embedding stand-in speaks OpenAI's shape, is deterministic, and fails on demand."""

from __future__ import annotations

import asyncio
import base64
import math
import struct
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from sidecar.dev.devstack import EMBEDDING, EmbeddingFaults, create_embedding_app
from sidecar.dev.devstack.store import cosine_similarity
from sidecar.dev.devstack.vectors import embed_text

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(aiohttp_client: Any) -> Client:
    """A client of a fresh embedding stand-in."""
    made: Client = await aiohttp_client(create_embedding_app())
    return made


async def _embed(client: Client, body: Any, path: str = "/v1/embeddings", **kw: Any) -> tuple[int, Any]:
    resp = await client.post(path, json=body, **kw)
    return resp.status, await resp.json(content_type=None)


class TestVectors:
    def test_same_text_same_unit_vector(self) -> None:
        """Embedding is deterministic and returns unit vectors of the asked size."""
        a, b = embed_text("The cat sat"), embed_text("The cat sat")
        assert a == b and len(a) == 768
        assert math.isclose(math.fsum(x * x for x in a), 1.0)
        assert len(embed_text("x", 256)) == 256

    @pytest.mark.parametrize(
        ("fact", "query", "related"),
        [
            ("my favourite colour is teal", "what is my favourite colour?", True),
            ("I live in Lisbon and work nights", "where do I live?", True),
            ("owns two cats named Miso and Tofu", "do I have any cats", True),
            ("my favourite colour is teal", "restart the nginx deployment", False),
            ("I live in Lisbon", "how many replicas does the api have", False),
        ],
    )
    def test_related_texts_score_above_the_runtime_threshold(self, fact: str, query: str, related: bool) -> None:
        """Questions about a fact score above 0.3; unrelated text scores near zero."""
        score = cosine_similarity(embed_text(fact), embed_text(query))
        assert score is not None
        assert (score > 0.3) if related else (abs(score) < 0.1)

    def test_text_without_content_words_still_gets_a_vector(self) -> None:
        """Texts made only of stop words (or nothing) still embed to distinct unit vectors."""
        assert embed_text("what is it") != embed_text("who are you")
        assert math.isclose(math.fsum(x * x for x in embed_text("")), 1.0)


class TestEndpoint:
    @pytest.mark.parametrize("path", ["/v1/embeddings", "/embeddings"])
    async def test_answers_openai_shape(self, client: Client, path: str) -> None:
        """A list input answers one embedding per text with indexes, model and usage."""
        status, body = await _embed(client, {"model": "m", "input": ["one two", "three"]}, path)
        assert status == 200 and body["object"] == "list" and body["model"] == "m"
        assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", 0), ("embedding", 1)]
        assert body["data"][0]["embedding"] == pytest.approx(embed_text("one two"))
        assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}

    async def test_base64_is_little_endian_float32(self, client: Client) -> None:
        """encoding_format base64 returns the same vector packed as float32."""
        status, body = await _embed(
            client, {"model": "m", "input": "hello world", "encoding_format": "base64", "dimensions": 768}
        )
        raw = base64.b64decode(body["data"][0]["embedding"])
        decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
        assert status == 200 and decoded == pytest.approx(embed_text("hello world"), abs=1e-6)

    @pytest.mark.parametrize(
        "body",
        [
            {"model": "m"},
            {"model": "m", "input": []},
            {"model": "m", "input": [1, 2]},
            {"model": "m", "input": "x", "dimensions": 0},
            {"model": "m", "input": "x", "dimensions": 2**31},
            {"model": 1e300, "input": "x"},
            {"model": "m", "input": "x", "encoding_format": "hex"},
        ],
    )
    async def test_bad_requests_get_openai_errors(self, client: Client, body: Any) -> None:
        """Invalid requests answer 400 with an OpenAI error object."""
        status, answer = await _embed(client, body)
        assert status == 400 and answer["error"]["type"] == "invalid_request_error"

    async def test_authorization_presence_is_recorded(self, client: Client) -> None:
        """Calls record whether Authorization arrived and which headers came, not the key."""
        await _embed(client, {"model": "m", "input": "x"}, headers={"Authorization": "Bearer sk-secret"})
        await _embed(client, {"model": "m", "input": "y"})
        first, second = client.app[EMBEDDING].calls
        assert (first.authorization_present, second.authorization_present) == (True, False)
        assert "authorization" in first.header_names and "sk-secret" not in repr(first)


class TestFaults:
    async def test_constructor_fault_returns_the_body_verbatim(self, aiohttp_client: Any) -> None:
        """A configured status answers with the planted error body unchanged."""
        sentinel = '{"error": {"message": "SENTINEL-provider-41"}}'
        client = await aiohttp_client(create_embedding_app(faults=EmbeddingFaults(status=429, body=sentinel)))
        resp = await client.post("/v1/embeddings", json={"model": "m", "input": "x"})
        assert (resp.status, await resp.text()) == (429, sentinel)

    async def test_runtime_faults_can_be_set_and_cleared(self, client: Client) -> None:
        """POST /__devstack/faults switches failures on, and {} switches them off."""
        assert (await client.post("/__devstack/faults", json={"status": 503, "body": "SENTINEL down"})).status == 200
        resp = await client.post("/v1/embeddings", json={"model": "m", "input": "x"})
        assert (resp.status, await resp.text()) == (503, "SENTINEL down")
        await client.post("/__devstack/faults", json={})
        assert (await _embed(client, {"model": "m", "input": "x"}))[0] == 200

    @pytest.mark.parametrize("body", [{"status": "500"}, {"status": 42}, {"delay_s": "slow"}, [1]])
    async def test_bad_fault_settings_are_refused(self, client: Client, body: Any) -> None:
        """Malformed fault settings answer 400 and keep the provider working."""
        assert (await client.post("/__devstack/faults", json=body)).status == 400
        assert (await _embed(client, {"model": "m", "input": "x"}))[0] == 200

    async def test_a_delay_outlasts_a_short_client_timeout(self, aiohttp_client: Any) -> None:
        """An injected delay makes a caller with a shorter timeout give up."""
        client = await aiohttp_client(create_embedding_app(faults=EmbeddingFaults(delay_s=30)))
        with pytest.raises(asyncio.TimeoutError):
            async with asyncio.timeout(0.2):
                await client.post("/v1/embeddings", json={"model": "m", "input": "x"})
