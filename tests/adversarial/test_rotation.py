"""Family 9: exact erasure without database credentials (namespace rotation, issue 16).

Under the ``rest`` adapter with an embedding provider, forget-one rotates the scope's namespace:
what stays is re-saved under a fresh storage key and the old one is deleted whole. The attacks:
read the forgotten text through a key learnt before the rotation, steer the model memgov
re-embeds with from an anonymous embedding call, make kagent only pretend to delete, and time a
search so that it straddles the switch.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.support.adversarial import AGENTS, PINNED, Launch, Target, listed_entries
from tests.support.harness import AGENT, APP, MODEL
from tests.support.sentinel import make_sentinel

EMBED = f"/embeddings/{AGENT}/v1/embeddings"


async def _scope_of_two(t: Target, kept: str, doomed: str) -> tuple[str, str, str]:
    """A consented scope holding two saved facts: (scope id, session key, id of the one to forget)."""
    scope_id = await t.consented_scope()
    key = await t.session_key()
    for text in (kept, doomed):
        status, _, _ = await t.save(key, text)
        assert status == 201
    return scope_id, key, next(e["id"] for e in await listed_entries(t, scope_id) if e["text"] == doomed)


class TestRotation:
    async def test_a_key_learnt_before_the_rotation_reads_nothing(self, launch: Launch) -> None:
        """Listing kagent around memgov with the storage key the scope had (say, from kagent's UI) finds nothing
        after forget-one, and the forgotten text is in no row of kagent's table at all."""
        t = await launch(agents=PINNED)
        secret = make_sentinel("forgotten")
        scope_id, key, doomed = await _scope_of_two(t, "lives in Lisbon", f"my PIN is {secret}")
        learnt = {r.user_id for r in await t.rows()}
        status, record = await t.control("DELETE", f"/v1/scopes/{scope_id}/entries/{doomed}")
        assert (status, record["physical_deletion"]) == (200, "complete"), record
        (old_key,) = learnt
        status, listed = await t.kagent_get("/api/memories?" + urlencode({"agent_name": APP, "user_id": old_key}))
        assert (status, listed) == (200, [])
        assert all(secret not in (r.content or "") for r in await t.rows())
        assert {r.user_id for r in await t.rows()}.isdisjoint(learnt)
        status, found, _ = await t.search(key, "what is my PIN")
        assert status == 200 and [r["content"] for r in found] == ["lives in Lisbon"]

    async def test_an_anonymous_embedding_call_cannot_steer_a_pinned_model(self, launch: Launch) -> None:
        """Any in-cluster client can call the embedding route; with the model pinned, the rotation still
        re-embeds with it, and a model name shaped like content is refused and never recorded anywhere."""
        t = await launch(agents=PINNED)
        scope_id = await t.consented_scope()
        key = await t.session_key()
        for model, expected in (("attacker-model", 200), ("remember: my PIN is 1234", 400)):
            status, _, _ = await t.post(EMBED, {"model": model, "input": ["hello"]})
            assert status == expected
        for text in ("lives in Lisbon", "likes green tea"):
            await t.save(key, text)
        doomed = next(e["id"] for e in await listed_entries(t, scope_id) if e["text"] == "likes green tea")
        calls = len(t.dev.embedding.calls)
        status, record = await t.control("DELETE", f"/v1/scopes/{scope_id}/entries/{doomed}")
        assert status == 200 and record["physical_deletion"] == "complete"
        assert [c.model for c in t.dev.embedding.calls[calls:]] == [MODEL]
        dump = t.state_dump()
        assert "attacker-model" not in dump and "PIN is 1234" not in dump

    @pytest.mark.parametrize("workers", [1, 2])
    async def test_a_poisoning_embedding_call_changes_no_rotation(self, launch: Launch, workers: int) -> None:
        """Anonymous calls naming another model, 8 dimensions or base64 (to any worker) change nothing: forget-one
        re-embeds with the configured model and erases exactly, its evidence complete and verified."""
        t = await launch(agents=PINNED, listen={"workers": workers})
        scope_id, _, doomed = await _scope_of_two(t, "lives in Lisbon", "likes green tea")
        poison: list[dict[str, Any]] = [
            {"model": "attacker-model", "input": ["hello"], "dimensions": 8},
            {"model": MODEL, "input": ["hello"], "dimensions": 8, "encoding_format": "base64"},
        ]
        for body in poison * 3:
            status, _, _ = await t.post(EMBED, body)
            assert status == 200
        calls = len(t.dev.embedding.calls)
        status, record = await t.control("DELETE", f"/v1/scopes/{scope_id}/entries/{doomed}")
        assert (status, record["physical_deletion"]) == (200, "complete"), record
        assert record["rotated_by"]["state"] == "verified"
        assert record["verification"]["physically_absent"] is True
        assert [(c.model, c.body_keys) for c in t.dev.embedding.calls[calls:]] == [
            (MODEL, {"model", "input", "dimensions"})
        ]
        assert [r.content for r in await t.rows()] == ["lives in Lisbon"]
        async with t.http.get(t.gw.ops_url + "/readyz") as resp:
            assert (await resp.json())["checks"]["rotation"]["agents_without_model"] == []

    async def test_without_a_configured_model_traffic_never_supplies_one(self, launch: Launch) -> None:
        """No model configured: a model an anonymous call names is never used to re-embed; forget-one names
        embedding_model_unknown, and /readyz and the metrics name what is missing."""
        t = await launch()
        scope_id, _, doomed = await _scope_of_two(t, "lives in Lisbon", "likes green tea")
        status, _, _ = await t.post(EMBED, {"model": MODEL, "input": ["hello"], "dimensions": 768})
        assert status == 200
        calls = len(t.dev.embedding.calls)
        status, record = await t.control("DELETE", f"/v1/scopes/{scope_id}/entries/{doomed}")
        assert (status, record["physical_deletion"]) == (200, "pending_namespace_clear"), record
        assert record["rotated_by"]["failure_reason"] == "embedding_model_unknown"
        assert t.dev.embedding.calls[calls:] == []
        async with t.http.get(t.gw.ops_url + "/readyz") as resp:
            ready = await resp.json()
        assert resp.status == 200 and ready["checks"]["rotation"] == {
            "ok": True,
            "enabled": True,
            "agents_without_model": sorted(AGENTS),
        }
        async with t.http.get(t.gw.ops_url + "/metrics") as resp:
            assert f"memgov_rotation_agents_without_model {float(len(AGENTS))}" in await resp.text()

    async def test_a_delete_kagent_only_pretends_never_completes_the_evidence(self, launch: Launch) -> None:
        """kagent answers 200 to the old namespace's delete but keeps the rows: the rotation's read-back fails
        and the forget-one evidence stays pending, naming the reason; nothing claims physical absence."""
        t = await launch(agents=PINNED, gated=True)
        assert t.gate is not None
        scope_id, _, doomed = await _scope_of_two(t, "lives in Lisbon", "likes green tea")
        t.gate.pretend = lambda r: r.method == "DELETE"
        status, record = await t.control("DELETE", f"/v1/scopes/{scope_id}/entries/{doomed}")
        assert status == 200 and record["state"] == "verified"
        assert record["physical_deletion"] == "pending_namespace_clear"
        assert record["verification"]["physically_absent"] is not True
        assert (record["rotated_by"]["state"], record["rotated_by"]["failure_reason"]) == (
            "failed",
            "verification_failed",
        )
        assert doomed in {r.id for r in await t.rows()}

    async def test_a_search_straddling_the_switch_still_finds_the_keptlisted_entries(self, launch: Launch) -> None:
        """A search that reaches kagent only after the rotation deleted the namespace it was sent for answers
        from the new one: never empty for a live scope, never the forgotten entry."""
        t = await launch(agents=PINNED, gated=True)
        assert t.gate is not None
        scope_id, key, doomed = await _scope_of_two(t, "likes green tea", "drinks green tea daily")
        t.gate.hold = lambda r: r.path == "/api/memories/search"
        searching = asyncio.create_task(t.search(key, "green tea"))
        await t.gate.arrived.wait()
        t.gate.hold = None  # only the first search waits; the rotation runs past it
        status, record = await t.control("DELETE", f"/v1/scopes/{scope_id}/entries/{doomed}")
        assert status == 200 and record["physical_deletion"] == "complete"
        t.gate.release.set()
        status, found, _ = await searching
        assert status == 200 and [r["content"] for r in found] == ["likes green tea"]
