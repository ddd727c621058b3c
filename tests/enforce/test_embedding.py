"""The governed embedding route: consent-gated per agent, size-limited, budgeted, errors replaced."""

from __future__ import annotations

import pytest

from tests.support.stack import APP

ROUTE = "/embeddings/kagent/k8s-agent/v1/embeddings"


async def embed(stack, inputs, *, path=ROUTE, headers=None):
    hdrs = {
        "Authorization": "Bearer sk-provider-key",
        "X-User-Id": "mg1.whatever",
        "X-Agent-Name": APP,
        **(headers or {}),
    }
    async with stack.http.post(
        stack.gw.data_url + path, json={"model": "m", "input": inputs, "dimensions": 768}, headers=hdrs
    ) as resp:
        return resp.status, await resp.json(content_type=None), dict(resp.headers)


class TestEmbedding:
    async def test_no_enabled_scope_no_embedding(self, stack):
        """Before anyone consented for this agent, embeddings are refused and the provider never called."""
        await stack.scope(consent=False)
        status, body, _ = await embed(stack, ["hello"])
        assert (status, body["error"]) == (403, "consent_missing")
        assert stack.dev.embedding.calls == []

    async def test_forwarded_with_provider_key_and_without_kagent_headers(self, stack):
        """With consent the call reaches the provider with its API key but without kagent's user headers."""
        await stack.scope()
        status, body, headers = await embed(stack, ["hello", "world"])
        assert status == 200 and len(body["data"]) == 2 and len(body["data"][0]["embedding"]) == 768
        assert headers["X-Memgov-Decision"].startswith("forward")
        call = stack.dev.embedding.calls[-1]
        assert call.authorization_present
        assert "x-user-id" not in {h.lower() for h in call.header_names}
        assert "x-agent-name" not in {h.lower() for h in call.header_names}

    @pytest.mark.parametrize(("text", "status"), [("é" * 256, 200), ("é" * 256 + "x", 403)])
    async def test_item_size(self, stack, text, status):
        """Each input is at most 512 UTF-8 bytes."""
        await stack.scope()
        got, body, _ = await embed(stack, ["short", text])
        assert got == status
        if status == 403:
            assert body["error"] == "embedding_item_too_large"

    @pytest.mark.parametrize(("count", "status"), [(10, 200), (11, 403)])
    async def test_item_count(self, stack, count, status):
        """One embedding call embeds at most 10 items (an auto-save's facts)."""
        await stack.scope()
        got, body, _ = await embed(stack, [f"item {i}" for i in range(count)])
        assert got == status
        if status == 403:
            assert body["error"] == "batch_too_large"

    async def test_agent_without_memory(self, stack):
        """Agents not configured for memory get no embedding route."""
        await stack.scope()
        status, _body, _ = await embed(stack, ["x"], path="/embeddings/kagent/plain/v1/embeddings")
        assert status == 403

    async def test_agent_budget(self, make_stack, tmp_path):
        """Items are charged to the agent's hourly embedding budget."""
        import shutil

        pack = tmp_path / "pack"
        shutil.copytree("policies", pack)
        path = pack / "data" / "limits.yaml"
        path.write_text(
            path.read_text().replace("embedding_items_per_agent_hour: 600", "embedding_items_per_agent_hour: 3")
        )
        stack = await make_stack(policy={"dir": str(pack), "reload_interval_s": 0})
        await stack.scope()
        assert (await embed(stack, ["a", "b"]))[0] == 200
        status, body, _ = await embed(stack, ["c", "d"])
        assert (status, body["error"]) == (403, "hourly_budget_exhausted")

    async def test_agent_limit_refuses_the_51st_item(self, make_stack, tmp_path):
        """limits.yaml caps this agent at 50 items an hour: fifty pass, the 51st is refused and never embedded."""
        import shutil

        pack = tmp_path / "pack"
        shutil.copytree("policies", pack)
        path = pack / "data" / "limits.yaml"
        capped = "agent_limits:\n  - {agents: [kagent/k8s-agent], embedding_items_per_agent_hour: 50}\n"
        path.write_text(path.read_text().replace("agent_limits: []\n", capped))
        stack = await make_stack(policy={"dir": str(pack), "reload_interval_s": 0})
        await stack.scope()
        for call in range(5):
            status, _body, headers = await embed(stack, [f"item {call}-{i}" for i in range(10)])
            assert status == 200 and headers["X-Memgov-Decision"].startswith("forward")
        status, body, headers = await embed(stack, ["the fifty-first item"])
        assert (status, body["error"], set(body)) == (403, "hourly_budget_exhausted", {"error", "decision_id"})
        assert headers["X-Memgov-Decision"].startswith("deny; reason=hourly_budget_exhausted; id=d_")
        assert sum(len(c.inputs) for c in stack.dev.embedding.calls) == 50

    async def test_malformed_input(self, stack):
        """Token arrays and other shapes are refused as bad_request."""
        await stack.scope()
        status, body, _ = await embed(stack, [[1, 2, 3]])
        assert (status, body["error"]) == (400, "bad_request")

    @pytest.mark.parametrize(
        "model",
        ["remember: SNTLmodel\u0000", "text embedding", 'm"x', "modèle", "-lead", "m" * 129, "", 7, None],
    )
    async def test_a_model_name_that_could_carry_text_is_refused(self, stack, model):
        """Providers echo the model name in their answer: one that is not a model name is refused before
        any budget or provider call, so no text of the caller's comes back through it."""
        await stack.scope()
        hdrs = {"Authorization": "Bearer sk-provider-key", "X-User-Id": "mg1.whatever", "X-Agent-Name": APP}
        async with stack.http.post(
            stack.gw.data_url + ROUTE, json={"model": model, "input": ["hello"]}, headers=hdrs
        ) as resp:
            status, text = resp.status, await resp.text()
        assert (status, '"error": "bad_request"' in text or '"error":"bad_request"' in text) == (400, True)
        assert stack.dev.embedding.calls == []
        if isinstance(model, str) and model:
            assert model not in text

    @pytest.mark.parametrize(
        "model", ["text-embedding-3-small", "ft:text-embedding-3-small:org:x:1", "org/model", "m@001"]
    )
    async def test_model_names_providers_use_are_forwarded(self, stack, model):
        await stack.scope()
        hdrs = {"Authorization": "Bearer sk-provider-key", "X-User-Id": "mg1.whatever", "X-Agent-Name": APP}
        async with stack.http.post(
            stack.gw.data_url + ROUTE, json={"model": model, "input": ["hello"]}, headers=hdrs
        ) as resp:
            assert resp.status == 200

    async def test_metering_counts_items(self, stack):
        """Admitted embedding items are metered separately from model tokens."""
        from sidecar.metrics import MEMORY_OPERATIONS

        await stack.scope()
        before = MEMORY_OPERATIONS.labels("embedding")._value.get()
        await embed(stack, ["a", "b", "c"])
        assert MEMORY_OPERATIONS.labels("embedding")._value.get() - before == 3
