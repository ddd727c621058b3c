"""kagent agent names: references, app_name normalisation and collision refusal."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.identity import IdentityError
from sidecar.identity.appname import AgentNames, agent_name_matches, app_name, parse_agent_ref
from sidecar.reasons import Reason
from tests.identity.strategies import PROPERTY

namespaces = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
hyphen_names = st.from_regex(r"[a-z0-9]{1,5}(-[a-z0-9]{1,5}){1,3}", fullmatch=True)
CONFIGURED = ("kagent/k8s-agent", "kagent/helm-agent", "team-a/notes")


class TestAppName:
    @pytest.mark.parametrize(
        ("namespace", "name", "expected"),
        [
            ("kagent", "k8s-agent", "kagent__NS__k8s_agent"),
            ("team-a", "notes", "team_a__NS__notes"),  # both runtimes normalise the namespace too
            ("default", "my_agent", "default__NS__my_agent"),
            ("a", "b.c", "a__NS__b.c"),
        ],
    )
    def test_matches_the_kagent_runtimes(self, namespace: str, name: str, expected: str) -> None:
        """app_name is <ns>__NS__<name> with every hyphen turned into an underscore."""
        assert app_name(namespace, name) == expected

    @pytest.mark.parametrize("ref", ["kagent/k8s-agent", "team-a/my_agent", "a/b", "x/a.b-c"])
    def test_valid_refs_split(self, ref: str) -> None:
        """A namespace/name reference splits into its two parts."""
        assert "/".join(parse_agent_ref(ref)) == ref

    @pytest.mark.parametrize(
        "ref",
        [
            "kagent",
            "/agent",
            "kagent/",
            "kagent/a/b",
            "Kagent/agent",
            "kagent/Agent",
            "team_a/agent",
            "-ns/agent",
            "ns/-agent",
            "ns/agent-",
            "ns/a b",
            "ns/аgent",
            "x" * 64 + "/agent",
            "ns/" + "a" * 254,
            None,
        ],
    )
    def test_malformed_refs_are_refused(self, ref: str) -> None:
        """A reference that is not namespace/name in Kubernetes spelling is bad_request."""
        with pytest.raises(IdentityError) as exc:
            parse_agent_ref(ref)
        assert exc.value.reason is Reason.BAD_REQUEST


def matches(presented: str, ref: str, refs: Iterable[str]) -> bool:
    """agent_name_matches, checked to agree with the precomputed AgentNames of the same agents."""
    answer = agent_name_matches(presented, ref, refs)
    assert AgentNames(refs).matches(presented, ref) is answer
    return answer


class TestAgentNameMatches:
    @pytest.mark.parametrize(
        ("presented", "ref", "ok"),
        [
            ("kagent__NS__k8s_agent", "kagent/k8s-agent", True),  # what the runtimes send
            ("kagent__NS__k8s-agent", "kagent/k8s-agent", True),  # what the UI sends for list/delete
            ("team_a__NS__notes", "team-a/notes", True),
            ("team-a__NS__notes", "team-a/notes", True),
            ("kagent__NS__helm_agent", "kagent/k8s-agent", False),
            ("kagent__NS__K8s_agent", "kagent/k8s-agent", False),
            ("kagent__NS__k8s_agent ", "kagent/k8s-agent", False),
            ("kagent/k8s-agent", "kagent/k8s-agent", False),
            ("", "kagent/k8s-agent", False),
            ("kagent__NS__k8s_agent", "not a ref", False),
        ],
    )
    def test_presented_name_must_name_the_agent(self, presented: str, ref: str, ok: bool) -> None:
        """Only the kagent or UI spelling of the scope's own agent matches."""
        assert matches(presented, ref, CONFIGURED) is ok

    @pytest.mark.parametrize(
        ("ref", "other"),
        [("team/my-agent", "team/my_agent"), ("team/my_agent", "team/my-agent"), ("a/x-y_z", "a/x_y-z")],
    )
    @pytest.mark.parametrize("spelling", ["normalised", "raw"])
    def test_colliding_agents_never_match(self, ref: str, other: str, spelling: str) -> None:
        """Two configured agents sharing one app_name are both refused, in every spelling."""
        namespace, name = parse_agent_ref(ref)
        presented = app_name(namespace, name) if spelling == "normalised" else f"{namespace}__NS__{name}"
        assert matches(presented, ref, [ref]) is True
        assert matches(presented, ref, [ref, other]) is False

    @PROPERTY
    @given(namespaces, hyphen_names)
    def test_a_hyphen_underscore_twin_disables_both(self, namespace: str, name: str) -> None:
        """For any hyphenated agent, configuring its underscore twin makes neither match."""
        hyphens, underscores = f"{namespace}/{name}", f"{namespace}/{name.replace('-', '_')}"
        normalised = app_name(namespace, name)
        refs = [hyphens, underscores]
        assert matches(normalised, hyphens, [hyphens]) is True
        assert matches(normalised, underscores, [underscores]) is True
        assert matches(normalised, hyphens, refs) is False
        assert matches(normalised, underscores, refs) is False
