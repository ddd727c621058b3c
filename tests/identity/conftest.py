"""Key material for the token tests: an HS256 secret, an Ed25519 and an RSA key pair, as files."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from sidecar.identity.tokens import TokenType, Verifier, load_verifier, mint_token

NOW = 1_700_000_000
#: alg -> (verifier key file, signing key, public PEM or None)
KeyFiles = dict[str, tuple[Path, bytes, bytes | None]]


@dataclass(frozen=True)
class Signer:
    """One verifier with the key that signs for it."""

    alg: str
    verifier: Verifier
    signing_key: bytes
    public_pem: bytes | None

    def sign(self, claims: dict[str, Any], typ: TokenType = TokenType.CONTEXT) -> str:
        """Mint a token of kind ``typ`` the verifier accepts."""
        return mint_token(claims, self.signing_key, self.alg, typ=typ)


def pems(private: PrivateKeyTypes) -> tuple[bytes, bytes]:
    """Return (private PEM, public PEM) of a private key."""
    priv = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return priv, pub


def hs256_forge(claims: dict[str, Any], secret: bytes, alg: str = "HS256") -> str:
    """Build an HMAC-signed token by hand with any bytes as the secret (for forgery tests)."""

    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")

    signing_input = b64(json.dumps({"alg": alg, "typ": "JWT"}).encode()) + b"." + b64(json.dumps(claims).encode())
    mac = hmac.new(secret, signing_input, {"HS256": hashlib.sha256, "HS512": hashlib.sha512}.get(alg, hashlib.sha256))
    return (signing_input + b"." + b64(mac.digest())).decode()


@pytest.fixture(scope="session")
def key_files(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    """alg -> (verifier key file, signing key, public PEM or None), generated once per run."""
    folder = tmp_path_factory.mktemp("keys")
    secret = secrets.token_hex(32).encode()
    files: KeyFiles = {}
    (folder / "hs256.key").write_bytes(secret + b"\n")
    files["HS256"] = (folder / "hs256.key", secret, None)
    for alg, private in (
        ("EdDSA", ed25519.Ed25519PrivateKey.generate()),
        ("RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    ):
        priv, pub = pems(private)
        (folder / f"{alg}.pub").write_bytes(pub)
        files[alg] = (folder / f"{alg}.pub", priv, pub)
    return files


@pytest.fixture(params=["HS256", "EdDSA", "RS256"])
def signer(request: pytest.FixtureRequest, key_files: KeyFiles) -> Signer:
    """A verifier loaded from its key file, with its signing key; one per supported algorithm."""
    path, signing_key, public_pem = key_files[request.param]
    return Signer(request.param, load_verifier(path), signing_key, public_pem)


@pytest.fixture(scope="session")
def hs256(key_files: KeyFiles) -> Signer:
    """The HS256 signer alone, for tests that do not depend on the algorithm."""
    path, signing_key, _ = key_files["HS256"]
    return Signer("HS256", load_verifier(path), signing_key, None)


@pytest.fixture(scope="session")
def stranger_keys() -> dict[str, bytes]:
    """alg -> a signing key of the right type that no verifier trusts."""
    ed_priv, _ = pems(ed25519.Ed25519PrivateKey.generate())
    rsa_priv, _ = pems(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return {"HS256": secrets.token_hex(32).encode(), "EdDSA": ed_priv, "RS256": rsa_priv}
