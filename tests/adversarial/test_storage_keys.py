"""Family 6: nothing useful for anyone who reaches kagent around memgov (SPEC D2).

The attack: every agent pod sees session keys (``mg1.<scope>.<gen>.<mac>``). The storage key used
to be that key without its MAC, so anyone reaching kagent directly (a mis-set NetworkPolicy,
kagent's UI proxying /api/) could list or delete the scope's rows, and older generations were
one decrement away.
"""

from __future__ import annotations

from urllib.parse import urlencode

from tests.support.adversarial import Target
from tests.support.harness import APP


class TestStorageKeys:
    async def test_keys_derived_from_a_session_key_name_nothing(self, target: Target) -> None:
        """Listing kagent directly with what a session key reveals (this or older generations) finds
        nothing, though the scope holds entries; the real key is not derivable from it."""
        t = target
        await t.consented_scope()
        key = await t.session_key()
        status, _body, _ = await t.save(key, "likes green tea")
        assert status == 201
        _, scope_id, generation, _mac = key.split(".")
        (row,) = await t.rows()
        for gen in range(int(generation) + 1):
            derived = f"mgs1.{scope_id}.{gen}"
            status, listed = await t.kagent_get("/api/memories?" + urlencode({"agent_name": APP, "user_id": derived}))
            assert (status, listed) == (200, [])
        assert row.user_id.startswith(f"mgs1.{scope_id}.{generation}.") and _mac not in row.user_id

    async def test_the_storage_key_survives_a_session_secret_rotation(self, target: Target) -> None:
        """After the session secret rotates (old one still accepted), memory keeps landing in the same
        namespace: the salt lives in the state store, not in the secret."""
        t = target
        await t.consented_scope()
        key = await t.session_key()
        await t.save(key, "likes green tea")
        (first,) = await t.rows()
        old = t.keys.session_file.read_bytes()
        previous = t.keys.folder / "previous.key"
        previous.write_bytes(old)
        t.keys.session_file.write_bytes(b"f" * 16 + old[16:])
        await t.gw.stop()
        t.gw.settings["secrets"]["previous_session_key_file"] = str(previous)
        await t.gw.start()
        fresh = await t.session_key()
        assert fresh != key
        status, _, _ = await t.save(fresh, "lives in Lisbon")
        assert status == 201
        assert {r.user_id for r in await t.rows()} == {first.user_id}
