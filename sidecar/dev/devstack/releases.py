"""The kagent releases memgov is tested against, and what differs between them for a gateway.

Each release names what its ``/version`` reports, the kagent-adk release of its Python runtime,
and the behaviours the stand-in models differently. ``conformance/kagent/build.sh`` builds the
real server of each from ``../shared/vendor`` (its pins must agree with these).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ReleaseName = Literal["0.9", "0.10"]


@dataclass(frozen=True)
class KagentRelease:
    """One kagent release: its tag, build identity and gateway-relevant behaviour."""

    name: ReleaseName
    tag: str
    commit: str
    build_date: str
    #: kagent-adk (and kagent-core) release of the matching Python runtime, from PyPI.
    adk: str

    @property
    def version_body(self) -> dict[str, str]:
        """What ``GET /version`` answers."""
        return {"kagent_version": self.tag, "git_commit": self.commit, "build_date": self.build_date}

    @property
    def newer(self) -> bool:
        """v0.10 or later: the behaviours below."""
        return self.name != "0.9"

    @property
    def search_matches_both_spellings(self) -> bool:
        """Search matches ``agent_name = $name OR agent_name = replace($name, '-', '_')``."""
        return self.newer

    @property
    def access_bump_best_effort(self) -> bool:
        """A failed access-count update after a search is logged and the search still answers."""
        return self.newer

    @property
    def owns_sessions(self) -> bool:
        """Sessions, tasks and share links are modelled (owner checks, ``X-Share-Token``)."""
        return self.newer


V0_9 = KagentRelease("0.9", "v0.9.11", "14dcbfc", "2026-07-01", "0.9.11")
V0_10 = KagentRelease("0.10", "v0.10.0-rc3", "7c52fff", "2026-08-18", "0.10.4")
RELEASES: dict[str, KagentRelease] = {r.name: r for r in (V0_9, V0_10)}
DEFAULT = V0_9


def release(name: str) -> KagentRelease:
    """The release called ``name`` (``0.9`` or ``0.10``); ValueError for any other."""
    try:
        return RELEASES[name]
    except KeyError:
        raise ValueError(f"unknown kagent release {name!r} (supported: {', '.join(RELEASES)})") from None
