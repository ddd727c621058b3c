"""Facts of kagent the stand-in does not model, checked on the real server (each release, both auth modes).

These are the upstream behaviours memgov's design leans on: identity comes from the request
body or query and never from the bearer token, trusted-proxy mode only wants *a* parseable JWT,
the cleanup loop deletes expired rows with fewer than 10 accesses, kagent logs identifiers, and
(v0.10) a share token changes which session kagent's A2A proxy lets a message into, not the user
the agent is asked as.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import jwt
import pytest

from sidecar.dev.devstack.pg import PgServer
from sidecar.dev.devstack.realkagent import AuthMode, RealKagent, start_real_kagent
from sidecar.dev.devstack.releases import V0_10, KagentRelease
from sidecar.dev.devstack.stack import start_devstack
from tests.conformance.transcript import E0, NS
from tests.support.upstream import kagent_database, sa_token

pytestmark = pytest.mark.real_kagent

UNSIGNED_ALICE = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhbGljZSJ9.not-a-signature"
BOB_SAVE = {"agent_name": NS, "user_id": "bob", "content": "bob's memory", "vector": E0}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class TestAuthModes:
    @pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer garbage"}, {"Authorization": "Basic eA=="}])
    async def test_trusted_proxy_wants_a_parseable_bearer_jwt(
        self, real_kagent: RealKagent, http: aiohttp.ClientSession, headers: dict
    ) -> None:
        """Without a three-part bearer JWT every memory route is 401 text/plain in trusted-proxy mode only."""
        async with http.post(real_kagent.url + "/api/memories/search", json=BOB_SAVE, headers=headers) as resp:
            text = await resp.text()
        if real_kagent.auth_mode == "trusted-proxy":
            assert (resp.status, resp.headers["Content-Type"], text) == (
                401,
                "text/plain; charset=utf-8",
                "Unauthorized\n",
            )
        else:
            assert resp.status == 200
        async with http.get(real_kagent.url + "/health") as resp:
            assert resp.status == 200

    async def test_rows_belong_to_the_body_user_whatever_the_token_says(
        self, real_kagent: RealKagent, http: aiohttp.ClientSession
    ) -> None:
        """An unsigned JWT for alice saves and lists bob's rows: kagent checks no signature and no ownership."""
        headers = {"Authorization": f"Bearer {UNSIGNED_ALICE}", "X-Agent-Name": NS}
        async with http.post(real_kagent.url + "/api/memories/sessions", json=BOB_SAVE, headers=headers) as resp:
            assert resp.status == 201
        async with http.get(
            real_kagent.url + f"/api/memories?agent_name={NS}&user_id=bob",
            headers={"Authorization": f"Bearer {UNSIGNED_ALICE}"},
        ) as resp:
            assert resp.status == 200 and [r["content"] for r in await resp.json()] == ["bob's memory"]

    async def test_an_agent_runtime_token_is_enough(self, real_kagent: RealKagent, http: aiohttp.ClientSession) -> None:
        """What kagent's runtime sends (projected SA token, X-Agent-Name, X-User-Id) passes in either mode."""
        headers = {"Authorization": f"Bearer {sa_token('ns/agent')}", "X-Agent-Name": NS, "X-User-Id": "bob"}
        async with http.post(real_kagent.url + "/api/memories/sessions", json=BOB_SAVE, headers=headers) as resp:
            assert resp.status == 201


class TestLogs:
    async def test_identifiers_reach_the_log_but_content_does_not(
        self, real_kagent: RealKagent, http: aiohttp.ClientSession
    ) -> None:
        """The save line names userID and agentName, GET/DELETE lines the user_id query; content is never logged."""
        headers = {"Authorization": f"Bearer {sa_token('ns/agent')}", "X-Agent-Name": NS}
        body = {**BOB_SAVE, "content": "SENTINEL-content-4711"}
        async with http.post(real_kagent.url + "/api/memories/sessions", json=body, headers=headers) as resp:
            assert resp.status == 201
        async with http.get(
            real_kagent.url + f"/api/memories?agent_name={NS}&user_id=bob-query", headers=headers
        ) as resp:
            assert resp.status == 200
        log = real_kagent.log_text()
        assert '"userID":"bob"' in log and f'"agentName":"{NS}"' in log and '"user_id":"bob-query"' in log
        assert "SENTINEL-content-4711" not in log


class TestCleanupLoop:
    async def test_the_loop_deletes_expired_rows_and_keeps_popular_ones(
        self,
        kagent_release: KagentRelease,
        pg_server: PgServer,
        pg_url: str,
        tmp_path: Path,
        http: aiohttp.ClientSession,
    ) -> None:
        """With a 1 s interval the real loop deletes an expired row and renews one with 10+ accesses."""
        start = functools.partial(start_real_kagent, pg_url, tmp_path, cleanup_interval_s=1, release=kagent_release)
        kagent = await asyncio.to_thread(start)
        db = await asyncpg.connect(pg_url)
        try:
            for content in ("expired", "popular"):
                async with http.post(
                    kagent.url + "/api/memories/sessions", json={**BOB_SAVE, "content": content}
                ) as resp:
                    assert resp.status == 201
            await db.execute(
                "UPDATE memory SET expires_at = now() - interval '1 day', access_count = "
                "CASE content WHEN 'popular' THEN 10 ELSE 0 END"
            )
            async with asyncio.timeout(30):
                while await db.fetchval("SELECT count(*) FROM memory WHERE content = 'expired'"):
                    await asyncio.sleep(0.1)
            assert (
                await db.fetchval(
                    "SELECT access_count FROM memory WHERE content = 'popular' "
                    "AND expires_at > now() + interval '14 days'"
                )
                == 0
            )
        finally:
            await db.close()
            kagent.stop()


#: Spellings of a BYO agent's deployment labels Go's encoding/json reads as those labels; ``{labels}``
#: stands for memgov's selector labels. memgov refuses each one (tests/enforce/test_definitions.py).
LABEL_SPELLINGS = {
    "field-case": '"Spec": {"type": "BYO", "BYO": {"Deployment": {"image": "i", "LABELS": {labels}}}}',
    "later-duplicate": '"spec": {"type": "BYO", "byo": {"deployment": {"image": "i",'
    ' "labels": {}, "Labels": {labels}}}}',
    "long-s-folds": '"spec": {"type": "BYO", "byo": {"deployment": {"image": "i", "labelſ": {labels}}}}',
    "later-spec": '"spec": {"type": "BYO", "byo": {"deployment": {"image": "i"}}},'
    ' "SPEC": {"type": "BYO", "byo": {"deployment": {"image": "i", "labels": {labels}}}}',
}
#: memgov's name label, behind an innocent value for the same key (Go keeps the later).
NAME_LABEL_TWICE = '{"app.kubernetes.io/name": "chat", "app.kubernetes.io/name": "memgov"}'


class TestDefinitions:
    @pytest.mark.parametrize("kagent_auth_mode", ["unsecure"])
    async def test_kagent_reads_every_spelling_of_a_definitions_labels(
        self, real_kagent: RealKagent, http: aiohttp.ClientSession
    ) -> None:
        """Field names in any case, the later of two keys for one field or one label, and `ſ` for `s`
        all reach the stored definition: what memgov checks must be read the same way."""
        headers = {"Authorization": f"Bearer {UNSIGNED_ALICE}", "Content-Type": "application/json"}
        for name, spec in LABEL_SPELLINGS.items():
            spec_text = spec.replace("{labels}", NAME_LABEL_TWICE)
            body = f'{{"metadata": {{"name": "{name}", "namespace": "team"}}, {spec_text}}}'
            async with http.post(real_kagent.url + "/api/agents", data=body.encode(), headers=headers) as resp:
                assert resp.status == 201, (name, await resp.text())
            async with http.get(f"{real_kagent.url}/api/agents/team/{name}", headers=headers) as resp:
                stored = (await resp.json())["data"]["agent"]["spec"]["byo"]["deployment"]["labels"]
            assert stored == {"app.kubernetes.io/name": "memgov"}, name


class TestShareTokensOnA2A:
    """v0.10's share links seen from the agent behind kagent's A2A proxy (the stand-in answers as the agent
    itself, so only the hybrid shows what kagent forwards)."""

    async def test_the_agent_is_asked_as_the_caller_and_never_sees_the_token(
        self, pg_server: PgServer, tmp_path: Path, http: aiohttp.ClientSession, kagent_auth_mode: AuthMode
    ) -> None:
        """Under a writable share of alice's session, bob's message reaches the agent with bob's user id, the
        message marked initiated_by bob, and no X-Share-Token: the share changes the session, not the user."""
        agent = "team/helper"
        dev = await start_devstack(stream_delay_s=0, agents=[agent], release=V0_10)
        kagent = await asyncio.to_thread(
            functools.partial(
                start_real_kagent,
                kagent_database(pg_server, V0_10),
                tmp_path / "kagent",
                auth_mode=kagent_auth_mode,
                release=V0_10,
                agents={agent: f"{dev.kagent_url}/api/a2a/{agent}/"},
            )
        )
        try:
            alice, bob = _caller("alice", kagent_auth_mode), _caller("bob", kagent_auth_mode)
            body = {"agent_ref": agent, "id": "ctx-1"}
            async with http.post(kagent.url + "/api/sessions", json=body, headers=alice) as resp:
                assert resp.status == 201
            share = {"read_only": False}
            async with http.post(kagent.url + "/api/sessions/ctx-1/shares", json=share, headers=alice) as resp:
                token = (await resp.json())["data"]["token"]
            message = {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
            params = {"message": {**message, "contextId": "ctx-1"}}
            rpc = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}
            async with http.post(
                f"{kagent.url}/api/a2a/{agent}/", json=rpc, headers={**bob, "X-Share-Token": token}
            ) as resp:
                assert resp.status == 200 and "result" in await resp.json()
            (seen,) = dev.recorder.of_kind("a2a")
            assert seen.user_id_header == "bob" and seen.header("X-Share-Token") is None
            assert json.loads(seen.body)["params"]["message"]["metadata"] == {"initiated_by": "bob"}
        finally:
            kagent.stop()
            await dev.stop()


def _caller(user: str, mode: AuthMode) -> dict[str, str]:
    """What a UI request for ``user`` carries in this auth mode."""
    if mode == "trusted-proxy":
        token = jwt.encode({"sub": user}, "ui-signing-key-of-32-bytes-length!", algorithm="HS256")
        return {"Authorization": f"Bearer {token}"}
    return {"X-User-Id": user}
