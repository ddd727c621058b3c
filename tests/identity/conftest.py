"""Key material for the token tests: an HS256 secret, an Ed25519 and an RSA key pair, as files."""

from __future__ import annotations

import secrets

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from sidecar.identity.tokens import load_verifier
from tests.support.identity import KeyFiles, Signer, pems


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
