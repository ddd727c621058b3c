"""Family 2: typed credentials; a delegation context is never a bearer token (SPEC §5).

The attack: an agent pod (or kagent, or a tool) that sees an ``X-Memgov-Context`` — memgov used
to relay it upstream on many routes — presents it to the control API as a subject bearer to
create a scope and grant consent, or replays it on an invocation.
"""

from __future__ import annotations

import secrets
import time

import pytest

from tests.support.adversarial import SUBJECT, Target
from tests.support.harness import AGENT, ALICE, ROOM


class TestContextIsNotABearer:
    async def test_a_context_cannot_create_a_scope_grant_consent_or_inspect(self, target: Target) -> None:
        """Presented as Authorization: Bearer, a valid delegation context is refused everywhere (401)."""
        t = target
        scope_id = await t.consented_scope()
        await t.control("DELETE", f"/v1/scopes/{scope_id}/consent")  # disabled again, by the subject
        creating = {
            "principal": {"mxid": ALICE, "origin": "native"},
            "agent": AGENT,
            "scope": {"kind": "control_room", "room_id": "!another:example.org"},
        }
        calls = [
            ("POST", "/v1/scopes", creating),
            ("PUT", f"/v1/scopes/{scope_id}/consent", {"purpose": "p", "policy_version": "v1"}),
            ("GET", f"/v1/scopes/{scope_id}/entries", None),
            ("GET", f"/v1/scopes/{scope_id}", None),
        ]
        for method, path, body in calls:
            context = t.context()
            status, answer = await t.control(
                method, path, token=context, json=body, headers={"X-Memgov-Context": t.context()}
            )
            assert (status, answer["error"]) == (401, "auth_required"), (method, path)
        status, state = await t.control("GET", f"/v1/scopes/{scope_id}")
        assert status == 200 and state["enabled"] is False  # memory stayed off without the person

    @pytest.mark.parametrize("typ", [None, "JWT", "memgov-context+jwt", "memgov-operator+jwt"])
    async def test_only_a_subject_typed_token_is_a_subject(self, target: Target, typ: str | None) -> None:
        """A token with every subject claim but another (or no) JOSE typ is refused."""
        now = int(time.time())
        token = target.mint({"sub": ALICE, "iat": now, "exp": now + 60, "jti": secrets.token_hex(8)}, typ)
        status, answer = await target.control(
            "POST",
            "/v1/scopes",
            token=token,
            json={
                "principal": {"mxid": ALICE, "origin": "native"},
                "agent": AGENT,
                "scope": {"kind": "control_room", "room_id": ROOM},
            },
        )
        assert (status, answer["error"]) == (401, "auth_required")

    async def test_a_captured_subject_token_changes_consent_once(self, target: Target) -> None:
        """Replaying a subject token (from a log, a proxy, a pod) cannot turn memory back on."""
        t = target
        scope_id = await t.consented_scope()
        status, _ = await t.control("DELETE", f"/v1/scopes/{scope_id}/consent")
        captured = t.subject_token()
        grant = {"purpose": "remember my preferences", "policy_version": "v1"}
        assert (await t.control("PUT", f"/v1/scopes/{scope_id}/consent", token=captured, json=grant))[0] == 200
        await t.control("DELETE", f"/v1/scopes/{scope_id}/consent")
        status, answer = await t.control("PUT", f"/v1/scopes/{scope_id}/consent", token=captured, json=grant)
        assert (status, answer["error"]) == (401, "auth_required")

    async def test_long_lived_subject_tokens_are_refused(self, target: Target) -> None:
        """A subject token minted for a day is not a short-lived credential."""
        now = int(time.time())
        token = target.mint({"sub": ALICE, "iat": now, "exp": now + 86400, "jti": "long"}, SUBJECT)
        status, answer = await target.control("GET", "/v1/scopes/s" + "0" * 24, token=token)
        assert (status, answer["error"]) == (401, "auth_required")


class TestContextNeverLeavesMemgov:
    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("GET", "/version"),
            ("GET", "/api/agents"),
            ("GET", "/api/sessions"),
            ("POST", "/api/a2a/team/plain-agent/"),
            ("POST", "/api/a2a-sandboxes/team/helper/"),
            ("GET", "/api/a2a/team/helper/.well-known/agent-card.json"),
        ],
    )
    async def test_the_context_is_stripped_on_every_route(self, target: Target, method: str, path: str) -> None:
        """kagent and agents never see a delegation context, on any route memgov forwards."""
        t = target
        before = len(t.dev.recorder.requests)
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}} if method == "POST" else None
        async with t.http.request(
            method, t.gw.data_url + path, json=body, headers={"X-Memgov-Context": t.context()}
        ) as resp:
            await resp.read()
        arrived = t.dev.recorder.requests[before:]
        assert arrived, "the request was not forwarded at all"
        assert all(r.header("X-Memgov-Context") is None for r in arrived)

    async def test_a_context_seen_anywhere_is_spent(self, target: Target) -> None:
        """A context that passed through any route cannot then open memory on an invocation."""
        t = target
        await t.consented_scope()
        context = t.context()
        async with t.http.get(t.gw.data_url + "/version", headers={"X-Memgov-Context": context}) as resp:
            await resp.read()
        status, _, headers = await t.invoke(context=context)
        assert status == 200 and headers["X-Memgov-Decision"].startswith("rewrite_disabled; reason=context_replayed")
