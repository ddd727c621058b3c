"""kagent agent names: ``ns/name`` references and the ``app_name`` kagent stores memory under.

Both kagent runtimes (Python ``KAgentConfig.app_name``, Go ``deriveAppName``) build
``<namespace>__NS__<name>`` with every ``-`` in the namespace *and* the name replaced by ``_``;
the UI sends the same string without the replacement, for list and delete only. Two agents whose
references differ only in ``-`` versus ``_`` therefore share one kagent memory namespace. Such a
pair is ambiguous, so neither member of it is ever matched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from sidecar.identity import IdentityError
from sidecar.reasons import Reason

SEPARATOR = "__NS__"
# Namespaces are Kubernetes DNS labels. Names follow Kubernetes object names but also allow
# "_", because a configured reference may use kagent's normalised spelling; collisions between
# the two spellings are handled by agent_name_matches.
_NAMESPACE = re.compile(r"[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?", re.ASCII)
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9._\-]{0,251}[a-z0-9])?", re.ASCII)


def parse_agent_ref(ref: str) -> tuple[str, str]:
    """Split ``ns/name`` into (namespace, name); raise IdentityError(bad_request) if malformed."""
    if not isinstance(ref, str):
        raise IdentityError(Reason.BAD_REQUEST)
    namespace, sep, name = ref.partition("/")
    if not sep or _NAMESPACE.fullmatch(namespace) is None or _NAME.fullmatch(name) is None:
        raise IdentityError(Reason.BAD_REQUEST)
    return namespace, name


def app_name(namespace: str, name: str) -> str:
    """Return kagent's ``app_name``: ``<ns>__NS__<name>`` with every ``-`` turned into ``_``."""
    return f"{namespace}{SEPARATOR}{name}".replace("-", "_")


def _raw_app_name(ref: str) -> str:
    namespace, _, name = ref.partition("/")
    return app_name(namespace, name)


def query_spelling(ref: str) -> str:
    """The ``agent_name`` whose kagent List and Delete reach every spelling memgov ever stored.

    memgov now stores only the canonical ``app_name``, but earlier versions forwarded the raw
    ``ns__NS__name`` spelling (hyphens kept) too. kagent v0.9.11's List and Delete match the stored
    column against their parameter *and* its ``-``→``_`` form, so the raw spelling reaches both.
    """
    namespace, name = parse_agent_ref(ref)
    return f"{namespace}{SEPARATOR}{name}"


def accepted_names(agent_ref: str, all_refs: Iterable[str]) -> frozenset[str]:
    """The names a call may give ``agent_ref`` by: its ``app_name`` and the UI's spelling.

    Empty when the reference is malformed, or when another configured reference
    normalises to the same ``app_name``: the shared kagent namespace would let either agent read
    or erase the other's memory. The UI spelling needs no separate check, since it can only equal
    another agent's ``app_name`` when the two ``app_name`` values already collide.
    """
    try:
        namespace, name = parse_agent_ref(agent_ref)
    except IdentityError:
        return frozenset()
    expected = app_name(namespace, name)
    # SECURITY: an ambiguous pair is refused for both members, whichever one is asked about.
    if any(ref != agent_ref and _raw_app_name(ref) == expected for ref in all_refs):
        return frozenset()
    return frozenset((expected, f"{namespace}{SEPARATOR}{name}"))


def agent_name_matches(presented: str, agent_ref: str, all_refs: Iterable[str]) -> bool:
    """Return whether ``presented`` names ``agent_ref`` in kagent's or the UI's spelling (collisions refused)."""
    return isinstance(presented, str) and presented in accepted_names(agent_ref, all_refs)


class AgentNames:
    """``accepted_names`` of every configured agent, worked out once per configuration.

    A governed call compares the names it presents against its scope's agent; with the names
    computed here, that costs a lookup instead of a pass over every configured agent. A scope
    whose agent is no longer configured is checked in full, against the configured set.
    """

    __slots__ = ("_names", "refs")

    def __init__(self, refs: Iterable[str]) -> None:
        self.refs = frozenset(refs)
        by_app: dict[str, list[str]] = {}
        for ref in self.refs:
            by_app.setdefault(_raw_app_name(ref), []).append(ref)
        self._names = {ref: accepted_names(ref, by_app.get(_raw_app_name(ref), ())) for ref in self.refs}

    def matches(self, presented: object, agent_ref: str) -> bool:
        """Whether ``presented`` names ``agent_ref`` (``agent_name_matches`` over the configured agents)."""
        names = self._names.get(agent_ref)
        if names is None:
            names = accepted_names(agent_ref, self.refs)
        return isinstance(presented, str) and presented in names


class Agents:
    """The memory-enabled agents of this deployment: names, memory-free variants and Matrix ghosts.

    Built once from the configuration (``agents`` in settings); everything that asks whether an
    agent has memory, which ``app_name`` it is forwarded with or where its refusals go asks this.
    """

    __slots__ = ("_ghosts", "_variants", "names")

    def __init__(self, variants: Mapping[str, str], ghosts: Mapping[str, str]) -> None:
        self._variants = dict(variants)
        self._ghosts = dict(ghosts)
        self.names = AgentNames(self._variants)

    @property
    def refs(self) -> frozenset[str]:
        return self.names.refs

    def has_memory(self, ref: str) -> bool:
        return ref in self._variants

    def variant(self, ref: str) -> str:
        """The agent's memory-disabled variant (KeyError for an agent without memory)."""
        return self._variants[ref]

    def ghost(self, ref: str | None) -> str | None:
        return self._ghosts.get(ref or "")

    @staticmethod
    def app_name(ref: str) -> str:
        """The one canonical kagent ``app_name`` every memory call of this agent is forwarded with."""
        ns, name = parse_agent_ref(ref)
        return app_name(ns, name)

    @staticmethod
    def query_name(ref: str) -> str:
        """The ``agent_name`` erasure lists and deletes with, reaching every stored spelling."""
        return query_spelling(ref)
