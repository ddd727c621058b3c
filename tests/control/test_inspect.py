"""Private inspect (SPEC R-5, R-6): bounded pages, an attested control room per page, content nowhere else."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.control.client import ControlError
from sidecar.dev.devstack import DbFault
from sidecar.dev.devstack.store import NewMemory
from sidecar.dev.devstack.vectors import embed_text
from sidecar.identity.tokens import TokenType, mint_token
from tests.support.harness import ALICE, APP, BOB, BOT, GHOST, SERVER, Harness
from tests.support.sentinel import capture_sinks, make_sentinel


async def _refused(call: Any) -> tuple[int, str]:
    with pytest.raises(ControlError) as err:
        await call
    return err.value.status, err.value.reason


class TestPages:
    @pytest.mark.kagent
    async def test_pages_are_bounded_ordered_and_complete(self, h: Harness) -> None:
        """limit=2 over five entries gives 2, 2, 1 entries in creation order, each with text and hard expiry."""
        scope_id = await h.scope()
        texts = [f"fact number {i}" for i in range(5)]
        ids = [await h.saved(scope_id, t) for t in texts]
        api, pages, cursor = h.client(), [], None
        while True:
            page = await api.inspect(scope_id, h.context(), cursor=cursor, limit=2)
            pages.append(page["entries"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [len(p) for p in pages] == [2, 2, 1]
        entries = [e for p in pages for e in p]
        assert [(e["id"], e["text"]) for e in entries] == list(zip(ids, texts, strict=True))
        ledger = {e.entry_id: e for e in await h.parts.store.ledger.entries_of_scope(scope_id)}
        first = entries[0]
        assert first["source_scope"] == {"kind": "control_room", "room_id": "!ctrl-alice:example.org"}
        assert first["expires_at"] == ledger[first["id"]].expires_at.isoformat().replace("+00:00", "Z")

    @pytest.mark.parametrize("query", [{"limit": "0"}, {"limit": "51"}, {"limit": "two"}, {"cursor": "../etc"}])
    async def test_page_parameters_are_bounded(self, sh: Harness, query: dict[str, str]) -> None:
        """A limit outside 1..50 or a malformed cursor is refused with bad_request."""
        scope_id = await sh.scope()
        api = sh.client()
        call = api.call(
            "GET", f"/v1/scopes/{scope_id}/entries", headers={"X-Memgov-Context": sh.context()}, params=query
        )
        assert await _refused(call) == (400, "bad_request")

    @pytest.mark.kagent
    async def test_only_ledger_live_entries_of_the_current_generation_are_shown(self, h: Harness) -> None:
        """Forgotten entries and rows written around memgov into the namespace never come back."""
        scope_id = await h.scope()
        kept, forgotten = await h.saved(scope_id, "kept fact"), await h.saved(scope_id, "forgotten fact")
        await h.client().forget(scope_id, forgotten)
        live = (await h.parts.store.scopes.get_scope(scope_id)).namespace
        await h.stack.store.insert(
            NewMemory(APP, live.storage_key, "planted around memgov", embed_text("planted"), "{}", None)
        )
        page = await h.client().inspect(scope_id, h.context())
        assert [e["id"] for e in page["entries"]] == [kept]
        assert len(await h.rows(scope_id)) == 3  # REST: the forgotten row waits for its namespace to be cleared

    async def test_expired_entries_are_never_shown(self, sh: Harness) -> None:
        """At the hard expiry an entry disappears from inspect, whatever kagent still holds."""
        scope_id = await sh.scope()
        await sh.saved(scope_id, "short lived")
        sh.advance(7 * 86400)
        assert (await sh.client().inspect(scope_id, sh.context()))["entries"] == []


class TestAttestation:
    @pytest.mark.parametrize(
        ("room_state", "reason"),
        [
            ({"encrypted": True}, "room_state_invalid"),
            ({"room_version": "11"}, "room_state_invalid"),
            ({"join_rule": "public"}, "room_state_invalid"),
            ({"history_visibility": "shared"}, "room_state_invalid"),
            ({"members": [ALICE, BOT, GHOST, BOB]}, "room_state_invalid"),
            ({"members": [ALICE, BOT]}, "room_state_invalid"),
            ({"invited": [BOB]}, "room_state_invalid"),
            ({"server_acl": {"allow": ["*"], "deny": [], "allow_ip_literals": False}}, "room_state_invalid"),
            ({"server_acl": {"allow": [SERVER], "deny": [], "allow_ip_literals": True}}, "room_state_invalid"),
        ],
    )
    async def test_room_drift_suppresses_the_page(self, h: Harness, room_state: dict[str, Any], reason: str) -> None:
        """Any deviation from the single-subject control room answers 403 with a code and no content."""
        scope_id = await h.scope()
        await h.saved(scope_id, "likes green tea")
        assert await _refused(h.client().inspect(scope_id, h.context(**room_state))) == (403, reason)

    @pytest.mark.parametrize(
        "case", ["missing", "garbage", "wrong_key", "expired", "replayed", "other_room", "other_agent", "other_subject"]
    )
    async def test_a_fresh_context_for_exactly_this_scope_is_required(self, sh: Harness, case: str) -> None:
        """Missing, forged, expired, replayed or mismatched contexts refuse the page with their own code."""
        scope_id = await sh.scope()
        await sh.saved(scope_id, "likes green tea")
        good = sh.context()
        now = sh.now()
        contexts = {
            "missing": None,
            "garbage": "x.y.z",
            "wrong_key": mint_token({"sub": ALICE}, b"k" * 64, "HS256", typ=TokenType.CONTEXT),
            "expired": mint_token(
                {
                    "sub": ALICE,
                    "origin": "native",
                    "agent": "team/helper",
                    "scope": {"kind": "control_room", "room_id": "!ctrl-alice:example.org"},
                    "room": {},
                    "audience": {},
                    "iat": now - 100,
                    "exp": now - 1,
                    "jti": "j1",
                },
                sh.keys.bridge,
                "HS256",
                typ=TokenType.CONTEXT,
            ),
            "replayed": good,
            "other_room": sh.context(room="!elsewhere:example.org"),
            "other_agent": sh.context(agent="team/other"),
            "other_subject": sh.context(mxid=BOB),
        }
        expected = {
            "missing": "context_missing",
            "garbage": "context_invalid",
            "wrong_key": "context_invalid",
            "expired": "context_expired",
            "replayed": "context_replayed",
            "other_room": "scope_mismatch",
            "other_agent": "agent_mismatch",
            "other_subject": "scope_mismatch",
        }
        api = sh.client()
        if case == "replayed":
            await api.inspect(scope_id, good)
        headers = {} if contexts[case] is None else {"X-Memgov-Context": contexts[case]}
        status, reason = await _refused(api.call("GET", f"/v1/scopes/{scope_id}/entries", headers=headers))
        assert status == 403 and reason == expected[case]

    @pytest.mark.parametrize("who", ["bob", "operator"])
    async def test_operators_and_other_subjects_get_no_content(self, sh: Harness, who: str) -> None:
        """Even with a perfect context, anyone but the subject gets not_subject."""
        scope_id = await sh.scope()
        await sh.saved(scope_id, "likes green tea")
        token = sh.subject_token(BOB) if who == "bob" else sh.operator_token()
        assert await _refused(sh.client(token).inspect(scope_id, sh.context())) == (403, "not_subject")

    async def test_a_withdrawn_scope_has_nothing_to_inspect(self, sh: Harness) -> None:
        """After withdrawal inspect is refused with consent_disabled."""
        scope_id = await sh.scope()
        await sh.client().withdraw(scope_id)
        assert await _refused(sh.client().inspect(scope_id, sh.context())) == (403, "consent_disabled")


class TestBoundary:
    async def test_inspected_text_reaches_no_log_metric_audit_or_error(self, h: Harness) -> None:
        """Sentinels in stored text and in kagent's error text appear only in the successful page itself."""
        stored, upstream = make_sentinel("inspect"), make_sentinel("kagent")
        with capture_sinks() as sinks:
            scope_id = await h.scope()
            await h.saved(scope_id, f"my secret is {stored}")
            page = await h.client().inspect(scope_id, h.context())
            assert stored in page["entries"][0]["text"]
            url = f"{h.gw.control_url}/v1/scopes/{scope_id}/entries"
            attempts = [(h.subject_token(), h.context(encrypted=True)), (h.subject_token(BOB), h.context())]
            statuses = []
            for token, context in [*attempts, (h.subject_token(), h.context())]:
                if len(statuses) == len(attempts):
                    h.stack.store.fault = DbFault(message=f"boom {upstream} {stored}", ops=frozenset({"list"}))
                async with h.http.get(
                    url, headers={"Authorization": f"Bearer {token}", "X-Memgov-Context": context}
                ) as resp:
                    sinks.record(resp.status, resp.headers.items(), await resp.read())
                    statuses.append(resp.status)
            h.stack.store.fault = None
            sinks.extra.append(await h.audit_text())
        assert statuses == [403, 403, 502]
        sinks.assert_clean(stored, upstream)
