"""Failure modes: state store down, kagent answering garbage, and fuzzed hostile bodies."""

from __future__ import annotations

import json

from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.reasons import REASON_VALUES
from tests.support.pg import start_pg
from tests.support.stack import APP


def reason(headers) -> str:
    return headers["X-Memgov-Decision"].split(";")[1].strip().removeprefix("reason=")


class TestStateStoreDown:
    async def test_everything_fails_closed_and_chat_still_answers(self, make_stack):
        """With PostgreSQL stopped: invocations go to the memory-disabled agent, searches answer [],
        saves 503 state_unavailable — never a forward, never a 500; the gateway stays ready."""
        pg = start_pg(max_connections=50)
        try:
            stack = await make_stack(state={"url": pg.create_database("state")})
            await stack.scope()
            key = await stack.session_key()
        finally:
            pg.stop()
        resp, seen = await stack.invoke(context=stack.context())
        assert resp.status == 200 and seen.agent == "kagent/k8s-agent-nomem"
        assert reason(resp.headers) == "state_unavailable"
        status, rows, headers = await stack.search(key, "anything")
        assert (status, rows, reason(headers)) == (200, [], "state_unavailable")
        status, body, _ = await stack.save(key, "a fact")
        assert (status, body["error"]) == (503, "state_unavailable")
        await stack.parts.store.health.wait_for(False)  # the failed calls started the check at once
        async with stack.http.get(stack.gw.ops_url + "/readyz") as ready:
            assert ready.status == 200
            assert (await ready.json())["checks"]["state"] == {"ok": True, "backend": "postgresql", "available": False}


class TestGarbageUpstream:
    async def test_garbage_from_kagent_is_never_relayed(self, make_stack, aiohttp_server):
        """Non-JSON 2xx answers on save and search become content-free 502s, nothing readable is recorded.

        A save answered 201 without a readable id created a row memgov cannot name: its outcome is
        unknown (the slot and the in-flight record stay, so an erasure waits for it or clears again).
        """

        async def garbage(request: web.Request) -> web.Response:
            status = 201 if request.path.endswith("sessions") else 200
            return web.Response(status=status, text="<html>upstream exploded: SECRET-ish</html>")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", garbage)
        server = await aiohttp_server(app)
        stack = await make_stack(upstream={"controller_url": str(server.make_url("")).rstrip("/")})
        scope = await stack.scope()
        key = stack.parts.keys.session_key(scope.scope_id, scope.generation)
        status, body, _ = await stack.save(key, "fact")
        assert status == 502 and body["error"] == "upstream_unavailable" and "exploded" not in json.dumps(body)
        status, body, _ = await stack.search(key, "fact")
        assert status == 502 and body["error"] == "upstream_error"
        entries = await stack.parts.store.ledger.entries_of_scope(scope.scope_id)
        assert all(e.entry_id is None or e.tombstoned_at for e in entries)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


class TestFuzzedBodies:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        path=st.sampled_from(
            [
                "/api/memories/sessions",
                "/api/memories/sessions/batch",
                "/api/memories/search",
                "/embeddings/kagent/k8s-agent/v1/embeddings",
            ]
        ),
        body=st.one_of(JSONISH.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64)),
        user=st.sampled_from([None, "mg1.x", "@alice:example.org"]),
    )
    async def test_hostile_bodies_get_reason_codes_never_500(self, stack, path, body, user):
        """Arbitrary JSON or bytes on governed routes: a reason-code answer or an empty result, never a crash."""
        headers = {"Content-Type": "application/json", "X-Agent-Name": APP}
        if user:
            headers["X-User-Id"] = user
        async with stack.http.post(stack.gw.data_url + path, data=body, headers=headers) as resp:
            text = await resp.text()
            assert resp.status in {200, 400, 403}, (resp.status, text[:200])
            parsed = json.loads(text)
            if resp.status == 200:
                assert parsed == []
            else:
                assert parsed["error"] in REASON_VALUES and set(parsed) == {"error", "decision_id"}
        assert await stack.rows() == []
