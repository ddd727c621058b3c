"""Key material for the token tests: an HS256 secret, an Ed25519 and an RSA key pair, as files."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from sidecar.identity.tokens import TokenType, Verifier, mint_token

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
