"""Verifier key files, control-API bearer tokens (subject and operator), and token minting."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from sidecar.identity import IdentityError
from sidecar.identity.tokens import (
    KeySet,
    OperatorToken,
    SubjectToken,
    TokenType,
    Verifier,
    bearer,
    load_keys,
    load_verifier,
    mint_operator,
    mint_subject,
    mint_token,
    verify_context,
    verify_operator_token,
    verify_subject_token,
)
from sidecar.reasons import Reason
from sidecar.secretfile import SecretError
from tests.identity.strategies import SENTINEL
from tests.support.identity import NOW, KeyFiles, Signer, pems


def _public_pem(private: PrivateKeyTypes) -> bytes:
    return pems(private)[1]


def _private_pem(private: PrivateKeyTypes) -> bytes:
    return pems(private)[0]


class TestLoadVerifier:
    def test_key_type_pins_the_algorithm(self, key_files: KeyFiles) -> None:
        """A secret verifies HS256, an Ed25519 key EdDSA and an RSA key RS256, and nothing else."""
        assert {alg: load_verifier(path).algorithm for alg, (path, _, _) in key_files.items()} == {
            "HS256": "HS256",
            "EdDSA": "EdDSA",
            "RS256": "RS256",
        }

    @pytest.mark.parametrize(
        ("content", "says"),
        [
            (f"{SENTINEL}-short".encode(), "shorter than 32 bytes"),
            (b"changeme", "placeholder"),
            (f"changeme-{SENTINEL}-changeme-changeme".encode(), "placeholder"),
            (f"placeholder-{SENTINEL}-0123456789abcdef".encode(), "placeholder"),
            (b"a" * 40, "placeholder"),
            (b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + SENTINEL.encode() + b" user@host", "asymmetric"),
            (_private_pem(ed25519.Ed25519PrivateKey.generate()), "private key"),
            (_public_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)), "at least 2048"),
            (_public_pem(ec.generate_private_key(ec.SECP256R1())), "Ed25519 and RSA"),
            (f"-----BEGIN PUBLIC KEY-----\n{SENTINEL}\n-----END PUBLIC KEY-----\n".encode(), "not a readable PEM"),
            (f"{SENTINEL} some text -----BEGIN PUBLIC KEY----- 0123456789".encode(), "not a readable PEM"),
        ],
    )
    def test_unusable_key_files_are_refused(self, tmp_path: Path, content: bytes, says: str) -> None:
        """Short, placeholder, private, weak or foreign keys fail at load, naming the setting only."""
        path = tmp_path / "bridge.key"
        path.write_bytes(content)
        with pytest.raises(SecretError) as exc:
            load_verifier(path, setting="trust.bridge_key_file")
        message = str(exc.value)
        assert message.startswith("trust.bridge_key_file: ") and says in message
        assert SENTINEL not in message and "changeme" not in message

    def test_missing_file_names_the_setting(self, tmp_path: Path) -> None:
        """A key file that does not exist is a configuration error naming its setting."""
        with pytest.raises(SecretError, match=r"^trust\.operator_key_file: cannot read"):
            load_verifier(tmp_path / "absent.key", setting="trust.operator_key_file")

    def test_verifier_repr_hides_the_key(self, key_files: KeyFiles) -> None:
        """Printing a verifier shows its algorithm, never its secret."""
        path, secret, _ = key_files["HS256"]
        assert repr(load_verifier(path)) == "Verifier(algorithm='HS256')"
        assert secret.decode() not in repr(load_verifier(path))


def _subject_refused(token: str, signer: Signer, now: int = NOW) -> Reason:
    with pytest.raises(IdentityError) as exc:
        verify_subject_token(token, signer.verifier, now=now)
    return exc.value.reason


def _subject(**claims: Any) -> dict[str, Any]:
    return {"sub": "@alice:example.org", "iat": NOW, "exp": NOW + 120, "jti": "t-1", **claims}


def _operator(**claims: Any) -> dict[str, Any]:
    return {"sub": "ops@example.org", "role": "operator", "iat": NOW, "exp": NOW + 60, **claims}


class TestSubjectToken:
    def test_valid_token_names_the_canonical_subject(self, signer: Signer) -> None:
        """A subject token yields the canonical MXID, its expiry and its jti."""
        token = signer.sign(_subject(sub="@alice:Example.org"), TokenType.SUBJECT)
        assert verify_subject_token(token, signer.verifier, now=NOW) == SubjectToken(
            "@alice:example.org", NOW + 120, "t-1"
        )

    @pytest.mark.parametrize(
        "claims",
        [
            {"sub": "@alice:example.org", "iat": NOW, "exp": NOW + 120},
            {"iat": NOW, "exp": NOW + 120, "jti": "t"},
            {"sub": "@alice:example.org", "exp": NOW + 120, "jti": "t"},
            _subject(exp=NOW),
            _subject(iat=NOW + 60, exp=NOW + 120),
            _subject(nbf=NOW + 60),
            _subject(exp=float(NOW + 120)),
            _subject(jti="has space"),
            _subject(aud="someone-else"),
            _subject(sub=42),
            _subject(exp=NOW + 301),
        ],
    )
    def test_bad_tokens_require_authentication(self, hs256: Signer, claims: dict[str, Any]) -> None:
        """Missing (jti and iat included), expired, not-yet-valid, long-lived or mistyped claims: auth_required."""
        assert _subject_refused(hs256.sign(claims, TokenType.SUBJECT), hs256) is Reason.AUTH_REQUIRED

    @pytest.mark.parametrize("sub", ["alice", "alice@example.org", "@Alice:example.org", f"@{SENTINEL}:x.org"])
    def test_subject_must_be_a_complete_mxid(self, hs256: Signer, sub: str) -> None:
        """A verified token whose sub is not a complete MXID is principal_invalid, without quoting it."""
        with pytest.raises(IdentityError) as exc:
            verify_subject_token(hs256.sign(_subject(sub=sub), TokenType.SUBJECT), hs256.verifier, now=NOW)
        assert exc.value.reason is Reason.PRINCIPAL_INVALID and SENTINEL not in repr(exc.value)

    def test_untrusted_signature(self, signer: Signer, stranger_keys: dict[str, bytes]) -> None:
        """A token signed by another key answers auth_required."""
        token = mint_token(_subject(), stranger_keys[signer.alg], signer.alg, typ=TokenType.SUBJECT)
        assert _subject_refused(token, signer) is Reason.AUTH_REQUIRED

    @pytest.mark.parametrize("typ", [TokenType.CONTEXT, TokenType.OPERATOR, "JWT", None, "memgov-subject"])
    def test_another_kind_of_token_is_not_a_subject_bearer(self, hs256: Signer, typ: Any) -> None:
        """A validly signed token of another kind (a delegation context above all) is refused as a bearer."""
        # typ None: PyJWT leaves the header out entirely.
        token = jwt.encode(_subject(), hs256.signing_key, algorithm="HS256", headers={"typ": typ and str(typ)})
        assert _subject_refused(token, hs256) is Reason.AUTH_REQUIRED

    def test_typ_is_a_media_type(self, hs256: Signer) -> None:
        """The typ header compares case-insensitively and may carry the application/ prefix (RFC 7515)."""
        for typ in ("Memgov-Subject+JWT", "application/memgov-subject+jwt"):
            token = jwt.encode(_subject(), hs256.signing_key, algorithm="HS256", headers={"typ": typ})
            assert verify_subject_token(token, hs256.verifier, now=NOW).sub == "@alice:example.org"

    def test_lifetime_is_a_setting(self, hs256: Signer) -> None:
        """A deployment may shorten the accepted subject-token lifetime."""
        token = hs256.sign(_subject(exp=NOW + 120), TokenType.SUBJECT)
        with pytest.raises(IdentityError):
            verify_subject_token(token, hs256.verifier, now=NOW, max_age_s=60)


class TestOperatorToken:
    def test_operator_role_is_accepted(self, signer: Signer) -> None:
        """A token with role operator yields the operator's sub and expiry."""
        token = signer.sign(_operator(), TokenType.OPERATOR)
        assert verify_operator_token(token, signer.verifier, now=NOW) == OperatorToken("ops@example.org", NOW + 60)

    @pytest.mark.parametrize(
        "claims",
        [
            {"sub": "ops", "iat": NOW, "exp": NOW + 60},
            _operator(role="admin"),
            _operator(role=["operator"]),
            _operator(role="Operator"),
            _operator(exp=NOW - 1),
            _operator(sub=""),
            _operator(sub="has space"),
            {"iat": NOW, "exp": NOW + 60, "role": "operator"},
            {"sub": "ops", "exp": NOW + 60, "role": "operator"},
            _operator(exp=NOW + 3601),
        ],
    )
    def test_anything_else_requires_authentication(self, hs256: Signer, claims: dict[str, Any]) -> None:
        """Without exactly role operator, a valid sub, iat and a live, bounded exp, the answer is auth_required."""
        with pytest.raises(IdentityError) as exc:
            verify_operator_token(hs256.sign(claims, TokenType.OPERATOR), hs256.verifier, now=NOW)
        assert exc.value.reason is Reason.AUTH_REQUIRED

    @pytest.mark.parametrize("typ", [TokenType.CONTEXT, TokenType.SUBJECT])
    def test_other_kinds_are_not_operator_tokens(self, hs256: Signer, typ: TokenType) -> None:
        """A subject token or a context carrying role operator is still not an operator token."""
        with pytest.raises(IdentityError):
            verify_operator_token(hs256.sign(_operator(), typ), hs256.verifier, now=NOW)


class TestMinting:
    def test_minted_tokens_verify_as_their_kind_only(self, hs256: Signer) -> None:
        """mint_subject and mint_operator produce tokens each verifier accepts, and only that one."""
        subject = mint_subject("@alice:example.org", hs256.signing_key, "HS256", now=NOW)
        operator = mint_operator("ops", hs256.signing_key, "HS256", now=NOW)
        assert verify_subject_token(subject, hs256.verifier, now=NOW).jti
        assert verify_operator_token(operator, hs256.verifier, now=NOW).sub == "ops"
        with pytest.raises(IdentityError):
            verify_subject_token(operator, hs256.verifier, now=NOW)
        with pytest.raises(IdentityError):
            verify_operator_token(subject, hs256.verifier, now=NOW)
        with pytest.raises(IdentityError):
            verify_context(subject, hs256.verifier, now=NOW)

    def test_every_subject_token_gets_its_own_jti(self, hs256: Signer) -> None:
        """Two tokens minted in the same second are still distinct single-use credentials."""
        a = verify_subject_token(mint_subject("@a:x.org", hs256.signing_key, "HS256", now=NOW), hs256.verifier, now=NOW)
        b = verify_subject_token(mint_subject("@a:x.org", hs256.signing_key, "HS256", now=NOW), hs256.verifier, now=NOW)
        assert a.jti != b.jti


class TestBearer:
    @pytest.mark.parametrize(
        ("header", "token"),
        [
            ("Bearer abc.def.ghi", "abc.def.ghi"),
            ("bearer abc-_~+/=", "abc-_~+/="),
            ("BEARER a", "a"),
            ("Bearer  abc", None),
            ("Bearer abc ", None),
            (" Bearer abc", None),
            ("Bearer", None),
            ("Bearer ", None),
            ("Basic YWxpY2U6cHc=", None),
            ("Bearer a b", None),
            ("Bearer a\n", None),
            ("Bearer a=b", None),
            ("Bearer " + "a" * 20_000, None),
            ("", None),
            (None, None),
        ],
    )
    def test_only_a_single_well_formed_bearer_token_is_taken(self, header: str | None, token: str | None) -> None:
        """The scheme is case-insensitive; anything but one space and one b64token is refused."""
        assert bearer(header) == token


class TestMintToken:
    @pytest.mark.parametrize(
        ("make_key", "alg"),
        [
            (lambda: _private_pem(ed25519.Ed25519PrivateKey.generate()), "RS256"),
            (lambda: _private_pem(ec.generate_private_key(ec.SECP256R1())), "EdDSA"),
            (lambda: secrets.token_bytes(32), "HS512"),
            (lambda: secrets.token_bytes(32), "none"),
        ],
    )
    def test_key_and_algorithm_must_agree(self, make_key: Callable[[], bytes], alg: str) -> None:
        """Minting refuses unsupported algorithms and keys of the wrong type."""
        with pytest.raises(ValueError):
            mint_token({"sub": "@alice:example.org"}, make_key(), alg, typ=TokenType.SUBJECT)


_A, _B = b"bridge-key-a-0123456789abcdefghij", b"bridge-key-b-klmnopqrstuvwxyz012345"


def _operator_token(key: bytes, kid: str | None, now: int = NOW, ttl_s: int = 300) -> str:
    return mint_operator("ops-oncall", key, "HS256", now=now, ttl_s=ttl_s, kid=kid)


class TestKeySet:
    @pytest.mark.parametrize(
        ("signed_with", "kid", "verifies_as"),
        [
            (_A, "2026-a", "2026-a"),
            (_B, "2026-b", "2026-b"),
            (_B, None, "2026-b"),
            (_A, "2026-b", None),
            (_A, "unknown", None),
            (b"stranger-key-0123456789abcdefghij", None, None),
        ],
        ids=["named-a", "named-b", "unnamed-tries-each", "named-the-other", "unknown-kid", "stranger"],
    )
    def test_a_named_key_alone_verifies_its_tokens(
        self, signed_with: bytes, kid: str | None, verifies_as: str | None
    ) -> None:
        """A kid names the one key tried (an unknown kid is refused outright); without one, each key is tried."""
        seen: list[str] = []
        keys = KeySet({"2026-a": Verifier("HS256", _A), "2026-b": Verifier("HS256", _B)})
        keys.on_verified = seen.append
        token = _operator_token(signed_with, kid)
        if verifies_as is None:
            with pytest.raises(IdentityError) as err:
                verify_operator_token(token, keys, now=NOW)
            assert err.value.reason is Reason.AUTH_REQUIRED and seen == []
        else:
            assert verify_operator_token(token, keys, now=NOW).sub == "ops-oncall"
            assert seen == [verifies_as]

    def test_an_expired_token_is_expired_whichever_key_is_tried_first(self) -> None:
        """Without a kid, a key that verified the signature decides: expired, not invalid."""
        keys = KeySet({"2026-a": Verifier("HS256", _A), "2026-b": Verifier("HS256", _B)})
        with pytest.raises(IdentityError) as err:
            keys.decode(_operator_token(_B, None, now=NOW - 600), typ=TokenType.OPERATOR, now=NOW)
        assert err.value.reason is Reason.CONTEXT_EXPIRED

    def test_replaced_keys_apply_at_once_and_ids_are_bounded(self) -> None:
        """replace swaps the keys for every holder; an id of another shape or a ninth key is refused."""
        keys = KeySet({"2026-a": Verifier("HS256", _A)})
        token = _operator_token(_A, "2026-a")
        keys.replace({"2026-b": Verifier("HS256", _B)})
        with pytest.raises(IdentityError):
            verify_operator_token(token, keys, now=NOW)
        for bad in ({"Key A": Verifier("HS256", _A)}, {f"k{n}": Verifier("HS256", _A) for n in range(9)}):
            with pytest.raises(ValueError):
                keys.replace(bad)
        assert keys.ids == ("2026-b",)

    def test_a_key_folder_holds_one_key_per_id_named_file(self, tmp_path: Path) -> None:
        """Files named like a key id are keys; a mounted Secret's ..data link and dot files are not."""
        (tmp_path / "2026-a").write_bytes(_A)
        (tmp_path / "..data").mkdir()
        (tmp_path / ".hidden").write_bytes(_B)
        assert sorted(load_keys(tmp_path, "trust.operator_keys_dir")) == ["2026-a"]
        (tmp_path / "2026-b").write_bytes(b"changeme")
        with pytest.raises(SecretError) as err:
            load_keys(tmp_path, "trust.operator_keys_dir")
        assert "trust.operator_keys_dir/2026-b" in str(err.value) and "changeme" not in str(err.value)
