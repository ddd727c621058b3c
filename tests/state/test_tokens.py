"""Single-use values: delegation-context replay cache and confirmation tokens."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest

from sidecar.state import StateStore
from tests.support.state import NOW, new_scope

TOKEN = hashlib.sha256(b"confirm-token").hexdigest()


class TestReplayCache:
    async def test_a_context_id_is_accepted_once_until_it_expires(self, store: StateStore) -> None:
        """A replayed jti is refused while the context is valid, and may recur after expiry."""
        exp = NOW + timedelta(seconds=120)
        assert await store.single_use.remember_jti("jti-1", exp, NOW) is True
        assert await store.single_use.remember_jti("jti-1", exp, NOW + timedelta(seconds=119)) is False
        assert await store.single_use.remember_jti("jti-2", exp, NOW) is True
        assert await store.single_use.remember_jti("jti-1", exp + timedelta(seconds=120), exp) is True

    async def test_context_ids_are_stored_as_digests(self, store: StateStore) -> None:
        """The cache holds bounded digests, never the raw id."""
        await store.single_use.remember_jti("raw-jti-value", NOW + timedelta(seconds=60), NOW)
        async with store.db.tx("read") as tx:
            (row,) = await tx.fetch("SELECT jti_hash FROM replay")
        assert row[0] == hashlib.sha256(b"raw-jti-value").hexdigest()


class TestConfirmations:
    @pytest.mark.parametrize(
        ("subject", "action", "later", "accepted"),
        [
            ("@alice:example.org", "forget_all", timedelta(0), True),
            ("@mallory:example.org", "forget_all", timedelta(0), False),
            ("@alice:example.org", "off", timedelta(0), False),
            ("@alice:example.org", "forget_all", timedelta(minutes=5), False),
        ],
    )
    async def test_a_token_only_confirms_its_own_subject_action_and_time(
        self, store: StateStore, subject: str, action: str, later: timedelta, accepted: bool
    ) -> None:
        """A confirmation is bound to the scope, subject and action it was issued for, until it expires."""
        scope = await new_scope(store)
        expires = NOW + timedelta(minutes=5)
        await store.single_use.put_confirmation(TOKEN, scope.scope_id, "@alice:example.org", "forget_all", expires)
        assert await store.single_use.take_confirmation(TOKEN, scope.scope_id, subject, action, NOW + later) is accepted

    async def test_a_token_is_single_use(self, store: StateStore) -> None:
        """The second use of a confirmation is refused, and a refused attempt does not burn it."""
        scope = await new_scope(store)
        other = await new_scope(store, "!other:example.org")
        await store.single_use.put_confirmation(
            TOKEN, scope.scope_id, "@alice:example.org", "off", NOW + timedelta(minutes=5)
        )
        assert (
            await store.single_use.take_confirmation(TOKEN, other.scope_id, "@alice:example.org", "off", NOW) is False
        )
        assert await store.single_use.take_confirmation(TOKEN, scope.scope_id, "@alice:example.org", "off", NOW) is True
        assert (
            await store.single_use.take_confirmation(TOKEN, scope.scope_id, "@alice:example.org", "off", NOW) is False
        )

    async def test_only_token_hashes_are_accepted(self, store: StateStore) -> None:
        """A raw token can never be stored by mistake."""
        scope = await new_scope(store)
        with pytest.raises(ValueError):
            await store.single_use.put_confirmation("raw-token", scope.scope_id, "@alice:example.org", "off", NOW)
