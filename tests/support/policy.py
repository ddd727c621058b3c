"""The policy stage's test inputs: valid decision inputs, the pack's folders, real OPA servers on loopback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar.policy.model import DecisionInput
from sidecar.policy.opa_server import OpaServer, start_opa
from sidecar.policy.rules import BUILT_IN_RULES
from sidecar.settings import PolicySettings

REPO = Path(__file__).resolve().parents[2]


PACK_DIR = REPO / "policies"


CASES_DIR = REPO / "policy-tests"


#: Test packs that permit everything, so only the floor can refuse. The loader wants a rule for
#: every reason code in both languages, so each code gets one that never fires.
PERMIT_ALL_CEDAR = """@id("allowed")
@rationale("Test pack: permits everything, so only the floor can refuse.")
permit (principal, action, resource);
""" + "".join(
    f'\n@id("{code.replace("_", "-")}")\n@rationale("Never fires.")\n'
    "forbid (principal, action, resource)\nwhen { false };\n"
    for code in BUILT_IN_RULES
)


PERMIT_ALL_REGO = """package memgov.decision

result := {"allow": true, "reasons": []}
""" + "".join(
    f'\n# METADATA\n# title: {code}\n# custom:\n#   reason: {code}\ndeny contains "{code}" if false\n'
    for code in BUILT_IN_RULES
)


MakeInput = Callable[..., DecisionInput]


class OpaServers:
    """Real OPA servers, each loading one pack folder as its bundle, the way OPA mode runs."""

    def __init__(self) -> None:
        self._running: dict[str, OpaServer] = {}

    def serve(self, pack: Path) -> str:
        """Start an OPA serving the pack and return its URL."""
        server = start_opa(pack)
        self._running[server.url] = server
        return server.url

    def replace(self, url: str, pack: Path) -> None:
        """Restart the OPA at url on the same port, now serving another pack (a new bundle rolled out)."""
        self._running.pop(url).stop()
        server = start_opa(pack, port=int(url.rsplit(":", 1)[1]))
        self._running[server.url] = server

    def stop(self, url: str) -> None:
        """Stop the OPA at url (it is down until replaced)."""
        self._running[url].stop()

    def stop_all(self) -> None:
        """Stop every server."""
        for server in self._running.values():
            server.stop()


def policy_settings(pack: Path, **overrides: Any) -> PolicySettings:
    """Policy settings for a pack folder; no file watching unless asked."""
    return PolicySettings(dir=pack, **{"reload_interval_s": 0, "opa_timeout_s": 5.0, **overrides})
