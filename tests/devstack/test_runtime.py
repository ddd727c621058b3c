"""The simulated Python agent runtime makes the memory and embedding calls kagent's runtime would."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sidecar.dev.devstack import Devstack, RuntimeConfig, app_name
from sidecar.dev.devstack.embedding import EmbeddingFaults
from sidecar.dev.devstack.runtime import prefetch_queries
from tests.devstack.test_a2a import reply_text, rpc
from tests.support.devstack import Api

AGENT = "kagent/k8s-agent"
APP = "kagent__NS__k8s_agent"
LONG_FACT = "my favourite colour is teal and I live in Lisbon"


class TestPureRules:
    @pytest.mark.parametrize(
        ("ns", "name", "expected"),
        [
            ("kagent", "k8s-agent", "kagent__NS__k8s_agent"),
            ("my-team", "a-b-c", "my_team__NS__a_b_c"),
            ("ns", "plain", "ns__NS__plain"),
        ],
    )
    def test_app_name_replaces_hyphens(self, ns: str, name: str, expected: str) -> None:
        """app_name is <ns>__NS__<name> with every '-' turned into '_' (namespace too)."""
        assert app_name(ns, name) == expected

    @pytest.mark.parametrize(
        ("text", "queries"),
        [
            ("short question?", ["short question?"]),
            ("  padded  ", ["padded"]),
            ("", []),
            (
                "This first sentence is long enough to count. Tiny one! And this third sentence also qualifies?",
                ["This first sentence is long enough to count.", "And this third sentence also qualifies?"],
            ),
            (
                "No.Space.Splits here because nothing follows the dots with a space",
                ["No.Space.Splits here because nothing follows the dots with a space"],
            ),
        ],
    )
    def test_prefetch_splits_on_sentence_ends(self, text: str, queries: list[str]) -> None:
        """Sentences of 30+ characters each become a query; otherwise the whole text is one."""
        assert prefetch_queries(text) == queries


def _runtime(stack: Devstack, **extra: Any) -> RuntimeConfig:
    return RuntimeConfig(stack.kagent_url, stack.embedding_url, frozenset({AGENT}), **extra)


async def _send(
    api: Api, text: str, *, user: str | None = "alice", context: str | None = None, agent: str = AGENT, query: str = ""
) -> str:
    headers = {"X-User-Id": user} if user else {}
    status, body = await api.json("POST", f"/api/a2a/{agent}/{query}", rpc(text, context_id=context), headers=headers)
    assert status == 200
    return reply_text(body)


def _memory_calls(stack: Devstack) -> list[tuple[str, str]]:
    return [(r.method, r.raw_path) for r in stack.recorder.of_kind("memory")]


class TestRememberAndRecall:
    async def test_remember_saves_under_app_name_and_user(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """`remember:` embeds once and saves with X-Agent-Name=app_name and the caller's X-User-Id."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        reply = await _send(sqlite_api, f"remember: {LONG_FACT}")
        assert "save 201" in reply
        [row] = await sqlite_stack.store.rows()
        assert (row.agent_name, row.user_id, row.content) == (APP, "alice", LONG_FACT)
        save = sqlite_stack.recorder.of_kind("memory")[-1]
        assert (save.raw_path, save.agent_name_header, save.user_id_header) == ("/api/memories/sessions", APP, "alice")
        assert set(json.loads(save.body)) == {"agent_name", "user_id", "content", "vector"}

    async def test_a_new_conversation_recalls_the_saved_fact(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """A first turn about the fact prefetches it and the reply shows the recalled content."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        await _send(sqlite_api, f"remember: {LONG_FACT}")
        reply = await _send(sqlite_api, "Which colour do I like best, and is teal my favourite?")
        assert f"recalled: {LONG_FACT}" in reply
        search = json.loads(sqlite_stack.recorder.of_kind("memory")[-1].body)
        assert (search["agent_name"], search["user_id"], search["limit"], search["min_score"]) == (APP, "alice", 5, 0.3)

    async def test_other_users_do_not_recall_it(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """Another X-User-Id searches its own namespace and recalls nothing."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        await _send(sqlite_api, f"remember: {LONG_FACT}")
        reply = await _send(sqlite_api, "Which colour do I like best, and is teal my favourite?", user="bob")
        assert "recalled" not in reply and "search 200" in reply

    async def test_prefetch_runs_on_the_first_turn_of_a_context_only(
        self, sqlite_api: Api, sqlite_stack: Devstack
    ) -> None:
        """The second message of the same contextId makes no search."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        await _send(sqlite_api, "hello agent", context="ctx-1")
        reply = await _send(sqlite_api, "hello again", context="ctx-1")
        assert "memory calls" not in reply
        assert _memory_calls(sqlite_stack) == [("POST", "/api/memories/search")]

    async def test_each_long_sentence_is_searched(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """Two qualifying sentences make two embedding calls and two searches."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        await _send(sqlite_api, "Please check the nginx deployment now. Then tell me about my favourite colour!")
        assert _memory_calls(sqlite_stack) == [("POST", "/api/memories/search")] * 2
        assert len(sqlite_stack.embedding.calls) == 2

    async def test_autosave_sends_one_batch_for_all_facts(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """`autosave:` makes one embedding call with every fact and one batch save."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack, ttl_days=3))
        reply = await _send(sqlite_api, "autosave: likes tea; owns a cat ;; works nights", context="c")
        assert "save_batch 201" in reply
        assert sqlite_stack.embedding.calls[-1].inputs == ("likes tea", "owns a cat", "works nights")
        batch = json.loads(sqlite_stack.recorder.of_kind("memory")[-1].body)
        assert [i["ttl_days"] for i in batch["items"]] == [3, 3, 3]
        assert sorted(str(r.content) for r in await sqlite_stack.store.rows(agent_name=APP)) == [
            "likes tea",
            "owns a cat",
            "works nights",
        ]


class TestIdentityAndFailures:
    @pytest.mark.parametrize(
        ("query", "header", "user"),
        [
            ("?user_id=from-query", "from-header", "from-query"),
            ("", "from-header", "from-header"),
            ("", None, "admin@kagent.dev"),
        ],
    )
    async def test_user_follows_kagents_unsecure_precedence(
        self, sqlite_api: Api, sqlite_stack: Devstack, query: str, header: str | None, user: str
    ) -> None:
        """The runtime's user is the user_id query, else X-User-Id, else admin@kagent.dev."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        await _send(sqlite_api, "remember: x", user=header, query=query)
        assert {r.user_id for r in await sqlite_stack.store.rows()} == {user}

    async def test_agents_without_memory_make_no_calls(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """An agent not listed in the runtime only echoes."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        reply = await _send(sqlite_api, "remember: x", agent="kagent/plain")
        assert reply == "kagent/plain received: remember: x"
        assert _memory_calls(sqlite_stack) == [] and sqlite_stack.embedding.calls == []

    async def test_embedding_errors_are_swallowed(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """A failing provider still lets the turn answer; no memory call follows a failed embedding."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        sqlite_stack.embedding.faults = EmbeddingFaults(status=500, body="provider down")
        reply = await _send(sqlite_api, "remember: x")
        assert "embeddings 500" in reply and _memory_calls(sqlite_stack) == []

    async def test_memory_errors_are_swallowed(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """A 500 from the memory API shows in the reply but does not fail the turn."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack))
        await sqlite_api.json("POST", "/__devstack/db-fault", {"ops": ["insert"]})
        assert "save 500" in await _send(sqlite_api, "remember: x", context="c")

    async def test_unreachable_targets_read_as_errors(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """A memory URL nobody listens on is reported as an error, not raised."""
        sqlite_stack.set_runtime(RuntimeConfig("http://127.0.0.1:9", sqlite_stack.embedding_url, frozenset({AGENT})))
        assert "search error" in await _send(sqlite_api, "hello")

    async def test_tokens_are_sent_where_configured(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """The SA token goes to the controller and the API key to the provider, each only there."""
        sqlite_stack.set_runtime(_runtime(sqlite_stack, sa_token="sa", embedding_api_key="key"))
        await _send(sqlite_api, "hello")
        assert sqlite_stack.recorder.of_kind("memory")[0].header("Authorization") == "Bearer sa"
        call = sqlite_stack.embedding.calls[0]
        assert call.authorization_present and "x-agent-name" not in call.header_names

    async def test_the_admin_api_points_the_runtime(self, sqlite_api: Api, sqlite_stack: Devstack) -> None:
        """POST /__devstack/runtime turns the runtime on and DELETE turns it off."""
        body = {
            "memory_base_url": sqlite_stack.kagent_url,
            "embedding_base_url": sqlite_stack.embedding_url,
            "memory_agents": [AGENT],
        }
        assert (await sqlite_api.json("POST", "/__devstack/runtime", body))[0] == 200
        assert "memory calls" in await _send(sqlite_api, "hello")
        assert (await sqlite_api.json("DELETE", "/__devstack/runtime"))[0] == 200
        assert "memory calls" not in await _send(sqlite_api, "hello")
