"""Agent names that differ only by ``-`` and ``_``, where kagent v0.10's search matches both spellings.

kagent stores memory under ``<ns>__NS__<name>`` with ``-`` turned into ``_`` (the runtimes' spelling);
its UI and earlier memgov releases used the raw spelling. v0.9.11's search matched ``agent_name``
exactly; v0.10 matches ``agent_name = $name OR agent_name = replace($name, '-', '_')``. Through memgov
that widening must neither let one agent read another's rows nor let an erasure's read-back miss a
spelling. Each test runs on both stand-in models and on both releases of kagent itself, in both
auth modes.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from sidecar.control.client import ControlClient
from sidecar.dev.devstack.realkagent import AUTH_MODES
from sidecar.dev.devstack.store import NewMemory
from sidecar.dev.devstack.vectors import embed_text
from sidecar.identity.tokens import mint_subject
from tests.support.stack import AGENT, ALICE, APP, Stack
from tests.support.upstream import runtime_headers

#: AGENT's app_name in the raw spelling (hyphen kept), as kagent's UI sends it.
RAW_APP = APP.replace("k8s_agent", "k8s-agent")
#: An agent whose reference differs from AGENT's only by ``_`` for ``-``: kagent gives both one app_name.
TWIN = "kagent/k8s_agent"
TWIN_GHOST = "@k8s_agent:example.org"

pytestmark = pytest.mark.kagent(standins=("0.9", "0.10"), auth_modes=AUTH_MODES)


async def _plant(stack: Stack, agent_name: str, storage_key: str, content: str) -> None:
    """A row written around memgov, straight into kagent's table."""
    expires = stack.clock() + timedelta(days=3)
    await stack.dev.store.insert(NewMemory(agent_name, storage_key, content, embed_text(content), "{}", expires))


def _reason(headers: dict[str, str]) -> str:
    return headers["X-Memgov-Decision"].split(";")[1].strip().removeprefix("reason=")


async def _kagent_search(stack: Stack, agent_name: str, user_id: str, query: str) -> list[str]:
    """kagent's own search, asked directly (around memgov) as an agent runtime would."""
    body = {"agent_name": agent_name, "user_id": user_id, "vector": embed_text(query), "limit": 10}
    headers = runtime_headers(stack.upstream, AGENT)
    async with stack.http.post(stack.dev.kagent_url + "/api/memories/search", json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        return sorted(hit["content"] for hit in await resp.json())


class TestTwinAgents:
    async def test_neither_twin_reads_the_others_rows(self, make_stack) -> None:
        """With kagent/k8s-agent and kagent/k8s_agent both configured, every search either twin's runtime makes
        through memgov, in either spelling, is refused as agent_mismatch and answered empty (the pair is
        ambiguous); kagent itself would have answered each twin's key under both spellings on v0.10."""
        twin = {"disabled_variant": "k8s-agent-twin-nomem", "ghost": TWIN_GHOST}
        stack = await make_stack(agents={TWIN: twin})
        stack.ghosts[TWIN] = TWIN_GHOST
        one, other = await stack.scope(agent=AGENT), await stack.scope(agent=TWIN)
        keys = {s.scope_id: stack.parts.keys.session_key(s.scope_id, s.generation) for s in (one, other)}
        for scope in (one, other):
            for spelling in (APP, RAW_APP):
                await _plant(stack, spelling, scope.namespace.storage_key, f"{scope.scope_id} under {spelling}")
        both = stack.upstream.release.search_matches_both_spellings
        found = await _kagent_search(stack, RAW_APP, one.namespace.storage_key, "anything")
        assert found == sorted(f"{one.scope_id} under {s}" for s in ((APP, RAW_APP) if both else (RAW_APP,)))
        for scope_id, key in keys.items():
            for spelling in (APP, RAW_APP):
                status, hits, headers = await stack.search(key, "anything", agent_name=spelling, agent_header=spelling)
                assert (status, hits, _reason(headers)) == (200, [], "agent_mismatch"), (scope_id, spelling)
        assert len(await stack.rows()) == 4  # nothing written through memgov, nothing lost

    async def test_a_search_in_either_spelling_finds_its_own_scopes_rows_only(self, stack: Stack) -> None:
        """With one spelling configured, its runtime's search in either spelling finds what it saved through memgov
        and none of another scope's rows planted under both spellings."""
        mine, theirs = await stack.scope(), await stack.scope(mxid="@bob:example.org", room_id="!bob:example.org")
        key = await stack.session_key()
        assert (await stack.save(key, "alice likes green tea"))[0] == 201
        for spelling in (APP, RAW_APP):
            await _plant(stack, spelling, theirs.namespace.storage_key, f"bob's green tea under {spelling}")
        for spelling in (APP, RAW_APP):
            status, hits, _ = await stack.search(key, "green tea", agent_name=spelling, agent_header=spelling)
            assert (status, [h["content"] for h in hits]) == (200, ["alice likes green tea"]), spelling
        assert mine.namespace.storage_key != theirs.namespace.storage_key


class TestErasureReadBack:
    async def test_forget_all_leaves_no_row_under_either_spelling(self, stack: Stack) -> None:
        """A scope's rows under both spellings (one saved through memgov, one planted raw) are erased and verified:
        afterwards kagent finds none of them, by list in either spelling nor by search (both spellings on v0.10)."""
        scope = await stack.scope()
        key = await stack.session_key()
        assert (await stack.save(key, "alice likes green tea"))[0] == 201
        await _plant(stack, RAW_APP, scope.namespace.storage_key, "planted under the raw spelling")
        storage_key = scope.namespace.storage_key
        both = stack.upstream.release.search_matches_both_spellings
        before = await _kagent_search(stack, RAW_APP, storage_key, "green tea")
        assert len(before) == (2 if both else 1)
        control = ControlClient(
            stack.gw.control_url,
            lambda: mint_subject(ALICE, stack.bridge_key, "HS256", now=int(time.time())),
            session=stack.http,
        )
        record = await control.confirm_and_run(scope.scope_id, "forget-all")
        assert (record.state, record.physical_deletion) == ("verified", "complete")
        assert await stack.rows(user_id=storage_key) == []
        for spelling in (APP, RAW_APP):
            assert await _kagent_search(stack, spelling, storage_key, "green tea") == []
            query = f"/api/memories?agent_name={spelling}&user_id={storage_key}"
            async with stack.http.get(
                stack.dev.kagent_url + query, headers=runtime_headers(stack.upstream, AGENT)
            ) as r:
                assert (r.status, await r.json()) == (200, [])
