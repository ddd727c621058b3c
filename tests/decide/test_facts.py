"""Pure request facts: body shapes, byte counts, key carriers and agent-name checks."""

from __future__ import annotations

import pytest

from sidecar.decide.facts import KeyFacts, principal_of, utf8_len
from sidecar.enforce.invoke import _is_new_conversation, _without_query_user
from sidecar.identity.appname import AgentNames
from sidecar.identity.keys import SessionKeys

KEYS = SessionKeys(b"k" * 32)
SCOPE = "s" + "ab" * 12
KEY = KEYS.session_key(SCOPE, 3)
REFS = AgentNames({"kagent/k8s-agent", "team/other"})


class TestParsing:
    @pytest.mark.parametrize(("text", "n"), [("a" * 512, 512), ("é" * 256, 512), ("é" * 257, 514), ("😀", 4)])
    def test_utf8_bytes(self, text, n):
        """Fact sizes are UTF-8 bytes, not characters."""
        assert utf8_len(text) == n

    @pytest.mark.parametrize(("mxid", "ok"), [("@alice:example.org", True), ("alice", False), ("@alice", False)])
    def test_principal_of(self, mxid, ok):
        """A malformed MXID yields no principal (the policy then refuses principal_invalid)."""
        assert (principal_of(mxid, "native") is not None) is ok


class TestKeyFacts:
    def test_genuine_key_with_matching_carriers(self):
        """A genuine key in body and header, with the scope agent's app_name, is fully trusted."""
        kf = KeyFacts(KEYS, KEY, KEY, "kagent__NS__k8s_agent", "kagent__NS__k8s_agent")
        assert (kf.key_valid, kf.scope_id, kf.generation, kf.user_id_matches) == (True, SCOPE, 3, True)
        assert kf.agent_matches("kagent/k8s-agent", REFS)

    @pytest.mark.parametrize(
        ("user_id", "header", "valid", "matches"),
        [
            (KEY, "@alice:example.org", True, False),  # header names someone else
            ("@alice:example.org", None, False, True),  # raw MXID instead of a key
            (KEY[:-1] + ("A" if KEY[-1] != "A" else "B"), None, False, True),  # forged MAC
            (KEY, None, True, True),  # header absent is fine
            (None, KEY, False, False),
        ],
    )
    def test_key_and_carriers(self, user_id, header, valid, matches):
        """Forged keys fail; a header that disagrees with the body breaks the carrier match."""
        kf = KeyFacts(KEYS, user_id, header, "kagent__NS__k8s_agent", None)
        assert (kf.key_valid, kf.user_id_matches) == (valid, matches)

    @pytest.mark.parametrize(
        ("body_agent", "header_agent", "ok"),
        [
            ("kagent__NS__k8s_agent", None, True),
            ("kagent__NS__k8s-agent", None, True),  # the UI spelling of the same agent
            ("team__NS__other", None, False),
            ("kagent__NS__k8s_agent", "team__NS__other", False),
            (None, None, False),
        ],
    )
    def test_agent_names(self, body_agent, header_agent, ok):
        """Body and header agent names must both name the scope's agent."""
        kf = KeyFacts(KEYS, KEY, None, body_agent, header_agent)
        assert kf.agent_matches("kagent/k8s-agent", REFS) is ok

    def test_hyphen_underscore_collision_is_refused(self):
        """Two configured agents sharing one kagent namespace can use neither key."""
        refs = AgentNames({"team/my-agent", "team/my_agent", "team/third"})
        kf = KeyFacts(KEYS, KEY, None, "team__NS__my_agent", None)
        assert not kf.agent_matches("team/my-agent", refs)
        assert not kf.agent_matches("team/my_agent", refs)
        assert KeyFacts(KEYS, KEY, None, "team__NS__third", None).agent_matches("team/third", refs)

    def test_a_scope_agent_no_longer_configured_is_checked_against_the_configured_ones(self):
        """A scope whose agent left the configuration still gets the full check, collisions included."""
        kf = KeyFacts(KEYS, KEY, None, "team__NS__gone_agent", None)
        assert kf.agent_matches("team/gone-agent", AgentNames({"team/other"}))
        assert not kf.agent_matches("team/gone-agent", AgentNames({"team/gone_agent"}))
        assert not kf.agent_matches("not a ref", AgentNames({"team/other"}))


class TestInvokeHelpers:
    @pytest.mark.parametrize(
        ("body", "new"),
        [
            ({"params": {"message": {"parts": []}}}, True),
            ({"params": {"message": {"contextId": "c1"}}}, False),
            ({"params": "not an object"}, True),
        ],
    )
    def test_new_conversation(self, body, new):
        """A message without contextId opens a conversation (and its prefetch window)."""
        assert _is_new_conversation(body) is new

    def test_query_user_is_dropped(self):
        """A user_id query parameter (kagent reads it first, and logs it) is removed; X-User-Id carries the user."""
        assert _without_query_user("/api/a2a/kagent/a?user_id=%40alice%3Ax&x=1&user_id=b") == "/api/a2a/kagent/a?x=1"
        assert _without_query_user("/api/a2a/kagent/a?user_id=x") == "/api/a2a/kagent/a"
        assert _without_query_user("/api/a2a/kagent/a") == "/api/a2a/kagent/a"
