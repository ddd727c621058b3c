"""Signed tokens: verifier key files, delegation contexts, subject and operator bearer tokens, minting.

Every token names its kind in the JOSE ``typ`` header (RFC 8725 §3.11) and each verifier accepts
only its own kind (SPEC §5): a delegation context (``memgov-context+jwt``) is never a bearer
credential, a subject token (``memgov-subject+jwt``) never an operator's, and so on, even when
the bridge signs contexts and subject tokens with one key.

The verifier's algorithm is fixed by the key file, never by the token: an HS256 shared secret
verifies only HS256, an Ed25519 public key only EdDSA, an RSA public key only RS256. A token
whose header names anything else (``none`` included) is refused, and a PEM public key is never
usable as an HMAC secret, which closes the classic algorithm-confusion forgery.

Times are checked here against the caller's ``now`` (not the wall clock), so replays and expiry
are deterministic under test: ``exp <= now`` is expired, ``iat`` or ``nbf`` more than
:data:`CLOCK_SKEW_S` in the future is invalid.
"""

from __future__ import annotations

import enum
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Final, TypeGuard

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey, RSAPublicKey
from jwt.algorithms import HMACAlgorithm
from jwt.api_jwt import decode_complete
from jwt.types import Options
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from sidecar.identity import IdentityError
from sidecar.identity.appname import parse_agent_ref
from sidecar.identity.mxid import Origin, normalise_server_name, parse_mxid, parse_room_id
from sidecar.reasons import Reason
from sidecar.secretfile import SecretError, read_secret

CLOCK_SKEW_S: Final = 5
MAX_TOKEN_LEN: Final = 16 * 1024
MIN_HMAC_SECRET_BYTES: Final = 32
MIN_RSA_BITS: Final = 2048
JTI = re.compile(r"[A-Za-z0-9._~:\-]{1,128}", re.ASCII)

_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] ([A-Za-z0-9\-._~+/]+=*)", re.ASCII)
_OPERATOR_SUB = re.compile(r"[\x21-\x7e]{1,255}", re.ASCII)
_PLACEHOLDER_WORDS: Final = (b"changeme", b"change-me", b"change_me", b"placeholder", b"example", b"replace")
_TIME_CLAIMS: Final = ("exp", "iat", "nbf")


class TokenType(enum.StrEnum):
    """The JOSE ``typ`` of each kind of token memgov accepts."""

    CONTEXT = "memgov-context+jwt"
    SUBJECT = "memgov-subject+jwt"
    OPERATOR = "memgov-operator+jwt"


def _typ_matches(header_typ: object, expected: TokenType) -> bool:
    # JOSE typ is a media type: compared case-insensitively, with "application/" optional (RFC 7515 §4.1.9).
    if not isinstance(header_typ, str):
        return False
    typ = header_typ.lower()
    return typ in (expected.value, "application/" + expected.value)


class Verifier:
    """Verifies JWTs with one key and the one algorithm that key type allows."""

    __slots__ = ("_key", "algorithm")

    def __init__(self, algorithm: str, key: bytes | Ed25519PublicKey | RSAPublicKey) -> None:
        self.algorithm = algorithm
        self._key = key

    def __repr__(self) -> str:
        return f"Verifier(algorithm={self.algorithm!r})"

    def decode(self, token: str, *, typ: TokenType, now: int, required_claims: Iterable[str] = ()) -> dict[str, object]:
        """Return the verified claims of a token of kind ``typ``;
        raise IdentityError(context_invalid or context_expired)."""
        invalid = IdentityError(Reason.CONTEXT_INVALID)
        if not isinstance(token, str) or len(token) > MAX_TOKEN_LEN:
            raise invalid
        options: Options = {
            "require": list(required_claims),
            "verify_exp": False,
            "verify_iat": False,
            "verify_nbf": False,
        }
        try:
            # SECURITY: the allowed list holds only the key's own algorithm.
            decoded = decode_complete(token, self._key, algorithms=[self.algorithm], options=options)
        except (jwt.PyJWTError, ValueError, TypeError):
            raise invalid from None
        # SECURITY: a token of another kind, signed with the same key, is not this one (RFC 8725 §3.11).
        if not _typ_matches(decoded["header"].get("typ"), typ):
            raise invalid
        claims = decoded["payload"]
        if not isinstance(claims, dict):
            raise invalid
        times = {name: claims[name] for name in _TIME_CLAIMS if name in claims}
        if not all(_is_int(v) for v in times.values()):
            raise invalid
        if any(times.get(name, now) > now + CLOCK_SKEW_S for name in ("iat", "nbf")):
            raise invalid
        if "exp" in times and times["exp"] <= now:
            raise IdentityError(Reason.CONTEXT_EXPIRED)
        return claims


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def load_verifier(path: Path, *, setting: str = "trust.bridge_key_file") -> Verifier:
    """Load an HS256 secret or a PEM public key; raise SecretError naming ``setting``, never the key."""
    data = read_secret(Path(path), setting, min_bytes=MIN_HMAC_SECRET_BYTES)
    if b"-----BEGIN" in data:
        return Verifier(*_public_key(data, setting))
    lowered = data.lower()
    if any(word in lowered for word in _PLACEHOLDER_WORDS) or len(set(data)) < 8:
        raise SecretError(f"{setting}: the secret looks like a placeholder; use a random secret")
    try:
        # PyJWT's own guard: SSH and PEM-like material is never an HMAC secret.
        HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(data)
    except jwt.InvalidKeyError:
        raise SecretError(f"{setting}: an asymmetric key cannot be used as an HS256 secret") from None
    return Verifier("HS256", data)


#: Shape of a verification key's id: the JWT ``kid`` and the file name in a key folder (a bounded metric label).
KEY_ID: Final = re.compile(r"^[a-z0-9][a-z0-9_.\-]{0,31}$")
#: Most verification keys one purpose holds at once (the labels of its metric stay few).
MAX_KEYS: Final = 8


class KeySet(Verifier):
    """Several verification keys, each with an id (one purpose: the bridge's, or the operators').

    A token whose header names a key (``kid``) is verified with that key alone, and refused when no
    key has that id; a token naming none is tried with each key in turn. ``replace`` swaps the keys
    in place (a re-read key folder): every holder sees them at once. ``on_verified`` is told the id of
    each key a token verified with.
    """

    __slots__ = ("_slots", "on_verified")

    def __init__(self, slots: Mapping[str, Verifier]) -> None:
        self.on_verified: Callable[[str], None] | None = None
        self._slots: dict[str, Verifier] = {}
        self.replace(slots)

    def __repr__(self) -> str:
        return f"KeySet(ids={sorted(self._slots)!r})"

    def replace(self, slots: Mapping[str, Verifier]) -> None:
        """Use these keys from now on; ids of another shape, or more than MAX_KEYS, raise ValueError."""
        if len(slots) > MAX_KEYS or any(KEY_ID.fullmatch(kid) is None for kid in slots):
            raise ValueError(f"at most {MAX_KEYS} verification keys, each id matching {KEY_ID.pattern}")
        self._slots = dict(slots)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._slots))

    def decode(self, token: str, *, typ: TokenType, now: int, required_claims: Iterable[str] = ()) -> dict[str, object]:
        invalid = IdentityError(Reason.CONTEXT_INVALID)
        if not isinstance(token, str) or len(token) > MAX_TOKEN_LEN:
            raise invalid
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except (jwt.PyJWTError, ValueError, TypeError):
            raise invalid from None
        slots = self._slots
        if kid is not None:
            # SECURITY: a named key is the only one tried; an unknown name is not a reason to try the others.
            chosen = slots.get(kid) if isinstance(kid, str) else None
            candidates = [(kid, chosen)] if chosen is not None else []
        else:
            candidates = list(slots.items())
        failed: IdentityError = invalid
        for slot, verifier in candidates:
            try:
                claims = verifier.decode(token, typ=typ, now=now, required_claims=required_claims)
            except IdentityError as exc:
                # An expired token that verified with this key is expired, whatever the other keys say.
                failed = exc if exc.reason is Reason.CONTEXT_EXPIRED else failed
                continue
            if self.on_verified is not None:
                self.on_verified(slot)
            return claims
        raise failed


def load_keys(folder: Path, setting: str) -> dict[str, Verifier]:
    """The verification keys of a folder: each file whose name is a key id (``KEY_ID``) is one key, named by
    it; anything else there (a mounted Secret's ``..data`` links, dot files) is not a key. Raises
    SecretError naming ``setting`` and the id, never the key."""
    try:
        names = sorted(p.name for p in Path(folder).iterdir() if KEY_ID.fullmatch(p.name) and p.is_file())
    except OSError as exc:
        raise SecretError(f"{setting}: cannot read the folder ({exc.strerror})") from None
    if len(names) > MAX_KEYS:
        raise SecretError(f"{setting}: more than {MAX_KEYS} keys")
    return {name: load_verifier(Path(folder) / name, setting=f"{setting}/{name}") for name in names}


def _public_key(data: bytes, setting: str) -> tuple[str, Ed25519PublicKey | RSAPublicKey]:
    if b"PRIVATE KEY-----" in data:
        raise SecretError(f"{setting}: holds a private key; give the gateway the public key only")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise SecretError(f"{setting}: not a readable PEM public key") from None
    if isinstance(key, Ed25519PublicKey):
        return "EdDSA", key
    if isinstance(key, RSAPublicKey) and key.key_size >= MIN_RSA_BITS:
        return "RS256", key
    raise SecretError(f"{setting}: only Ed25519 and RSA (at least {MIN_RSA_BITS} bits) public keys are supported")


@dataclass(frozen=True)
class SigningKey:
    """A key tokens are signed with: an HS256 secret or an Ed25519/RSA PEM private key."""

    material: bytes = field(repr=False)
    alg: str


def load_signing_key(path: Path, option: str) -> SigningKey:
    """Read a signing key file; the algorithm follows from the key, as on the verifying side.

    Raises SecretError naming ``option``, never the key.
    """
    data = read_secret(path, option)
    if b"-----BEGIN" not in data:
        return SigningKey(data, "HS256")
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise SecretError(f"{option}: not an unencrypted PEM private key or an HS256 secret") from None
    if isinstance(private, Ed25519PrivateKey):
        return SigningKey(data, "EdDSA")
    if isinstance(private, RSAPrivateKey):
        return SigningKey(data, "RS256")
    raise SecretError(f"{option}: only Ed25519 and RSA private keys can sign")


def mint_token(claims: dict[str, object], key: bytes, alg: str, *, typ: TokenType, kid: str | None = None) -> str:
    """Sign claims as a token of kind ``typ`` with an HS256 secret or an Ed25519/RSA PEM private key;
    ``kid`` names the verification key (a :class:`KeySet` slot) in the header."""
    headers = {"typ": TokenType(typ).value}
    if kid is not None:
        headers["kid"] = kid
    if alg == "HS256":
        return jwt.encode(claims, key, algorithm=alg, headers=headers)
    if alg not in ("EdDSA", "RS256"):
        raise ValueError("alg must be HS256, EdDSA or RS256")
    private = serialization.load_pem_private_key(key, password=None)
    if not isinstance(private, Ed25519PrivateKey if alg == "EdDSA" else RSAPrivateKey):
        raise ValueError("the private key does not match alg")
    return jwt.encode(claims, private, algorithm=alg, headers=headers)


def mint_subject(sub: str, key: bytes, alg: str, *, now: int, ttl_s: int = 120, jti: str | None = None) -> str:
    """A subject bearer token: ``sub`` acting for itself, short-lived, with a fresh ``jti``."""
    claims = {"sub": sub, "iat": now, "exp": now + ttl_s, "jti": jti or secrets.token_hex(16)}
    return mint_token(claims, key, alg, typ=TokenType.SUBJECT)


def mint_operator(sub: str, key: bytes, alg: str, *, now: int, ttl_s: int = 300, kid: str | None = None) -> str:
    """An operator bearer token."""
    return mint_token(
        {"sub": sub, "role": "operator", "iat": now, "exp": now + ttl_s}, key, alg, typ=TokenType.OPERATOR, kid=kid
    )


def control_room(members: list[str], server_name: str, **overrides: object) -> dict[str, object]:
    """The attested state of a correct control room (SPEC R-5); ``overrides`` change single fields."""
    room: dict[str, object] = {
        "room_version": "12",
        "encrypted": False,
        "join_rule": "invite",
        "history_visibility": "joined",
        "members": members,
        "invited": [],
        "server_acl": {"allow": [server_name], "deny": [], "allow_ip_literals": False},
    }
    room.update(overrides)
    return room


def mint_context(
    key: bytes,
    alg: str,
    *,
    sub: str,
    agent: str,
    room_id: str,
    room: Mapping[str, object],
    servers: list[str],
    classification: str,
    now: int,
    origin: str = "native",
    ttl_s: int = 60,
    jti: str | None = None,
    iat: int | None = None,
    exp: int | None = None,
) -> str:
    """A delegation context for ``sub`` talking to ``agent`` from the control room ``room_id``."""
    claims = {
        "sub": sub,
        "origin": origin,
        "agent": agent,
        "scope": {"kind": "control_room", "room_id": room_id},
        "room": room,
        "audience": {"servers": servers, "classification": classification},
        "iat": now if iat is None else iat,
        "exp": now + ttl_s if exp is None else exp,
        "jti": jti or secrets.token_hex(16),
    }
    return mint_token(claims, key, alg, typ=TokenType.CONTEXT)


def bearer(header_value: str | None) -> str | None:
    """Return the token of an ``Authorization: Bearer <token>`` value, or None if it is not one."""
    if not isinstance(header_value, str) or len(header_value) > MAX_TOKEN_LEN:
        return None
    m = _BEARER.fullmatch(header_value)
    return None if m is None else m.group(1)


@dataclass(frozen=True, slots=True)
class SubjectToken:
    """A verified control-API caller acting for itself; ``sub`` is the canonical MXID."""

    sub: str
    exp: int
    jti: str


@dataclass(frozen=True, slots=True)
class OperatorToken:
    """A verified operator (``role: operator``)."""

    sub: str
    exp: int


def _exp_iat(claims: Mapping[str, object]) -> tuple[int, int]:
    """``exp`` and ``iat`` of decoded claims that require both (decode has checked they are integers)."""
    exp, iat = claims["exp"], claims["iat"]
    if not (_is_int(exp) and _is_int(iat)):
        raise IdentityError(Reason.CONTEXT_INVALID)
    return exp, iat


def _decode_auth(
    token: str, verifier: Verifier, now: int, typ: TokenType, required: tuple[str, ...], max_age_s: int
) -> tuple[dict[str, object], int]:
    """The claims of a bearer token, and its ``exp``."""
    try:
        claims = verifier.decode(token, typ=typ, now=now, required_claims=required)
        exp, iat = _exp_iat(claims)
    except IdentityError:
        raise IdentityError(Reason.AUTH_REQUIRED) from None
    # SECURITY: a bearer token is short-lived; one minted for a long life is refused outright.
    if not 0 < exp - iat <= max_age_s:
        raise IdentityError(Reason.AUTH_REQUIRED)
    return claims, exp


def verify_subject_token(token: str, verifier: Verifier, *, now: int, max_age_s: int = 300) -> SubjectToken:
    """Verify a subject's bearer token (``memgov-subject+jwt``, ``jti`` required, at most ``max_age_s``).

    Raises IdentityError(auth_required or principal_invalid).
    """
    claims, exp = _decode_auth(token, verifier, now, TokenType.SUBJECT, ("sub", "exp", "iat", "jti"), max_age_s)
    jti = claims["jti"]
    if not isinstance(jti, str) or JTI.fullmatch(jti) is None:
        raise IdentityError(Reason.AUTH_REQUIRED)
    return SubjectToken(sub=str(parse_mxid(claims["sub"])), exp=exp, jti=jti)


def verify_operator_token(token: str, verifier: Verifier, *, now: int, max_age_s: int = 3600) -> OperatorToken:
    """Verify an operator's bearer token (``memgov-operator+jwt``, ``role == "operator"``);
    raise IdentityError(auth_required)."""
    claims, exp = _decode_auth(token, verifier, now, TokenType.OPERATOR, ("sub", "exp", "iat", "role"), max_age_s)
    sub = claims["sub"]
    if claims["role"] != "operator" or not isinstance(sub, str) or _OPERATOR_SUB.fullmatch(sub) is None:
        raise IdentityError(Reason.AUTH_REQUIRED)
    return OperatorToken(sub=sub, exp=exp)


def _pydantic(check: Callable[[str], object]) -> AfterValidator:
    """Turn an identity check into a pydantic validator whose error never quotes the value.

    A check returning a string replaces the value with that canonical form.
    """

    def run(value: str) -> str:
        try:
            result = check(value)
        except IdentityError:
            raise ValueError("malformed identifier") from None
        return result if isinstance(result, str) else value

    return AfterValidator(run)


def _jti(value: str) -> None:
    if JTI.fullmatch(value) is None:
        raise IdentityError(Reason.CONTEXT_INVALID)


MxidStr = Annotated[StrictStr, _pydantic(lambda v: str(parse_mxid(v)))]
ServerName = Annotated[StrictStr, _pydantic(normalise_server_name)]
RoomId = Annotated[StrictStr, _pydantic(parse_room_id)]
AgentRef = Annotated[StrictStr, _pydantic(parse_agent_ref)]
Text = Annotated[StrictStr, Field(min_length=1, max_length=255)]
Members = Annotated[list[MxidStr], Field(max_length=1024)]


class _Claims(BaseModel):
    # SECURITY: an unknown claim may be a restriction this gateway would silently ignore, so any
    # claim it does not understand makes the context invalid; upgrade the gateway first.
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScopeKind(enum.StrEnum):
    """Kinds of memory scope; ``cross_room`` is reserved and refused by policy for now."""

    CONTROL_ROOM = "control_room"
    CROSS_ROOM = "cross_room"


class ScopeClaim(_Claims):
    """The scope a delegation runs in."""

    kind: ScopeKind
    room_id: RoomId


class ServerAclClaim(_Claims):
    """The room's ``m.room.server_acl`` content as attested by the bridge."""

    allow: Annotated[list[Text], Field(max_length=256)]
    deny: Annotated[list[Text], Field(max_length=256)]
    allow_ip_literals: StrictBool


class RoomClaim(_Claims):
    """Attested room state (SPEC R-5); members and invitees are canonical MXIDs."""

    room_version: Text
    encrypted: StrictBool
    join_rule: Text
    history_visibility: Text
    members: Members
    invited: Members
    server_acl: ServerAclClaim


class AudienceClaim(_Claims):
    """Who will read the reply: participating homeservers (canonical names) and a classification."""

    servers: Annotated[list[ServerName], Field(max_length=1024)]
    classification: Text


class DelegationContext(_Claims):
    """The bridge's signed statement about one delegation (``X-Memgov-Context``)."""

    sub: MxidStr
    origin: Origin
    agent: AgentRef
    scope: ScopeClaim
    room: RoomClaim
    audience: AudienceClaim
    iat: StrictInt
    exp: StrictInt
    jti: Annotated[StrictStr, _pydantic(_jti)]


_CONTEXT_CLAIMS: Final = tuple(DelegationContext.model_fields)


def verify_context(token: str, verifier: Verifier, *, now: int, max_age_s: int = 120) -> DelegationContext:
    """Verify a delegation context; the caller still refuses a replayed ``jti`` until ``exp``.

    Raises IdentityError(context_expired) when ``exp <= now`` and IdentityError(context_invalid)
    for everything else: signature, algorithm, shape, ``iat`` in the future, or a lifetime
    (``exp - iat``) above ``max_age_s``.
    """
    claims = verifier.decode(token, typ=TokenType.CONTEXT, now=now, required_claims=_CONTEXT_CLAIMS)
    exp, iat = _exp_iat(claims)
    if not 0 < exp - iat <= max_age_s:
        raise IdentityError(Reason.CONTEXT_INVALID)
    try:
        return DelegationContext.model_validate(claims)
    except ValidationError:
        raise IdentityError(Reason.CONTEXT_INVALID) from None
