"""Session keys (HMAC fencing tokens), rotation, and storage keys."""

from __future__ import annotations

import base64
import hashlib
import hmac
import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sidecar.identity import IdentityError
from sidecar.identity.keys import (
    SessionKeys,
    is_session_key_shaped,
    new_salt,
    new_scope_id,
    parse_storage_key,
    storage_key,
)
from sidecar.reasons import Reason
from tests.identity.strategies import PROPERTY, SENTINEL, generations, scope_ids

OLD, NEW, OTHER = b"old-secret-0123456789abcdef", b"new-secret-abcdefghijklmnop", b"unrelated-secret-qrstuvwxyz"
SCOPE = "s0123456789abcdef01234567"

# A MAC built for a non-canonical generation spelling, following the documented construction, so
# the test shows the format check (not the MAC) is what refuses it.
_SUBKEY = hmac.new(NEW, b"memgov session key v1", hashlib.sha256).digest()


def _documented_mac(subkey: bytes, scope_id: str, generation: str) -> str:
    digest = hmac.new(subkey, f"mg1.{scope_id}.{generation}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _refused(keys: SessionKeys, key: str) -> Reason:
    with pytest.raises(IdentityError) as exc:
        keys.verify(key)
    return exc.value.reason


class TestSessionKeys:
    @PROPERTY
    @given(scope_ids, generations)
    def test_round_trip(self, scope_id: str, generation: int) -> None:
        """A minted key verifies to its own scope and generation."""
        keys = SessionKeys(NEW)
        assert keys.verify(keys.session_key(scope_id, generation)) == (scope_id, generation)

    @PROPERTY
    @given(scope_ids, generations, st.data())
    def test_any_single_character_change_is_refused(self, scope_id: str, generation: int, data: st.DataObject) -> None:
        """Changing any one character of a genuine key makes it key_invalid."""
        keys = SessionKeys(NEW)
        key = keys.session_key(scope_id, generation)
        i = data.draw(st.integers(min_value=0, max_value=len(key) - 1))
        c = data.draw(st.sampled_from(string.printable) | st.characters())
        assume(c != key[i])
        assert _refused(keys, key[:i] + c + key[i + 1 :]) is Reason.KEY_INVALID

    @PROPERTY
    @given(scope_ids, generations)
    def test_mac_follows_the_documented_construction(self, scope_id: str, generation: int) -> None:
        """The MAC is base64url(HMAC-SHA256(HMAC-SHA256(secret, purpose), "mg1.<scope>.<gen>"))."""
        mac = _documented_mac(_SUBKEY, scope_id, str(generation))
        assert SessionKeys(NEW).session_key(scope_id, generation) == f"mg1.{scope_id}.{generation}.{mac}"

    def test_key_from_previous_secret_verifies_during_rotation(self) -> None:
        """After rotation, keys minted with the previous secret still verify; new keys use the new one."""
        old_key = SessionKeys(OLD).session_key(SCOPE, 7)
        rotated = SessionKeys(NEW, previous=OLD)
        assert rotated.verify(old_key) == (SCOPE, 7)
        assert rotated.session_key(SCOPE, 7) == SessionKeys(NEW).session_key(SCOPE, 7)

    @pytest.mark.parametrize(
        ("minted_with", "verifier"),
        [
            (OTHER, SessionKeys(NEW, previous=OLD)),
            (OLD, SessionKeys(NEW)),
            (NEW, SessionKeys(OLD)),
        ],
    )
    def test_key_from_an_unknown_secret_is_refused(self, minted_with: bytes, verifier: SessionKeys) -> None:
        """Keys from a secret that is neither current nor previous are key_invalid."""
        assert _refused(verifier, SessionKeys(minted_with).session_key(SCOPE, 3)) is Reason.KEY_INVALID

    @pytest.mark.parametrize(
        "generation",
        ["03", "+3", "-3", " 3", "3 ", "3.0", "0x3", "٣", str(2**53 + 1), "1" * 17],
    )
    def test_non_canonical_generation_is_refused_even_with_a_valid_mac(self, generation: str) -> None:
        """A generation must be canonical decimal within 2**53, whatever the MAC says."""
        key = f"mg1.{SCOPE}.{generation}.{_documented_mac(_SUBKEY, SCOPE, generation)}"
        assert _refused(SessionKeys(NEW), key) is Reason.KEY_INVALID

    @pytest.mark.parametrize(
        "key",
        [
            "",
            "mg1",
            f"mg1.{SCOPE}.3",
            f"mg2.{SCOPE}.3.AAAA",
            f"mg1.{SCOPE.upper()}.3." + "A" * 43,
            f"mg1.{SCOPE}.3." + "A" * 44,
            f"mg1.{SCOPE}.3." + "A" * 42 + "=",
            f"mg1.{SCOPE}.3." + "A" * 43 + ".x",
            f"mgs1.{SCOPE}.3",
            "@alice:example.org",
            "x" * 10_000,
        ],
    )
    def test_malformed_keys_are_refused(self, key: str) -> None:
        """Anything not shaped exactly like a session key is key_invalid."""
        assert _refused(SessionKeys(NEW), key) is Reason.KEY_INVALID
        assert not is_session_key_shaped(key)

    def test_shape_check_does_not_verify_the_mac(self) -> None:
        """A forged key is session-key shaped yet fails verification."""
        forged = f"mg1.{SCOPE}.3." + "A" * 43
        assert is_session_key_shaped(forged)
        assert is_session_key_shaped(SessionKeys(NEW).session_key(SCOPE, 3))
        assert _refused(SessionKeys(NEW), forged) is Reason.KEY_INVALID

    @pytest.mark.parametrize(
        ("scope_id", "generation"),
        [("s123", 1), (SCOPE.upper(), 1), (SCOPE, -1), (SCOPE, 2**53 + 1), (SCOPE, True)],
    )
    def test_minting_refuses_bad_parts(self, scope_id: str, generation: int) -> None:
        """Minting a key or a storage key for an impossible scope or generation is a programming error."""
        with pytest.raises(ValueError):
            SessionKeys(NEW).session_key(scope_id, generation)
        with pytest.raises(ValueError):
            storage_key(scope_id, generation, "")

    @pytest.mark.parametrize("secret", [b"", b"short-secret", "text-secret-not-bytes-0123456789"])
    def test_weak_secrets_are_refused_without_echoing_them(self, secret: bytes) -> None:
        """An empty, short or non-bytes secret is refused with a message that does not quote it."""
        with pytest.raises(ValueError) as exc:
            SessionKeys(secret)
        assert str(exc.value) == "session key secret must be at least 16 bytes"

    def test_error_never_contains_the_key(self) -> None:
        """The error raised for a bad key carries only the reason code."""
        with pytest.raises(IdentityError) as exc:
            SessionKeys(NEW).verify(f"mg1.{SCOPE}.{SENTINEL}.x")
        assert str(exc.value) == "key_invalid" and SENTINEL not in repr(exc.value)


class TestStorageKeys:
    @PROPERTY
    @given(scope_ids, generations)
    def test_round_trip(self, scope_id: str, generation: int) -> None:
        """A salted storage key parses back to its scope, generation and salt; so does a legacy one."""
        salt = new_salt()
        assert storage_key(scope_id, generation, salt) == f"mgs1.{scope_id}.{generation}.{salt}"
        assert parse_storage_key(storage_key(scope_id, generation, salt)) == (scope_id, generation, salt)
        assert parse_storage_key(storage_key(scope_id, generation, "")) == (scope_id, generation, "")

    def test_salted_key_is_not_derivable_from_the_session_key(self) -> None:
        """Two namespaces of the same scope and generation get different, unrelated keys."""
        a, b = storage_key(SCOPE, 3, new_salt()), storage_key(SCOPE, 3, new_salt())
        assert a != b and SessionKeys(NEW).session_key(SCOPE, 3).split(".")[3] not in a + b

    @pytest.mark.parametrize("salt", ["x" * 32, "A" * 32, "0" * 31, "0" * 33, "0" * 16])
    def test_malformed_salts_are_refused(self, salt: str) -> None:
        """Only 32 lower-case hex digits (or the legacy empty salt) make a storage key."""
        with pytest.raises(ValueError):
            storage_key(SCOPE, 1, salt)

    @pytest.mark.parametrize(
        "value",
        [
            f"mgs1.{SCOPE}.03",
            f"mgs1.{SCOPE}.-1",
            f"mgs1.{SCOPE}",
            f"mgs1.{SCOPE}.1.",
            f"mg1.{SCOPE}.1",
            f"mgs1.{SCOPE}.{2**53 + 1}",
            f"mgs1.{SCOPE}.1\n",
            "@alice:example.org",
            "",
            f"mgs1.{SCOPE}.1.{'A' * 32}",
            f"mgs1.{SCOPE}.1.{'0' * 31}",
        ],
    )
    def test_other_strings_are_not_storage_keys(self, value: str) -> None:
        """Anything but a canonical storage key parses to None."""
        assert parse_storage_key(value) is None

    def test_new_scope_ids_are_valid_and_distinct(self) -> None:
        """Fresh scope ids fit the key formats and do not repeat."""
        ids = {new_scope_id() for _ in range(100)}
        assert len(ids) == 100
        assert all(parse_storage_key(storage_key(i, 0, "")) == (i, 0, "") for i in ids)


#: Each replica's session-key files (current, previous, next) at each step of a rotation from OLD to NEW.
_STEPS = {
    "before": (OLD, None, None),
    "accept-next": (OLD, None, NEW),
    "mint-next": (NEW, OLD, None),
    "retire-previous": (NEW, None, None),
}
_ORDER = list(_STEPS)


class TestRotationAcrossReplicas:
    @pytest.mark.parametrize(
        ("ahead", "behind"),
        [(_ORDER[i + 1], _ORDER[i]) for i in range(len(_ORDER) - 1)] + [(step, step) for step in _ORDER],
        ids=lambda step: step,
    )
    def test_no_replica_refuses_a_key_another_minted(self, ahead: str, behind: str) -> None:
        """Replicas one rotation step apart (a Secret updated in place reaches them at different times)
        accept each other's keys: accept the next secret, then mint with it, then retire the old one."""
        first, second = SessionKeys(*_STEPS[ahead]), SessionKeys(*_STEPS[behind])
        for minter, verifier in ((first, second), (second, first), (first, first), (second, second)):
            assert verifier.verify(minter.session_key(SCOPE, 3)) == (SCOPE, 3)

    def test_skipping_the_accept_step_cuts_conversations(self) -> None:
        """The one-step swap this replaces: a replica still on the old secret refuses a key minted with the new one."""
        assert _refused(SessionKeys(OLD), SessionKeys(NEW, previous=OLD).session_key(SCOPE, 3)) is Reason.KEY_INVALID

    def test_a_retired_secret_verifies_nothing_and_each_slot_is_reported(self) -> None:
        """After the last step an old key is refused; every verification names its slot, never a secret."""
        seen: list[str] = []
        keys = SessionKeys(*_STEPS["mint-next"])
        keys.on_verified = seen.append
        keys.verify(SessionKeys(OLD).session_key(SCOPE, 1))
        keys.verify(SessionKeys(NEW).session_key(SCOPE, 1))
        keys.replace(*_STEPS["accept-next"])
        keys.verify(SessionKeys(NEW).session_key(SCOPE, 1))
        assert seen == ["previous", "current", "next"]
        keys.replace(*_STEPS["retire-previous"])
        assert keys.slots == ("current",)
        assert _refused(keys, SessionKeys(OLD).session_key(SCOPE, 1)) is Reason.KEY_INVALID
