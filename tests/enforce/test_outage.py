"""PostgreSQL stops under two gateway processes (three with the second's two workers): degraded, not down (D6).

Agents' ungoverned calls keep answering, invocations go to the memory-disabled agent, searches
answer ``[]`` and saves are refused by reason code, never forwarded; readiness stays 200. Every
refusal taken during the outage is audited once PostgreSQL is back (spooled, then replayed), and
nothing was dropped from a spool.
"""

from __future__ import annotations

import json
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from sidecar.dev.devstack import start_devstack
from sidecar.dev.devstack.deployment import write_keys
from sidecar.dev.devstack.stack import Devstack
from sidecar.dev.devstack.vectors import embed_text
from tests.support.blackhole import Blackhole, blackhole
from tests.support.harness import (
    AGENT,
    ALICE,
    APP,
    context_token,
    decision_of,
    invoke_as_alice,
    policy_pack,
    subject_token,
)
from tests.support.pg import PgServer
from tests.support.process import GatewayProcess
from tests.support.procs import Pair, process_settings, two_gateways
from tests.support.sentinel import assert_absent, make_sentinel
from tests.support.wait import until

NOMEM = AGENT.split("/")[0] + "/helper-nomem"  # the harness's disabled_variant


@pytest.fixture
async def kagent() -> AsyncIterator[Devstack]:
    stack = await start_devstack(agents=[AGENT, NOMEM], stream_delay_s=0)
    try:
        yield stack
    finally:
        await stack.stop()


async def _metric(http: aiohttp.ClientSession, gw: GatewayProcess, name: str) -> float:
    async with http.get(gw.ops_url + "/metrics") as resp:
        text = await resp.text()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


async def _state_available(http: aiohttp.ClientSession, gw: GatewayProcess) -> tuple[int, bool]:
    async with http.get(gw.ops_url + "/readyz") as resp:
        body = await resp.json()
        return resp.status, bool(body["checks"]["state"]["available"])


class TestStateStoreOutage:
    async def test_two_replicas_degrade_stay_ready_and_lose_no_audit_record(
        self, tmp_path: Path, own_pg: PgServer, kagent: Devstack
    ) -> None:
        """Stop PostgreSQL under both gateways: chat and ungoverned calls answer, memory degrades by
        reason code, /readyz stays 200, and every refusal is audited after PostgreSQL returns."""
        state_url = own_pg.create_database("state")
        keys = write_keys(tmp_path / "keys")
        pack = policy_pack(tmp_path)

        def settings() -> dict[str, Any]:
            s = process_settings(keys, pack, kagent.kagent_url, state_url)
            s["state"] = {"url": state_url, "check_interval_s": 0.5}
            return s

        async with two_gateways(tmp_path, keys, settings(), settings()) as pair:
            await self._outage(pair, own_pg, kagent, keys, state_url)

    async def _outage(self, pair: Pair, pg: PgServer, kagent: Devstack, keys: Any, state_url: str) -> None:
        http, key = pair.http, pair.key
        saved_before = len(kagent.recorder.of_kind("memory"))
        refusals: list[str] = []

        async def save(gw: GatewayProcess, text: str) -> aiohttp.ClientResponse:
            body = {"agent_name": APP, "user_id": key, "content": text, "vector": embed_text(text)}
            headers = {"X-Agent-Name": APP, "X-User-Id": key}
            async with http.post(gw.data_url + "/api/memories/sessions", json=body, headers=headers) as resp:
                await resp.read()
                return resp

        # Memory works before the outage.
        assert (await save(pair.a, "likes tea")).status == 201
        pg.halt()
        for gw in (pair.a, pair.b):
            # Ungoverned traffic of agents and the UI: relayed as before.
            async with http.get(gw.data_url + "/api/sessions", params={"user_id": ALICE}) as resp:
                assert resp.status == 200
            async with http.get(gw.data_url + "/version") as resp:
                assert resp.status == 200
            # An invocation answers from the memory-disabled agent.
            decision, asked = await invoke_as_alice(http, gw.data_url, keys, kagent)
            assert (decision["action"], decision["reason"], asked) == ("rewrite_disabled", "state_unavailable", NOMEM)
            refusals.append(decision["id"])
            # A search answers empty, a save is refused and never forwarded.
            search = {"agent_name": APP, "user_id": key, "vector": embed_text("tea"), "limit": 5, "min_score": 0.0}
            async with http.post(
                gw.data_url + "/api/memories/search", json=search, headers={"X-Agent-Name": APP, "X-User-Id": key}
            ) as resp:
                assert (resp.status, await resp.json()) == (200, [])
                decision = decision_of(resp)
            assert (decision["action"], decision["reason"]) == ("empty_result", "state_unavailable")
            refusals.append(decision["id"])
            refused = await save(gw, "likes coffee")
            assert refused.status == 503 and decision_of(refused)["reason"] == "state_unavailable"
            refusals.append(decision_of(refused)["id"])
            # The control API answers by reason code (the token verified: a row, landing after the outage too).
            async with http.get(f"{gw.control_url}/v1/scopes/{pair.scope_id}", headers=self._subject(keys)) as resp:
                answer = await resp.json()
                assert (resp.status, answer["error"]) == (503, "state_unavailable")
                refusals.append(answer["decision_id"])
            # Ready: it serves traffic; the check says the store does not answer.
            await until(lambda gw=gw: self._down(http, gw), timeout_s=30)
            assert await _metric(http, gw, "memgov_state_available") == 0.0
            assert await _metric(http, gw, "memgov_audit_spool_records") >= 1.0
        assert len(kagent.recorder.of_kind("memory")) == saved_before + 1  # only the save before the outage

        pg.resume()
        for gw in (pair.a, pair.b):
            await until(lambda gw=gw: self._up(http, gw), timeout_s=60)
            await until(lambda gw=gw: self._drained(http, gw), timeout_s=60)  # every worker replayed its spool
            assert await _metric(http, gw, "memgov_audit_spool_dropped_total") == 0.0
        # Every refusal of the outage landed: its own audit row, or counted with its reason.
        con = await asyncpg.connect(state_url)
        try:
            rows = {r["decision_id"] for r in await con.fetch("SELECT decision_id FROM audit")}
            counted = await con.fetchval(
                "SELECT COALESCE(SUM(n), 0) FROM audit_counts WHERE reason = 'state_unavailable'"
            )
        finally:
            await con.close()
        # Every refusal carried a verified credential (a key, a context, a subject token): each is its own row.
        assert [d for d in refusals if d in rows] == refusals and len(refusals) == 8
        assert counted == 0
        # And memory works again.
        again = await save(pair.b, "likes coffee")
        assert again.status == 201, again.headers["X-Memgov-Decision"]

    async def test_a_hung_store_degrades_within_the_bound_and_recovers(
        self, tmp_path: Path, pg_server: PgServer, kagent: Devstack
    ) -> None:
        """PostgreSQL hung behind a network blackhole (connections accepted, nothing answered, no error):
        every call still answers, memory by reason code, because statements and connection hand-outs
        are bounded; once it answers again the gateways take the store back (readiness,
        memgov_state_available 1) and memory works."""
        async with blackhole(pg_server.port) as relay:
            await self._hung_gateways(tmp_path, relay, relay.url(pg_server.create_database("hung")), kagent)

    async def _hung_gateways(self, tmp_path: Path, relay: Blackhole, state_url: str, kagent: Devstack) -> None:
        keys = write_keys(tmp_path / "keys")
        pack = policy_pack(tmp_path)

        def settings() -> dict[str, Any]:
            s = process_settings(keys, pack, kagent.kagent_url, state_url)
            s["state"] = {"url": state_url, "check_interval_s": 0.5, "statement_timeout_s": 1, "acquire_timeout_s": 1}
            return s

        async with two_gateways(tmp_path, keys, settings(), settings()) as pair:
            await self._hung(pair, relay, keys)

    async def _hung(self, pair: Pair, relay: Blackhole, keys: Any) -> None:
        http, key = pair.http, pair.key
        # A call that hung would end here with a client timeout instead of an answer.
        bounded = aiohttp.ClientTimeout(total=30)
        memory = {"X-Agent-Name": APP, "X-User-Id": key}
        relay.freeze()
        for gw in (pair.a, pair.b):
            async with http.get(gw.data_url + "/api/sessions", params={"user_id": ALICE}, timeout=bounded) as resp:
                assert resp.status == 200
            search = {"agent_name": APP, "user_id": key, "vector": embed_text("tea"), "limit": 5, "min_score": 0.0}
            async with http.post(
                gw.data_url + "/api/memories/search", json=search, headers=memory, timeout=bounded
            ) as resp:
                assert (resp.status, await resp.json()) == (200, [])
                assert decision_of(resp)["reason"] == "state_unavailable"
            body = {"agent_name": APP, "user_id": key, "content": "likes tea", "vector": embed_text("likes tea")}
            async with http.post(
                gw.data_url + "/api/memories/sessions", json=body, headers=memory, timeout=bounded
            ) as resp:
                assert (resp.status, decision_of(resp)["reason"]) == (503, "state_unavailable")
            async with http.get(
                f"{gw.control_url}/v1/scopes/{pair.scope_id}", headers=self._subject(keys), timeout=bounded
            ) as resp:
                assert (resp.status, (await resp.json())["error"]) == (503, "state_unavailable")
            await until(lambda gw=gw: self._down(http, gw), timeout_s=30)
            assert await _metric(http, gw, "memgov_state_available") == 0.0
        relay.thaw()
        for gw in (pair.a, pair.b):
            await until(lambda gw=gw: self._up(http, gw), timeout_s=60)
            # /readyz answers from one worker; the gauge is every worker's: wait until each is back.
            await until(lambda gw=gw: self._metric_is(http, gw, "memgov_state_available", 1.0), timeout_s=60)
            async with http.post(
                gw.data_url + "/api/memories/sessions", json=body, headers=memory, timeout=bounded
            ) as resp:
                assert resp.status == 201, resp.headers["X-Memgov-Decision"]

    async def test_a_gateway_killed_during_an_outage_loses_no_spooled_audit_record(
        self, tmp_path: Path, own_pg: PgServer, kagent: Devstack
    ) -> None:
        """A gateway refuses during an outage and is SIGKILLed right after the last answer, without waiting
        for anything: every refusal is in its spool folder already (mode 0600, no memory content), each
        with a verified credential as a row of its own, the anonymous one in its hourly count; restarted
        once PostgreSQL is back, the gateway writes every one of them exactly once and counts nothing lost."""
        state_url = own_pg.create_database("state")
        keys = write_keys(tmp_path / "keys")
        pack = policy_pack(tmp_path)
        spool = tmp_path / "spool"
        sentinel = make_sentinel("spool")

        def settings(folder: Path) -> dict[str, Any]:
            s = process_settings(keys, pack, kagent.kagent_url, state_url)
            s["state"] = {"url": state_url, "check_interval_s": 0.5}
            s["audit"] = {"spool_dir": str(folder)}
            return s

        async with two_gateways(tmp_path, keys, settings(spool), settings(tmp_path / "spool-b")) as pair:
            http, key, gw = pair.http, pair.key, pair.a
            memory = {"X-Agent-Name": APP, "X-User-Id": key}
            own_pg.halt()
            decisions: list[str] = []
            for n in range(3):
                text = f"{sentinel} likes tea {n}"
                body = {"agent_name": APP, "user_id": key, "content": text, "vector": embed_text(text)}
                async with http.post(gw.data_url + "/api/memories/sessions", json=body, headers=memory) as resp:
                    assert (resp.status, decision_of(resp)["reason"]) == (503, "state_unavailable")
                    decisions.append(decision_of(resp)["id"])
            message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": sentinel}]}
            headers = {"X-User-Id": ALICE, "X-Memgov-Context": context_token(keys, int(time.time()))}
            body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
            async with http.post(f"{gw.data_url}/api/a2a/{AGENT}/", json=body, headers=headers) as resp:
                await resp.read()
                assert decision_of(resp)["reason"] == "state_unavailable"
                decisions.append(decision_of(resp)["id"])
            async with http.get(f"{gw.control_url}/v1/scopes/{pair.scope_id}", headers=self._subject(keys)) as resp:
                answer = await resp.json()
                assert (resp.status, answer["error"]) == (503, "state_unavailable")
                decisions.append(answer["decision_id"])
            # The last refusal carries no credential: counted per hour, operation and reason.
            forged = {"agent_name": APP, "user_id": "not-a-key", "content": sentinel, "vector": embed_text("x")}
            async with http.post(
                gw.data_url + "/api/memories/sessions",
                json=forged,
                headers={"X-Agent-Name": APP, "X-User-Id": "not-a-key"},
            ) as resp:
                assert (resp.status, decision_of(resp)["reason"]) == (403, "key_invalid")
            await gw.kill()  # right after the last answer: no batch, no timer had a chance to run

            files = sorted(spool.glob("*.spool"))
            assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
            assert_absent(sentinel, *(f.read_bytes() for f in files))
            lines = [json.loads(line) for f in files for line in f.read_bytes().splitlines()]
            assert sorted(line[4] for line in lines if line[0] == "r") == sorted(decisions)
            assert [line[2:] for line in lines if line[0] == "c"] == [["memory.save", "key_invalid", 1]]

            own_pg.resume()
            await gw.start()
            await until(lambda: self._spool_empty(spool), timeout_s=60)
            assert await _metric(http, gw, "memgov_audit_spool_dropped_total") == 0.0
            con = await asyncpg.connect(state_url)
            try:
                rows = await con.fetch(
                    "SELECT decision_id, scope_id, COUNT(*) AS n FROM audit"
                    " WHERE decision_id = ANY($1::text[]) GROUP BY decision_id, scope_id",
                    decisions,
                )
                counted = await con.fetchval(
                    "SELECT COALESCE(SUM(n), 0) FROM audit_counts WHERE reason IN ('state_unavailable', 'key_invalid')"
                )
                stored = await con.fetch("SELECT * FROM audit")
            finally:
                await con.close()
            # Each landed once, as its own row; the saves' rows name the scope their key verified for.
            assert sorted(r["decision_id"] for r in rows) == sorted(decisions) and all(r["n"] == 1 for r in rows)
            assert {r["scope_id"] for r in rows if r["decision_id"] in decisions[:3]} == {pair.scope_id}
            assert counted == 1
            assert_absent(sentinel, *(repr(tuple(r)) for r in stored))

    @staticmethod
    async def _spool_empty(folder: Path) -> bool:
        return not list(folder.glob("*.spool"))

    @staticmethod
    def _subject(keys: Any) -> dict[str, str]:
        return {"Authorization": "Bearer " + subject_token(keys, int(time.time()))}

    @staticmethod
    async def _down(http: aiohttp.ClientSession, gw: GatewayProcess) -> bool:
        status, available = await _state_available(http, gw)
        assert status == 200
        return not available

    @staticmethod
    async def _metric_is(http: aiohttp.ClientSession, gw: GatewayProcess, name: str, value: float) -> bool:
        return await _metric(http, gw, name) == value

    @staticmethod
    async def _drained(http: aiohttp.ClientSession, gw: GatewayProcess) -> bool:
        return await _metric(http, gw, "memgov_audit_spool_records") == 0.0

    @staticmethod
    async def _up(http: aiohttp.ClientSession, gw: GatewayProcess) -> bool:
        status, available = await _state_available(http, gw)
        assert status == 200
        return available
