"""Scope creation, consent grant and withdrawal, status, and who may call them (SPEC §5, R-1, R-2, R-4)."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from sidecar.control.client import ControlError
from sidecar.identity.tokens import TokenType, mint_token
from tests.support.harness import AGENT, ALICE, BOB, ROOM, Harness


def _create_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "principal": {"mxid": ALICE, "origin": "native"},
        "agent": AGENT,
        "scope": {"kind": "control_room", "room_id": ROOM},
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            body[section] = {**body[section], field: value}
        else:
            body[section] = value
    return body


class TestCreateScope:
    @pytest.mark.kagent
    async def test_a_new_triple_is_disabled_at_generation_zero_and_repeats_answer_it(self, h: Harness) -> None:
        """The first call creates (201) a disabled scope; the same triple again returns the same scope (200)."""
        status, first = await h.client().call("POST", "/v1/scopes", json=_create_body())
        again_status, again = await h.client().call("POST", "/v1/scopes", json=_create_body())
        assert (status, first["enabled"], first["generation"]) == (201, False, 0)
        assert (again_status, again) == (200, first)

    @pytest.mark.parametrize(
        ("changes", "status", "reason"),
        [
            ({"principal__mxid": "alice"}, 400, "principal_invalid"),
            ({"principal__mxid": "@Alice:example.org"}, 400, "principal_invalid"),
            ({"principal__mxid": "@alice:example.org."}, 400, "principal_invalid"),
            ({"principal__origin": "remote"}, 400, "principal_invalid"),
            ({"principal__origin": "email"}, 400, "bad_request"),
            ({"agent": "team"}, 400, "bad_request"),
            ({"agent": "team/other"}, 403, "agent_mismatch"),
            ({"scope__kind": "cross_room"}, 403, "scope_mismatch"),
            ({"scope__room_id": "ctrl-alice"}, 400, "bad_request"),
            ({"extra": 1}, 400, "bad_request"),
        ],
    )
    async def test_the_typed_triple_is_validated(
        self, sh: Harness, changes: dict[str, Any], status: int, reason: str
    ) -> None:
        """Localparts, look-alikes, origin contradictions, unknown agents and reserved kinds are refused."""
        with pytest.raises(ControlError) as err:
            await sh.client().call("POST", "/v1/scopes", json=_create_body(**changes))
        assert (err.value.status, err.value.reason) == (status, reason)

    async def test_only_the_principal_itself_may_create_its_scope(self, sh: Harness) -> None:
        """Bob cannot open a scope for Alice, and an operator cannot either."""
        for token in (sh.subject_token(BOB), sh.operator_token()):
            with pytest.raises(ControlError) as err:
                await sh.client(token).create_scope(ALICE, AGENT, ROOM)
            assert (err.value.status, err.value.reason) == (403, "not_subject")


class TestConsent:
    @pytest.mark.kagent
    async def test_grant_enables_advances_the_generation_and_writes_a_receipt(self, h: Harness) -> None:
        """Consent gives a content-free receipt naming purpose, policy version and the new generation."""
        scope_id = await h.scope(granted=False)
        granted = await h.client().grant(scope_id, "remember my preferences", "v1")
        assert (granted["enabled"], granted["generation"]) == (True, 1)
        assert granted["receipt"]["action"] == "grant"
        receipt = granted["receipt"]
        assert (receipt["purpose"], receipt["policy_version"]) == ("remember my preferences", "v1")
        receipts = await h.parts.store.scopes.receipts(scope_id)
        assert [(r.receipt_id, r.generation_after) for r in receipts] == [(granted["receipt"]["receipt_id"], 1)]
        audit = [r for r in await h.parts.store.audit_log.audit_rows(scope_id) if r["operation"] == "consent.grant"]
        assert [r["policy_revision"] for r in audit] == [h.parts.policy.revision]

    @pytest.mark.kagent
    async def test_withdrawal_disables_advances_and_erases_with_evidence(self, h: Harness) -> None:
        """DELETE consent: scope off at a new generation, a withdraw receipt, and a verified erasure."""
        scope_id = await h.scope()
        await h.saved(scope_id, "likes green tea")
        out = await h.client().withdraw(scope_id)
        assert (out["enabled"], out["generation"], out["receipt"]["action"]) == (False, 2, "withdraw")
        assert (out["erasure"]["kind"], out["erasure"]["state"]) == ("withdraw", "verified")
        assert [s["state"] for s in out["erasure"]["steps"]] == [
            "requested",
            "fenced",
            "quiesced",
            "deleted",
            "verified",
        ]
        assert await h.rows(scope_id) == []
        status, body = await h.save(scope_id, "after withdrawal", generation=1)
        assert (status, body["error"]) == (403, "consent_disabled")

    @pytest.mark.parametrize("purpose", ["", "x" * 257, "line\nbreak"])
    async def test_purpose_is_bounded_plain_text(self, sh: Harness, purpose: str) -> None:
        """An empty, oversized or multi-line purpose is refused before anything changes."""
        scope_id = await sh.scope(granted=False)
        with pytest.raises(ControlError) as err:
            await sh.client().grant(scope_id, purpose, "v1")
        assert (err.value.status, err.value.reason) == (400, "bad_request")
        assert (await sh.client().status(scope_id))["enabled"] is False


class TestStatus:
    @pytest.mark.kagent
    async def test_status_reports_consent_limits_counts_and_last_erasure(self, h: Harness) -> None:
        """Status names purpose, hard expiry, cap, live count and the last erasure, and no memory text."""
        scope_id = await h.scope()
        entry = await h.saved(scope_id, "likes green tea")
        await h.saved(scope_id, "lives in Lisbon")
        await h.client().forget(scope_id, entry)
        status = await h.client().status(scope_id)
        assert (status["enabled"], status["purpose"]) == (True, "remember my preferences")
        assert status["hard_expiry_days"] == 7
        assert status["entries"] == {"live": 1, "cap": 1000, "pending_physical_deletion": 1}
        assert (status["last_erasure"]["kind"], status["last_erasure"]["state"]) == ("forget_one", "verified")
        assert "green tea" not in repr(status) and "Lisbon" not in repr(status)


class TestCallers:
    @pytest.mark.parametrize(
        "who", ["none", "garbage", "expired", "wrong_key", "context", "untyped", "long_lived", "bob", "operator"]
    )
    async def test_only_the_exact_subject_reaches_a_scope(self, sh: Harness, who: str) -> None:
        """No token, a bad, expired, untyped or long-lived one, or a delegation context → 401 auth_required;
        Bob or an operator → 403 not_subject."""
        scope_id = await sh.scope()
        now = sh.now()
        claims = {"sub": ALICE, "iat": now, "exp": now + 60, "jti": "j-1"}
        tokens = {
            "none": None,
            "garbage": "not-a-jwt",
            "expired": mint_token(
                {**claims, "iat": now - 600, "exp": now - 1}, sh.keys.bridge, "HS256", typ=TokenType.SUBJECT
            ),
            "wrong_key": mint_token(claims, b"k" * 64, "HS256", typ=TokenType.SUBJECT),
            # A delegation context the bridge signed with the same key: a statement, never a credential.
            "context": sh.context(),
            "untyped": jwt.encode(claims, sh.keys.bridge, algorithm="HS256"),
            "long_lived": mint_token({**claims, "exp": now + 86400}, sh.keys.bridge, "HS256", typ=TokenType.SUBJECT),
            "bob": sh.subject_token(BOB),
            "operator": sh.operator_token(),
        }
        api = sh.client()
        api.token = tokens[who]
        unauthenticated = who not in ("bob", "operator")
        expected = (401, "auth_required") if unauthenticated else (403, "not_subject")
        for call in (
            api.status(scope_id),
            api.grant(scope_id, "p", "v2"),
            api.withdraw(scope_id),
            api.confirmed(scope_id, "forget-all"),
            api.confirmed(scope_id, "off"),
        ):
            with pytest.raises(ControlError) as err:
                await call
            assert (err.value.status, err.value.reason) == expected
        assert (await sh.client().status(scope_id))["enabled"] is True

    async def test_a_subject_token_changes_consent_once(self, sh: Harness) -> None:
        """A consent change spends the token: replaying it (from a log, a proxy or a pod) is auth_required."""
        scope_id = await sh.scope(granted=False)
        api = sh.client(sh.subject_token())
        await api.grant(scope_id, "remember my preferences", "v1")
        for replay in (api.grant(scope_id, "p", "v2"), api.withdraw(scope_id)):
            with pytest.raises(ControlError) as err:
                await replay
            assert (err.value.status, err.value.reason) == (401, "auth_required")
        assert (await api.status(scope_id))["generation"] == 1  # reading does not spend it

    @pytest.mark.parametrize(
        ("authenticated", "status", "reason"), [(False, 401, "auth_required"), (True, 404, "not_found")]
    )
    async def test_callers_are_authenticated_before_scopes_are_looked_up(
        self, sh: Harness, authenticated: bool, status: int, reason: str
    ) -> None:
        """An unknown scope id tells an unauthenticated caller nothing beyond auth_required."""
        api = sh.client()
        api.token = api.token if authenticated else None
        with pytest.raises(ControlError) as err:
            await api.status("s" + "0" * 24)
        assert (err.value.status, err.value.reason) == (status, reason)

    async def test_refusals_are_audited_without_content(self, sh: Harness) -> None:
        """Every refusal leaves an audit row with its code and the decision id the caller saw."""
        scope_id = await sh.scope()
        with pytest.raises(ControlError) as err:
            await sh.client(sh.subject_token(BOB)).status(scope_id)
        rows = await sh.parts.store.audit_log.audit_rows(scope_id)
        assert any(r["reason"] == "not_subject" and r["decision_id"] == err.value.decision_id for r in rows)
