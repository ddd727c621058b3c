"""Governed memory calls from agent runtimes, through the real gateway against the kagent stand-in."""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest

from sidecar.dev.devstack.store import DbFault, NewMemory
from tests.support.stack import ALICE, APP, BOB, OTHER_APP, ROOM_B


def reason(headers) -> str:
    return headers["X-Memgov-Decision"].split(";")[1].strip().removeprefix("reason=")


async def _stack_with_limits(make_stack, tmp_path, old: str, new: str):
    """A stack whose pack has ``old`` replaced by ``new`` in data/limits.yaml, with a consented scope."""
    pack = tmp_path / "pack"
    shutil.copytree("policies", pack)
    path = pack / "data" / "limits.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    stack = await make_stack(policy={"dir": str(pack), "reload_interval_s": 0})
    await stack.scope()
    return stack


async def _searches(stack, n: int) -> list:
    key = await stack.session_key()
    return [await stack.search(key, "q") for _ in range(n)]


class TestSave:
    @pytest.mark.kagent
    async def test_save_lands_under_the_storage_key_with_a_hard_expiry(self, stack):
        """kagent stores mgs1.<scope>.<gen> (never the MXID) with ttl clamped to 7 days; the ledger knows the id."""
        scope = await stack.scope()
        key = await stack.session_key()
        status, body, headers = await stack.save(key, "likes green tea", ttl_days=30)
        assert status == 201 and headers["X-Memgov-Decision"].startswith("forward")
        rows = await stack.rows()
        assert [(r.id, r.user_id, r.agent_name) for r in rows] == [(body["id"], scope.namespace.storage_key, APP)]
        assert rows[0].expires_at - rows[0].created_at <= timedelta(days=7, seconds=1)
        entry = (await stack.parts.store.ledger.entries_of_scope(scope.scope_id))[0]
        assert entry.entry_id == body["id"]
        assert timedelta(days=7) - timedelta(seconds=5) <= entry.expires_at - entry.created_at <= timedelta(days=7)

    @pytest.mark.parametrize(("content", "status"), [("é" * 256, 201), ("é" * 256 + "a", 403), ("a" * 512, 201)])
    async def test_fact_size_is_utf8_bytes(self, stack, content, status):
        """512 UTF-8 bytes pass, 513 are refused with fact_too_large (multi-byte characters count as bytes)."""
        await stack.scope()
        key = await stack.session_key()
        got, body, _headers = await stack.save(key, content)
        assert got == status
        if status == 403:
            assert body["error"] == "fact_too_large" and await stack.rows() == []

    async def test_explicit_saves_are_rate_limited(self, stack):
        """Explicit saves share the 6/min, burst-3 sender+agent bucket."""
        await stack.scope()
        key = await stack.session_key()
        statuses = [(await stack.save(key, f"fact {i}"))[0] for i in range(4)]
        assert statuses[:3] == [201, 201, 201]
        status, body, _ = await stack.save(key, "one too many")
        assert status == 403 and body["error"] == "rate_limited"

    @pytest.mark.parametrize(("live", "status"), [(99, 201), (100, 403)])
    async def test_entry_cap_refuses_never_evicts(self, stack, live, status):
        """At 99 live entries a save fits; at 100 it is refused and nothing is evicted."""
        scope = await stack.scope()
        key = await stack.session_key()
        store, now = stack.parts.store, stack.clock()
        slots = await store.ledger.reserve_entries(
            scope.scope_id, scope.generation, scope.namespace.ns_id, live, 100, now
        )
        for i, slot in enumerate(slots):
            await store.ledger.fill_entry(slot, f"pre-{i}", now, now + timedelta(days=7))
        got, body, _ = await stack.save(key, "the next fact")
        assert got == status
        assert await store.ledger.live_count(scope.scope_id, stack.clock()) == min(live + 1, 100)
        if status == 403:
            assert body["error"] == "entry_cap_reached"

    @pytest.mark.kagent
    async def test_withdrawal_during_the_write_undoes_it(self, stack, monkeypatch):
        """A save whose scope is withdrawn while kagent writes is deleted at once and refused."""
        scope = await stack.scope()
        key = await stack.session_key()
        store = stack.parts.store
        withdraw_around(stack, monkeypatch, scope, "finish_write", before=True)
        status, body, _ = await stack.save(key, "written while consent was withdrawn")
        assert status == 403 and body["error"] == "stale_generation"
        assert await stack.rows() == []
        assert (
            await store.ledger.filter_live(
                scope.scope_id,
                scope.generation,
                [e.entry_id for e in await store.ledger.entries_of_scope(scope.scope_id)],
                stack.clock(),
            )
            == set()
        )

    @pytest.mark.kagent
    async def test_an_all_zero_vector_is_refused_and_the_namespace_stays_searchable(self, stack):
        """R-10: a zero vector never reaches kagent, where one such row makes every search of its namespace fail."""
        await stack.scope()
        key = await stack.session_key()
        assert (await stack.save(key, "a real fact about tea"))[0] == 201
        zero = {"agent_name": APP, "user_id": key, "content": "zero", "vector": [0.0] * 768}
        status, _, _ = await stack.memory("POST", "/api/memories/sessions", zero)
        assert 400 <= status < 500
        status, rows, _ = await stack.search(key, "a real fact about tea")
        assert status == 200 and [r["content"] for r in rows] == ["a real fact about tea"]

    @pytest.mark.kagent
    async def test_no_row_lands_under_another_agent_spelling(self, stack):
        """D1: a save spelled kagent__NS__k8s-agent is refused or stored under the scope's one app_name."""
        await stack.scope()
        key = await stack.session_key()
        hyphen = APP.replace("k8s_agent", "k8s-agent")
        status, _, _ = await stack.save(key, "spelled with a hyphen", agent_name=hyphen, agent_header=hyphen)
        assert status == 201 or 400 <= status < 500
        assert [r.agent_name for r in await stack.rows()] == ([APP] if status == 201 else [])


class TestBatch:
    def _batch(self, key, facts, agent_name=APP):
        return {
            "items": [{"agent_name": agent_name, "user_id": key, "content": f, "vector": [0.01] * 768} for f in facts]
        }

    @pytest.mark.kagent
    async def test_batch_is_saved_as_single_entries(self, stack):
        """An auto-save batch answers 201 {"count": n} and every fact gets a ledger row."""
        scope = await stack.scope()
        key = await stack.session_key()
        status, body, _ = await stack.memory("POST", "/api/memories/sessions/batch", self._batch(key, ["a", "b", "c"]))
        assert (status, body) == (201, {"count": 3})
        assert len(await stack.parts.store.ledger.entries_of_scope(scope.scope_id)) == 3
        assert len(await stack.rows()) == 3

    @pytest.mark.kagent
    async def test_more_than_ten_facts_is_refused_whole(self, stack):
        """Eleven facts → 403 batch_too_large, nothing written."""
        await stack.scope()
        key = await stack.session_key()
        status, body, _ = await stack.memory(
            "POST", "/api/memories/sessions/batch", self._batch(key, [f"f{i}" for i in range(11)])
        )
        assert (status, body["error"]) == (403, "batch_too_large") and await stack.rows() == []

    async def test_partial_failure_leaves_nothing_readable(self, stack):
        """kagent failing on the second fact → content-free 502 naming kagent's 500; the first fact is never
        readable."""
        scope = await stack.scope()
        key = await stack.session_key()
        stack.dev.store.fault = DbFault(message="disk full", ops=frozenset({"insert"}), after=1, times=1)
        status, body, _ = await stack.memory("POST", "/api/memories/sessions/batch", self._batch(key, ["x", "y"]))
        assert status == 502 and body == {"error": "upstream_error", "status": 500, "decision_id": body["decision_id"]}
        entries = await stack.parts.store.ledger.entries_of_scope(scope.scope_id)
        assert len(entries) == 1 and entries[0].tombstoned_at is not None
        status, rows, _ = await stack.search(key, "x")
        assert rows == []


class TestSearch:
    @pytest.mark.kagent
    async def test_search_finds_what_was_saved(self, stack):
        """A saved fact comes back to the same scope."""
        await stack.scope()
        key = await stack.session_key()
        status, body, _ = await stack.save(key, "alice likes green tea")
        status, rows, _headers = await stack.search(key, "green tea")
        assert status == 200 and [r["id"] for r in rows] == [body["id"]]
        assert rows[0]["content"] == "alice likes green tea"

    @pytest.mark.kagent
    async def test_rows_unknown_to_the_ledger_are_filtered(self, stack):
        """A row written around memgov under the same storage key is never returned."""
        scope = await stack.scope()
        key = await stack.session_key()
        await stack.dev.store.insert(
            NewMemory(
                agent_name=APP,
                user_id=scope.namespace.storage_key,
                content="planted",
                embedding=[0.01] * 768,
                metadata="{}",
                expires_at=stack.clock() + timedelta(days=15),
            )
        )
        status, rows, _ = await stack.search(key, "planted")
        assert status == 200 and rows == []

    @pytest.mark.kagent
    async def test_expired_entries_disappear_while_kagent_still_holds_them(self, stack):
        """One second past the hard expiry the entry is unreadable, though kagent's row remains."""
        await stack.scope()
        key = await stack.session_key()
        await stack.save(key, "short lived fact")
        stack.clock.advance(7 * 86400 + 1)
        status, rows, _ = await stack.search(key, "short lived fact")
        assert status == 200 and rows == []
        assert len(await stack.rows()) == 1

    async def test_limit_is_clamped(self, stack):
        """kagent has no maximum limit; memgov forwards at most search_max_limit."""
        await stack.scope()
        key = await stack.session_key()
        await stack.search(key, "anything", limit=1000)
        forwarded = [r for r in stack.dev.recorder.of_kind("memory") if r.raw_path == "/api/memories/search"][-1]
        import json

        assert json.loads(forwarded.body)["limit"] == 10

    async def test_prefetch_is_limited_per_new_conversation(self, stack):
        """A new conversation may prefetch 8 times; the 9th search answers [] with prefetch_limit."""
        await stack.scope()
        key = await stack.session_key()  # a new conversation: opens the prefetch window
        results = [await stack.search(key, f"sentence number {i}") for i in range(9)]
        assert [r[0] for r in results] == [200] * 9
        assert [reason(r[2]) for r in results[:8]] == ["allowed"] * 8
        assert reason(results[8][2]) == "prefetch_limit" and results[8][1] == []

    async def test_loads_outside_a_new_conversation_are_rate_limited(self, stack):
        """Searches in a continuing conversation are explicit loads: burst 3, then []."""
        scope = await stack.scope()
        _resp, seen = await stack.invoke(context=stack.context(), context_id="existing-conversation")
        key = seen.user_id_header
        results = [await stack.search(key, "q") for _ in range(4)]
        assert [reason(r[2]) for r in results] == ["allowed"] * 3 + ["rate_limited"]
        assert scope is not None

    async def test_hourly_budget(self, make_stack, tmp_path):
        """Every search costs a retrieval and an embedding item; the hourly scope budget runs out."""
        stack = await _stack_with_limits(make_stack, tmp_path, "hourly_operations: 60\n", "hourly_operations: 6\n")
        results = await _searches(stack, 4)
        assert [reason(r[2]) for r in results] == ["allowed"] * 3 + ["hourly_budget_exhausted"]

    async def test_agent_hourly_operations_cap(self, make_stack, tmp_path):
        """limits.yaml caps this agent's scopes at 6 operations an hour (global 60): the policy refuses past it."""
        capped = "agent_limits:\n  - {agents: [kagent/k8s-agent], hourly_operations: 6}\n"
        stack = await _stack_with_limits(make_stack, tmp_path, "agent_limits: []\n", capped)
        results = await _searches(stack, 4)
        assert [reason(r[2]) for r in results] == ["allowed"] * 3 + ["hourly_budget_exhausted"]
        assert results[3][1] == []
        # An invocation needs one more operation than the scope has left: it chats without memory.
        resp, _seen = await stack.invoke(context=stack.context())
        assert reason(resp.headers) == "hourly_budget_exhausted"
        assert resp.headers["X-Memgov-Decision"].startswith("rewrite_disabled")


class TestIsolation:
    @pytest.mark.kagent
    async def test_stale_generation_after_withdrawal(self, stack):
        """After withdrawal the old key reads nothing and writes nothing."""
        scope = await stack.scope()
        key = await stack.session_key()
        await stack.save(key, "before withdrawal")
        await stack.parts.store.scopes.withdraw(scope.scope_id, stack.clock())
        status, rows, headers = await stack.search(key, "before withdrawal")
        assert (status, rows) == (200, []) and reason(headers) == "consent_disabled"
        status, body, _ = await stack.save(key, "after withdrawal")
        assert status == 403 and body["error"] in {"consent_disabled", "stale_generation"}

    @pytest.mark.kagent
    async def test_regranted_scope_does_not_see_the_old_generation(self, stack):
        """Re-consent starts a new generation: old entries live in a dead namespace."""
        scope = await stack.scope()
        old = await stack.session_key()
        await stack.save(old, "generation one fact")
        await stack.parts.store.scopes.withdraw(scope.scope_id, stack.clock())
        await stack.parts.store.scopes.grant(scope.scope_id, "again", "v1", stack.clock())
        new = await stack.session_key()
        assert new != old
        _, rows, _ = await stack.search(new, "generation one fact")
        assert rows == []
        _status, rows, headers = await stack.search(old, "generation one fact")
        assert rows == [] and reason(headers) == "stale_generation"

    @pytest.mark.kagent
    async def test_forged_key(self, stack):
        """A key with a wrong MAC is key_invalid; a raw MXID as user_id is key_invalid."""
        await stack.scope()
        key = await stack.session_key()
        forged = key[:-2] + ("AA" if not key.endswith("AA") else "BB")
        for user in (forged, ALICE):
            status, body, _ = await stack.save(user, "x")
            assert (status, body["error"]) == (403, "key_invalid")
            status, rows, headers = await stack.search(user, "x")
            assert rows == [] and reason(headers) == "key_invalid"

    async def test_header_and_body_must_agree(self, stack):
        """X-User-Id naming someone else than the body's key is refused."""
        await stack.scope()
        key = await stack.session_key()
        status, body, _ = await stack.save(key, "x", user_header=ALICE)
        assert (status, body["error"]) == (403, "key_invalid")

    @pytest.mark.parametrize(("agent_name", "agent_header"), [(OTHER_APP, APP), (APP, OTHER_APP), (OTHER_APP, None)])
    async def test_cross_agent(self, stack, agent_name, agent_header):
        """Alice's key for one agent cannot be used under another agent's name."""
        await stack.scope()
        key = await stack.session_key()
        status, body, _ = await stack.save(key, "x", agent_name=agent_name, agent_header=agent_header)
        assert (status, body["error"]) == (403, "agent_mismatch")

    @pytest.mark.kagent
    async def test_cross_user_and_cross_room(self, stack):
        """Bob's scope and Alice's second room see none of Alice's control-room facts."""
        await stack.scope()
        await stack.scope(mxid=BOB)
        await stack.scope(room_id=ROOM_B)
        alice = await stack.session_key()
        bob = await stack.session_key(sub=BOB)
        alice_b = await stack.session_key(room_id=ROOM_B)
        await stack.save(alice, "alice private fact about tea")
        for other in (bob, alice_b):
            status, rows, _ = await stack.search(other, "alice private fact about tea")
            assert status == 200 and rows == []

    @pytest.mark.parametrize("method", ["GET", "DELETE"])
    async def test_list_and_delete_all_are_control_plane_only(self, stack, method):
        """Whole-namespace list and delete are refused on the data plane."""
        await stack.scope()
        status, body, _ = await stack.memory(method, f"/api/memories?agent_name={APP}&user_id=x")
        assert (status, body["error"]) == (403, "route_denied")


class TestFencedBetweenDecisionAndWrite:
    @pytest.mark.kagent
    @pytest.mark.parametrize("before", [True, False])
    async def test_withdrawal_around_the_admission_refuses_with_its_reason(self, stack, monkeypatch, before):
        """A withdrawal just before the admission, or between it (slots and in-flight record held) and the
        forward, is a 403 with the fence's reason and leaves no row."""
        scope = await stack.scope()
        key = await stack.session_key()
        withdraw_around(stack, monkeypatch, scope, "admit", before=before)
        status, body, _ = await stack.save(key, "decided, then fenced")
        assert status == 403 and body["error"] in {"consent_disabled", "stale_generation"}
        assert await stack.rows() == []


def withdraw_around(stack, monkeypatch, scope, method: str, *, before: bool) -> None:
    """Make one admission step withdraw the scope just before (or after) it runs: a race, made deterministic."""
    store = stack.parts.store
    original = getattr(store.admission, method)

    async def racing(*args, **kwargs):
        if before:
            await store.scopes.withdraw(scope.scope_id, stack.clock())
            return await original(*args, **kwargs)
        result = await original(*args, **kwargs)
        await store.scopes.withdraw(scope.scope_id, stack.clock())
        return result

    monkeypatch.setattr(store.admission, method, racing)
