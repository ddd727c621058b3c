"""Session keys (the fencing token of SPEC D1) and storage keys (the namespace of SPEC D2).

``mg1.<scope_id>.<generation>.<mac>`` is what kagent sees as ``user_id`` during a governed
conversation; the MAC makes it unforgeable, and because it carries the consent generation every
memory call can be fenced. ``mgs1.<scope_id>.<generation>.<salt>`` is what kagent stores under:
the salt is random and kept only in the state store (SPEC D2), so a storage key can neither be
derived from a session key nor guessed by anyone who reaches kagent around memgov. Keys written
before salts existed (``mgs1.<scope_id>.<generation>``) are still recognised.

The MAC key is not the file secret itself but a sub-key derived from it for this one purpose
(HMAC-SHA256(secret, "memgov session key v1")), so adding another use of the same secret later
cannot produce values that collide with session keys. Keys are minted with the ``current`` secret
and verified against every accepted slot: ``current``, ``previous`` and ``next``. A rotation is three
steps, each an in-place update of the secret files that every replica re-reads (``root.py``): add the
new secret as ``next`` (every replica accepts it, none mints with it), then make it ``current`` and
the old one ``previous`` (replicas that switched mint with it, the others' keys still verify), then
remove ``previous``. No replica ever refuses a key another one minted.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from typing import Final

from sidecar.identity import IdentityError
from sidecar.reasons import Reason

MAX_GENERATION: Final = 2**53
MIN_SECRET_BYTES: Final = 16
SCOPE_ID = re.compile(r"s[0-9a-f]{24}", re.ASCII)

_PURPOSE: Final = b"memgov session key v1"
_GENERATION = r"(0|[1-9][0-9]{0,15})"
_SESSION_KEY = re.compile(r"mg1\.(s[0-9a-f]{24})\." + _GENERATION + r"\.([A-Za-z0-9_\-]{43})", re.ASCII)
_STORAGE_KEY = re.compile(r"mgs1\.(s[0-9a-f]{24})\." + _GENERATION + r"(?:\.([0-9a-f]{32}))?", re.ASCII)
SALT = re.compile(r"[0-9a-f]{32}", re.ASCII)
# mg1. + scope id + . + 16 digits + . + 43 MAC characters; nothing longer is ever looked at.
MAX_SESSION_KEY_LEN: Final = 4 + 25 + 1 + 16 + 1 + 43


def new_scope_id() -> str:
    """Return a fresh random scope id (``s`` + 24 hex digits)."""
    return "s" + secrets.token_hex(12)


def _check_parts(scope_id: str, generation: int) -> None:
    if not isinstance(scope_id, str) or SCOPE_ID.fullmatch(scope_id) is None:
        raise ValueError("scope_id must match s[0-9a-f]{24}")
    if isinstance(generation, bool) or not isinstance(generation, int) or not 0 <= generation <= MAX_GENERATION:
        raise ValueError("generation must be an integer in [0, 2**53]")


def _derive(secret: bytes) -> bytes:
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"session key secret must be at least {MIN_SECRET_BYTES} bytes")
    return hmac.new(secret, _PURPOSE, hashlib.sha256).digest()


def _match(pattern: re.Pattern[str], value: object) -> re.Match[str] | None:
    """Match a whole key of bounded length whose generation is within range."""
    if not isinstance(value, str) or len(value) > MAX_SESSION_KEY_LEN:
        return None
    m = pattern.fullmatch(value)
    return m if m is not None and int(m.group(2)) <= MAX_GENERATION else None


def _mac(subkey: bytes, scope_id: str, generation: int) -> str:
    digest = hmac.new(subkey, f"mg1.{scope_id}.{generation}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


#: The session-key slots, in the order they are tried: ``current`` mints, all three verify.
SESSION_SLOTS: Final = ("current", "previous", "next")


class SessionKeys:
    """Mints session keys with the current secret and verifies them against every accepted slot.

    ``replace`` swaps the secrets in place (a re-read secret file): every holder sees the new ones at
    once. ``on_verified`` is told the slot of each key that verified (bounded: the slot names).
    """

    __slots__ = ("_accepted", "_current", "on_verified")

    def __init__(self, current: bytes, previous: bytes | None = None, next_key: bytes | None = None) -> None:
        self.on_verified: Callable[[str], None] | None = None
        self._current = b""
        self._accepted: tuple[tuple[str, bytes], ...] = ()
        self.replace(current, previous, next_key)

    def replace(self, current: bytes, previous: bytes | None = None, next_key: bytes | None = None) -> None:
        """Use these secrets from now on (all derived first: a bad one changes nothing)."""
        given = {"current": current, "previous": previous, "next": next_key}
        derived = tuple((slot, _derive(secret)) for slot, secret in given.items() if secret is not None)
        self._current, self._accepted = derived[0][1], derived

    @property
    def slots(self) -> tuple[str, ...]:
        """The slots holding a secret now."""
        return tuple(slot for slot, _ in self._accepted)

    def session_key(self, scope_id: str, generation: int) -> str:
        """Return ``mg1.<scope_id>.<generation>.<mac>`` made with the current secret."""
        _check_parts(scope_id, generation)
        return f"mg1.{scope_id}.{generation}.{_mac(self._current, scope_id, generation)}"

    def verify(self, key: str) -> tuple[str, int]:
        """Return (scope_id, generation) of a genuine key; raise IdentityError(key_invalid)."""
        m = _match(_SESSION_KEY, key)
        if m is None:
            raise IdentityError(Reason.KEY_INVALID)
        scope_id, generation, presented = m.group(1), int(m.group(2)), m.group(3)
        # SECURITY: compare the encoded MAC strings, not decoded bytes: the last base64 character
        # carries two spare bits, and decoding would let four spellings of one MAC verify.
        # Every accepted secret is tried so timing does not reveal which one matched.
        accepted = self._accepted
        matches = [hmac.compare_digest(presented, _mac(k, scope_id, generation)) for _, k in accepted]
        if not any(matches):
            raise IdentityError(Reason.KEY_INVALID)
        if self.on_verified is not None:
            self.on_verified(accepted[matches.index(True)][0])
        return scope_id, generation


def new_salt() -> str:
    """Return a fresh namespace salt (128 random bits, hex)."""
    return secrets.token_hex(16)


def storage_key(scope_id: str, generation: int, salt: str) -> str:
    """Return the kagent ``user_id`` of one namespace; an empty salt gives the legacy unsalted form."""
    _check_parts(scope_id, generation)
    if salt == "":
        return f"mgs1.{scope_id}.{generation}"
    if not isinstance(salt, str) or SALT.fullmatch(salt) is None:
        raise ValueError("salt must be 32 lower-case hex digits or empty")
    return f"mgs1.{scope_id}.{generation}.{salt}"


def parse_storage_key(value: str) -> tuple[str, int, str] | None:
    """Return (scope_id, generation, salt) of a well-formed storage key (salt "" if legacy), else None."""
    m = _match(_STORAGE_KEY, value)
    return None if m is None else (m.group(1), int(m.group(2)), m.group(3) or "")


def is_session_key_shaped(value: str) -> bool:
    """Return whether a value looks like a session key (format only, the MAC is not checked)."""
    return _match(_SESSION_KEY, value) is not None
