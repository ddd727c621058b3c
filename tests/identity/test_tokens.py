"""Verifier key files, control-API bearer tokens (subject and operator), and token minting."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from sidecar.identity import IdentityError
from sidecar.identity.tokens import (
    OperatorToken,
    SubjectToken,
    bearer,
    load_verifier,
    mint_token,
    verify_operator_token,
    verify_subject_token,
)
from sidecar.reasons import Reason
from sidecar.settings import SettingsError
from tests.identity.conftest import NOW, KeyFiles, Signer, pems
from tests.identity.strategies import SENTINEL


def _public_pem(private: PrivateKeyTypes) -> bytes:
    return pems(private)[1]


def _private_pem(private: PrivateKeyTypes) -> bytes:
    return pems(private)[0]


class TestLoadVerifier:
    def test_key_type_pins_the_algorithm(self, key_files: KeyFiles) -> None:
        """A secret verifies HS256, an Ed25519 key EdDSA and an RSA key RS256, and nothing else."""
        assert {alg: load_verifier(path).algorithm for alg, (path, _, _) in key_files.items()} == {
            "HS256": "HS256", "EdDSA": "EdDSA", "RS256": "RS256"}

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
        with pytest.raises(SettingsError) as exc:
            load_verifier(path, setting="trust.bridge_key_file")
        message = str(exc.value)
        assert message.startswith("trust.bridge_key_file: ") and says in message
        assert SENTINEL not in message and "changeme" not in message

    def test_missing_file_names_the_setting(self, tmp_path: Path) -> None:
        """A key file that does not exist is a configuration error naming its setting."""
        with pytest.raises(SettingsError, match=r"^trust\.operator_key_file: cannot read"):
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


class TestSubjectToken:
    def test_valid_token_names_the_canonical_subject(self, signer: Signer) -> None:
        """A subject token yields the canonical MXID, its expiry and its jti."""
        token = signer.sign({"sub": "@alice:Example.org", "exp": NOW + 300, "jti": "t-1"})
        assert verify_subject_token(token, signer.verifier, now=NOW) == SubjectToken("@alice:example.org", NOW + 300,
                                                                                     "t-1")

    def test_jti_is_optional(self, hs256: Signer) -> None:
        """A subject token without jti is accepted."""
        token = hs256.sign({"sub": "@alice:example.org", "exp": NOW + 300})
        assert verify_subject_token(token, hs256.verifier, now=NOW).jti is None

    @pytest.mark.parametrize(
        "claims",
        [
            {"sub": "@alice:example.org"},
            {"exp": NOW + 300},
            {"sub": "@alice:example.org", "exp": NOW},
            {"sub": "@alice:example.org", "exp": NOW + 300, "iat": NOW + 60},
            {"sub": "@alice:example.org", "exp": NOW + 300, "nbf": NOW + 60},
            {"sub": "@alice:example.org", "exp": float(NOW + 300)},
            {"sub": "@alice:example.org", "exp": NOW + 300, "jti": "has space"},
            {"sub": "@alice:example.org", "exp": NOW + 300, "aud": "someone-else"},
            {"sub": 42, "exp": NOW + 300},
        ],
    )
    def test_bad_tokens_require_authentication(self, hs256: Signer, claims: dict[str, Any]) -> None:
        """Missing, expired, not-yet-valid or mistyped claims answer auth_required."""
        assert _subject_refused(hs256.sign(claims), hs256) is Reason.AUTH_REQUIRED

    @pytest.mark.parametrize("sub", ["alice", "alice@example.org", "@Alice:example.org", f"@{SENTINEL}:x.org"])
    def test_subject_must_be_a_complete_mxid(self, hs256: Signer, sub: str) -> None:
        """A verified token whose sub is not a complete MXID is principal_invalid, without quoting it."""
        with pytest.raises(IdentityError) as exc:
            verify_subject_token(hs256.sign({"sub": sub, "exp": NOW + 300}), hs256.verifier, now=NOW)
        assert exc.value.reason is Reason.PRINCIPAL_INVALID and SENTINEL not in repr(exc.value)

    def test_untrusted_signature(self, signer: Signer, stranger_keys: dict[str, bytes]) -> None:
        """A token signed by another key answers auth_required."""
        token = mint_token({"sub": "@alice:example.org", "exp": NOW + 300}, stranger_keys[signer.alg], signer.alg)
        assert _subject_refused(token, signer) is Reason.AUTH_REQUIRED


class TestOperatorToken:
    def test_operator_role_is_accepted(self, signer: Signer) -> None:
        """A token with role operator yields the operator's sub and expiry."""
        token = signer.sign({"sub": "ops@example.org", "exp": NOW + 60, "role": "operator"})
        assert verify_operator_token(token, signer.verifier, now=NOW) == OperatorToken("ops@example.org", NOW + 60)

    @pytest.mark.parametrize(
        "claims",
        [
            {"sub": "ops", "exp": NOW + 60},
            {"sub": "ops", "exp": NOW + 60, "role": "admin"},
            {"sub": "ops", "exp": NOW + 60, "role": ["operator"]},
            {"sub": "ops", "exp": NOW + 60, "role": "Operator"},
            {"sub": "ops", "exp": NOW - 1, "role": "operator"},
            {"sub": "", "exp": NOW + 60, "role": "operator"},
            {"sub": "has space", "exp": NOW + 60, "role": "operator"},
            {"exp": NOW + 60, "role": "operator"},
        ],
    )
    def test_anything_else_requires_authentication(self, hs256: Signer, claims: dict[str, Any]) -> None:
        """Without exactly role operator, a valid sub and a live exp, the answer is auth_required."""
        with pytest.raises(IdentityError) as exc:
            verify_operator_token(hs256.sign(claims), hs256.verifier, now=NOW)
        assert exc.value.reason is Reason.AUTH_REQUIRED


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
            mint_token({"sub": "@alice:example.org"}, make_key(), alg)
