"""R-14: memory content never reaches a log line, a metric, an audit row or an error body.

Distinct sentinels are planted in saved facts, embedding inputs, a raw-transcript "fact", a failed
embedding provider body and failed controller bodies; every sink is then scanned for them in plain,
JSON-escaped, URL-encoded and base64 form; kagent's own log is one of the sinks. The only place
content may appear is the legitimate answer to the runtime's own search.
"""

from __future__ import annotations

import pytest

from sidecar.dev.devstack.store import DbFault
from tests.support.pg import start_pg
from tests.support.sentinel import assert_absent, capture_sinks, make_sentinel
from tests.support.stack import ALICE, APP

ROUTE = "/embeddings/kagent/k8s-agent/v1/embeddings"


async def _audit_text(stack) -> str:
    """Audit rows, the hourly counts of anonymous refusals (R-15) and what kagent logged: all sinks."""
    store = stack.parts.store
    return (
        repr(await store.audit_log.audit_rows(limit=100000))
        + repr(await store.audit_log.refusal_counts())
        + "\n"
        + stack.kagent_log()
    )


class TestSentinels:
    async def test_refusals_spooled_during_an_outage(self, make_stack):
        """With PostgreSQL down, refusals of requests that carry content wait in the audit spool as
        content-free rows, and land as such once it is back; no sink holds the content meanwhile."""
        fact = make_sentinel("outage")
        pg = start_pg(max_connections=50)
        try:
            stack = await make_stack(state={"url": pg.create_database("state")})
            await stack.scope()
            key = await stack.session_key()
            with capture_sinks() as sinks:
                pg.halt()
                status, body, headers = await stack.save(key, f"user said {fact}")
                assert status == 503
                sinks.record(status, headers.items(), repr(body))
                status, rows, headers = await stack.search(key, f"what did the user say about {fact}")
                assert (status, rows) == (200, [])
                sinks.record(status, headers.items(), repr(rows))
                resp, seen = await stack.invoke(f"remember that {fact}", context=stack.context())
                assert resp.status == 200 and seen.agent == "kagent/k8s-agent-nomem"
                sinks.record(resp.status, resp.headers.items(), "")
                spool = stack.parts.store.spool
                assert len(spool) == 3
                sinks.extra.append(repr(spool.snapshot()))
                pg.resume()
                await stack.parts.store.health.wait_for(True)
                assert len(spool) == 0
                sinks.extra.append(await _audit_text(stack))
            sinks.assert_clean(fact)
        finally:
            pg.stop()

    @pytest.mark.kagent
    async def test_saved_fact_and_search(self, stack):
        """A saved fact comes back only in its own search result; logs, metrics and audit never hold it."""
        fact = make_sentinel("fact")
        with capture_sinks() as sinks:
            await stack.scope()
            key = await stack.session_key()
            status, body, headers = await stack.save(key, f"user said {fact}")
            sinks.record(status, headers.items(), repr(body))
            status, rows, headers = await stack.search(key, f"user said {fact}")
            assert any(fact in r["content"] for r in rows), "the runtime's own search is the legitimate channel"
            sinks.record(status, headers.items(), "")
            sinks.extra.append(await _audit_text(stack))
        sinks.assert_clean(fact)

    async def test_embedding_input(self, stack):
        """Text sent for embedding (queries, facts) appears nowhere but at the provider."""
        query = make_sentinel("query")
        with capture_sinks() as sinks:
            await stack.scope()
            async with stack.http.post(stack.gw.data_url + ROUTE, json={"model": "m", "input": [query]}) as resp:
                sinks.record(resp.status, resp.headers.items(), await resp.read())
            oversize = query + "x" * 600
            async with stack.http.post(stack.gw.data_url + ROUTE, json={"model": "m", "input": [oversize]}) as resp:
                sinks.record(resp.status, resp.headers.items(), await resp.read())
                assert resp.status == 403
            sinks.extra.append(await _audit_text(stack))
        sinks.assert_clean(query)

    @pytest.mark.kagent
    async def test_raw_transcript_fact(self, stack):
        """A summarizer failure that saves the whole transcript is refused without echoing it anywhere."""
        transcript = make_sentinel("transcript")
        with capture_sinks() as sinks:
            await stack.scope()
            key = await stack.session_key()
            raw = "\n".join(f"user: turn {i} {transcript}" for i in range(40))
            body = {"items": [{"agent_name": APP, "user_id": key, "content": raw, "vector": [0.01] * 768}]}
            status, answer, headers = await stack.memory("POST", "/api/memories/sessions/batch", body)
            assert (status, answer["error"]) == (403, "fact_too_large")
            sinks.record(status, headers.items(), repr(answer))
            sinks.extra.append(await _audit_text(stack))
        sinks.assert_clean(transcript)
        assert await stack.rows() == []

    async def test_failed_embedding_provider_body(self, stack):
        """A provider error body (which may quote the input) is replaced by a reason code."""
        leaked = make_sentinel("provider")
        with capture_sinks() as sinks:
            await stack.scope()
            stack.dev.embedding.faults.status = 400
            stack.dev.embedding.faults.body = f'{{"error": {{"message": "bad input: {leaked}"}}}}'
            async with stack.http.post(stack.gw.data_url + ROUTE, json={"model": "m", "input": ["x"]}) as resp:
                text = await resp.read()
                sinks.record(resp.status, resp.headers.items(), text)
                assert resp.status == 502
            sinks.extra.append(await _audit_text(stack))
        assert b"upstream_error" in text
        sinks.assert_clean(leaked)

    async def test_failed_controller_bodies(self, stack):
        """kagent's 500 texts carry raw DB errors; on save and search they are replaced."""
        leaked = make_sentinel("db")
        with capture_sinks() as sinks:
            await stack.scope()
            key = await stack.session_key()
            stack.dev.store.fault = DbFault(message=f"ERROR: value too long: {leaked}")
            status, body, headers = await stack.save(key, "fact")
            sinks.record(status, headers.items(), repr(body))
            assert (status, body["error"], body["status"]) == (502, "upstream_error", 500)
            status, rows, headers = await stack.search(key, "fact")
            sinks.record(status, headers.items(), repr(rows))
            assert status == 502
            sinks.extra.append(await _audit_text(stack))
        sinks.assert_clean(leaked)

    @pytest.mark.kagent
    async def test_hostile_identity_values(self, stack):
        """Text smuggled into user ids, agent names and contexts does not reach any sink."""
        smuggled = make_sentinel("ident")
        with capture_sinks() as sinks:
            await stack.scope()
            status, body, headers = await stack.save(smuggled, "x", agent_name=smuggled, agent_header=smuggled)
            sinks.record(status, headers.items(), repr(body))
            resp, _ = await stack.invoke(context=smuggled, user=smuggled.encode("ascii", "ignore").decode())
            sinks.record(resp.status, resp.headers.items(), "")
            sinks.extra.append(await _audit_text(stack))
        sinks.assert_clean(smuggled)

    async def test_denials_leave_content_free_audit_rows(self, stack):
        """A refusal with a genuine credential writes an audit row with codes and ids only; one without
        any is counted per hour (R-15), so an anonymous caller cannot grow the store."""
        await stack.scope()
        key = await stack.session_key()
        await stack.invoke()  # no context → rewrite, anonymous
        await stack.save("mg1.bogus", "x")  # key_invalid, anonymous
        await stack.save(key, "x", agent_name="kagent__NS__helper")  # a genuine key, the wrong agent
        rows = await stack.parts.store.audit_log.audit_rows(limit=100)
        assert {r["reason"] for r in rows if r["kind"] == "decision"} == {"agent_mismatch"}
        assert all(r["decision_id"].startswith("d_") for r in rows if r.get("decision_id"))
        counted = {(op, reason): n for _, op, reason, n in await stack.parts.store.audit_log.refusal_counts()}
        assert counted == {("a2a.invoke", "context_missing"): 1, ("memory.save", "key_invalid"): 1}

    async def test_bodies_the_strict_parse_refuses(self, stack):
        """Ambiguous or malformed bodies carrying content are refused by code, echoing none of it."""
        hidden = make_sentinel("ambiguous")
        with capture_sinks() as sinks:
            await stack.scope()
            key = await stack.session_key()
            fact = f'{{"agent_name": "{APP}", "user_id": "{key}", "content": "{hidden}", "vector": [0.5' + ", 0.5" * 767
            bodies = [
                (fact + '], "content": "again"}').encode(),  # duplicate key
                (fact + '], "Content": "x"}').encode(),  # a key a case-insensitive decoder reads too
                (fact + f']}} {{"content": "{hidden}"}}').encode(),  # a second value after the first
                (fact.replace("0.5", "NaN", 1) + "]}").encode(),
            ]
            for raw in bodies:
                async with stack.http.post(
                    stack.gw.data_url + "/api/memories/sessions", data=raw, headers={"Content-Type": "application/json"}
                ) as resp:
                    sinks.record(resp.status, resp.headers.items(), await resp.read())
                    assert resp.status == 400
            embed = f'{{"model": "m", "input": "a", "INPUT": ["{hidden}"]}}'.encode()
            async with stack.http.post(
                stack.gw.data_url + ROUTE, data=embed, headers={"Content-Type": "application/json"}
            ) as resp:
                sinks.record(resp.status, resp.headers.items(), await resp.read())
                assert resp.status == 400
            sinks.extra.append(await _audit_text(stack))
        sinks.assert_clean(hidden)
        assert await stack.rows() == [] and stack.dev.embedding.calls == []

    async def test_a_context_on_a_passthrough_route(self, stack):
        """A context carrying text in its claims is spent, never forwarded, and never written anywhere."""
        hidden = make_sentinel("ctxclaim")
        with capture_sinks() as sinks:
            context = stack.context(classification=hidden)
            async with stack.http.get(stack.gw.data_url + "/version", headers={"X-Memgov-Context": context}) as resp:
                sinks.record(resp.status, resp.headers.items(), await resp.read())
            sinks.extra.append(await _audit_text(stack))
        sinks.assert_clean(hidden)
        assert all(r.header("X-Memgov-Context") is None for r in stack.dev.recorder.requests)


class TestKagentLog:
    @pytest.mark.kagent
    async def test_session_keys_and_mxids_stay_out_of_kagents_log(self, stack):
        """kagent logs identifiers it is sent; memgov sends it storage keys, never a session key or an MXID."""
        scope = await stack.scope()
        key = await stack.session_key()
        assert (await stack.save(key, "a fact for the log check"))[0] == 201
        assert (await stack.search(key, "a fact"))[0] == 200
        await stack.memory(
            "POST",
            "/api/memories/sessions/batch",
            {"items": [{"agent_name": APP, "user_id": key, "content": "batched", "vector": [0.01] * 768}]},
        )
        resp, _ = await stack.invoke()  # refused: relayed to the memory-disabled variant as the caller
        assert resp.status == 200
        await stack.parts.store.scopes.withdraw(scope.scope_id, stack.clock())
        log = stack.kagent_log()
        assert '"msg":"added memory"' in log, "kagent logged the save (the sink is live)"
        for secret in (key, ALICE):
            assert_absent(secret, log)

    @pytest.mark.kagent
    @pytest.mark.parametrize("consented", [True, False])
    async def test_a_user_id_query_on_an_invocation_reaches_kagents_log_as_neither(self, stack, consented):
        """A bridge that also sends ?user_id=<MXID>: kagent logs that parameter, so neither the MXID nor the
        session key may reach it there."""
        scope = await stack.scope(consent=consented)
        resp, seen = await stack.invoke(context=stack.context(), query="?user_id=%40alice%3Aexample.org")
        assert resp.status == 200 and seen is not None
        key = stack.parts.keys.session_key(scope.scope_id, scope.generation)
        log = stack.kagent_log()
        for secret in (key, ALICE):
            assert_absent(secret, log)
