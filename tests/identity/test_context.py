"""Delegation contexts (X-Memgov-Context): signature, algorithm pinning, lifetime and shape."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.identity import IdentityError
from sidecar.identity.mxid import Origin
from sidecar.identity.tokens import DelegationContext, ScopeKind, TokenType, load_verifier, mint_token, verify_context
from sidecar.reasons import Reason
from tests.identity.strategies import PROPERTY, SENTINEL, mxids, server_names
from tests.support.identity import NOW, KeyFiles, Signer, hs256_forge

ROOM_V12 = "!" + "Ab3_-" * 8 + "xyz"


def context_claims() -> dict[str, Any]:
    """A valid context for @alice in her control room, issued at NOW for 60 s."""
    return {
        "sub": "@alice:example.org",
        "origin": "native",
        "agent": "kagent/k8s-agent",
        "scope": {"kind": "control_room", "room_id": ROOM_V12},
        "room": {
            "room_version": "12",
            "encrypted": False,
            "join_rule": "invite",
            "history_visibility": "joined",
            "members": ["@alice:example.org", "@bridge:example.org", "@k8s-agent:example.org"],
            "invited": [],
            "server_acl": {"allow": ["example.org"], "deny": ["*"], "allow_ip_literals": False},
        },
        "audience": {"servers": ["example.org"], "classification": "private"},
        "iat": NOW,
        "exp": NOW + 60,
        "jti": "4f2c9a1e-7b1d-4c55-9a0e-3b7f5d2e8c10",
    }


def _with(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    claims = context_claims()
    change(claims)
    return claims


def _refused(token: str, signer: Signer, *, now: int = NOW, max_age_s: int = 120) -> Reason:
    with pytest.raises(IdentityError) as exc:
        verify_context(token, signer.verifier, now=now, max_age_s=max_age_s)
    return exc.value.reason


class TestValidContexts:
    def test_each_algorithm_verifies(self, signer: Signer) -> None:
        """HS256, EdDSA and RS256 contexts verify and expose every claim."""
        ctx = verify_context(signer.sign(context_claims()), signer.verifier, now=NOW + 1)
        assert isinstance(ctx, DelegationContext)
        assert (ctx.sub, ctx.origin, ctx.agent) == ("@alice:example.org", Origin.NATIVE, "kagent/k8s-agent")
        assert (ctx.scope.kind, ctx.scope.room_id) == (ScopeKind.CONTROL_ROOM, ROOM_V12)
        assert ctx.room.members[1] == "@bridge:example.org" and ctx.room.server_acl.deny == ["*"]
        assert (ctx.jti, ctx.exp) == (context_claims()["jti"], NOW + 60)

    def test_identifiers_come_out_canonical(self, hs256: Signer) -> None:
        """Host names in the subject, members and audience are lower-cased."""
        claims = _with(lambda c: c.update(sub="@alice:Example.ORG"))
        claims["room"]["members"][0] = "@alice:EXAMPLE.org"
        claims["audience"]["servers"] = ["Example.Org"]
        ctx = verify_context(hs256.sign(claims), hs256.verifier, now=NOW)
        assert (ctx.sub, ctx.room.members[0], ctx.audience.servers) == (
            "@alice:example.org",
            "@alice:example.org",
            ["example.org"],
        )

    @pytest.mark.parametrize(
        ("iat", "exp", "now"), [(NOW, NOW + 120, NOW), (NOW + 5, NOW + 60, NOW), (NOW, NOW + 1, NOW)]
    )
    def test_boundaries_that_still_pass(self, hs256: Signer, iat: int, exp: int, now: int) -> None:
        """A 120 s lifetime, 5 s of clock skew and a last valid second are accepted."""
        token = hs256.sign(_with(lambda c: c.update(iat=iat, exp=exp)))
        assert verify_context(token, hs256.verifier, now=now).jti == context_claims()["jti"]

    @PROPERTY
    @given(
        sub=mxids,
        members=st.lists(mxids, max_size=5),
        servers=st.lists(server_names, max_size=5),
        lifetime=st.integers(1, 120),
        age=st.integers(0, 119),
    )
    def test_generated_contexts_round_trip(
        self, hs256: Signer, sub: str, members: list[str], servers: list[str], lifetime: int, age: int
    ) -> None:
        """Any well-formed context verifies to exactly the claims that were signed."""
        claims = _with(lambda c: c.update(sub=sub, iat=NOW, exp=NOW + lifetime))
        claims["room"]["members"], claims["audience"]["servers"] = members, servers
        now = NOW + min(age, lifetime - 1)
        assert verify_context(hs256.sign(claims), hs256.verifier, now=now).model_dump(mode="json") == claims


class TestRefusedContexts:
    @pytest.mark.parametrize(("exp", "now"), [(NOW + 60, NOW + 60), (NOW + 60, NOW + 61), (NOW + 1, NOW + 10_000)])
    def test_expired(self, signer: Signer, exp: int, now: int) -> None:
        """A context at or past its exp is context_expired."""
        assert _refused(signer.sign(_with(lambda c: c.update(exp=exp))), signer, now=now) is Reason.CONTEXT_EXPIRED

    @pytest.mark.parametrize(
        ("iat", "exp", "max_age_s"),
        [
            (NOW + 6, NOW + 60, 120),
            (NOW + 3600, NOW + 3660, 120),
            (NOW, NOW + 121, 120),
            (NOW, NOW + 3600, 120),
            (NOW, NOW + 31, 30),
            (NOW + 2, NOW + 2, 120),
            (NOW + 3, NOW + 2, 120),
        ],
    )
    def test_future_or_long_lived(self, signer: Signer, iat: int, exp: int, max_age_s: int) -> None:
        """iat beyond 5 s of skew, exp <= iat, or exp - iat above max_age_s is context_invalid."""
        token = signer.sign(_with(lambda c: c.update(iat=iat, exp=exp)))
        assert _refused(token, signer, max_age_s=max_age_s) is Reason.CONTEXT_INVALID

    def test_signed_with_an_untrusted_key(self, signer: Signer, stranger_keys: dict[str, bytes]) -> None:
        """A context signed by a key of the right type but not the configured one is context_invalid."""
        token = mint_token(context_claims(), stranger_keys[signer.alg], signer.alg, typ=TokenType.CONTEXT)
        assert _refused(token, signer) is Reason.CONTEXT_INVALID

    def test_alg_none(self, signer: Signer) -> None:
        """An unsigned (alg: none) context is context_invalid for every key type."""
        assert _refused(jwt.encode(context_claims(), None, algorithm="none"), signer) is Reason.CONTEXT_INVALID

    def test_other_algorithms_are_refused(self, signer: Signer, stranger_keys: dict[str, bytes]) -> None:
        """A verifier accepts only its own key type's algorithm, even with a matching secret."""
        for alg, key in stranger_keys.items():
            if alg != signer.alg:
                token = mint_token(context_claims(), key, alg, typ=TokenType.CONTEXT)
                assert _refused(token, signer) is Reason.CONTEXT_INVALID
        if signer.alg == "HS256":
            for alg in ("HS512", "hs256"):
                forged = hs256_forge(context_claims(), signer.signing_key, alg)
                assert _refused(forged, signer) is Reason.CONTEXT_INVALID

    @pytest.mark.parametrize("alg", ["EdDSA", "RS256"])
    @pytest.mark.parametrize("pem_form", ["as is", "stripped"])
    def test_algorithm_confusion(self, key_files: KeyFiles, alg: str, pem_form: str) -> None:
        """An HS256 token keyed with the verifier's own public PEM is refused (algorithm confusion)."""
        path, _, public_pem = key_files[alg]
        assert public_pem is not None
        pem = public_pem if pem_form == "as is" else public_pem.strip()
        with pytest.raises(IdentityError) as exc:
            verify_context(hs256_forge(context_claims(), pem), load_verifier(path), now=NOW)
        assert exc.value.reason is Reason.CONTEXT_INVALID

    @pytest.mark.parametrize(
        "change",
        [
            lambda c: c.pop("jti"),
            lambda c: c.pop("room"),
            lambda c: c.update(extra="x"),
            lambda c: c["room"].update(encrypted="false"),
            lambda c: c["room"].update(encrypted=0),
            lambda c: c["room"]["server_acl"].update(note="x"),
            lambda c: c["room"]["server_acl"].update(allow_ip_literals=None),
            lambda c: c.update(iat=float(NOW)),
            lambda c: c.update(exp=str(NOW + 60)),
            lambda c: c.update(exp=True),
            lambda c: c.update(sub="alice@example.org"),
            lambda c: c.update(sub="@Alice:example.org"),
            lambda c: c["room"]["members"].append("Alice"),
            lambda c: c["room"]["invited"].append("@а:example.org"),
            lambda c: c["room"].update(room_version=12),
            lambda c: c["room"].update(room_version=""),
            lambda c: c["scope"].update(room_id="#alias:example.org"),
            lambda c: c["scope"].update(kind="server"),
            lambda c: c.update(origin="admin"),
            lambda c: c.update(agent="k8s-agent"),
            lambda c: c.update(agent="kagent/K8s"),
            lambda c: c.update(jti="has space"),
            lambda c: c.update(jti=""),
            lambda c: c.update(jti=12345),
            lambda c: c["audience"].update(servers=["example.org."]),
            lambda c: c["audience"].update(servers="example.org"),
            lambda c: c["room"].update(members=["@a:example.org"] * 1025),
        ],
    )
    def test_malformed_claims(self, hs256: Signer, change: Callable[[dict[str, Any]], object]) -> None:
        """Missing, unknown, mistyped or malformed claims make the context invalid."""
        assert _refused(hs256.sign(_with(change)), hs256) is Reason.CONTEXT_INVALID

    @pytest.mark.parametrize("token", ["", "a.b.c", "not a token", "x" * 20_000, None, b"bytes"])
    def test_garbage(self, hs256: Signer, token: str) -> None:
        """Strings that are not JWTs at all are context_invalid."""
        assert _refused(token, hs256) is Reason.CONTEXT_INVALID

    @pytest.mark.parametrize(
        "change",
        [
            lambda c: c.update(sub=f"@{SENTINEL}:example.org"),
            lambda c: c.update(jti=f"{SENTINEL} x"),
            lambda c: c.update(note=SENTINEL),
            lambda c: c["room"]["members"].append(SENTINEL),
            lambda c: c.update(exp=NOW - 1, jti=SENTINEL),
        ],
    )
    def test_errors_never_quote_the_token(self, hs256: Signer, change: Callable[[dict[str, Any]], object]) -> None:
        """The error carries only its reason code; no claim value survives in it or its chain."""
        token = hs256.sign(copy.deepcopy(_with(change)))
        with pytest.raises(IdentityError) as exc:
            verify_context(token, hs256.verifier, now=NOW)
        err = exc.value
        assert str(err) in {"context_invalid", "context_expired"}
        assert SENTINEL not in repr(err) and SENTINEL not in str(err.args)
        assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)


class TestContextType:
    @pytest.mark.parametrize("typ", [TokenType.SUBJECT, TokenType.OPERATOR])
    def test_other_token_kinds_are_not_contexts(self, hs256: Signer, typ: TokenType) -> None:
        """A token of another kind carrying every context claim is still not a delegation context."""
        assert _refused(hs256.sign(context_claims(), typ), hs256) is Reason.CONTEXT_INVALID
