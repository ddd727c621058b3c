"""The OPA engine: OPA owns and loads the Rego pack as a bundle; memgov only queries its Data API.

OPA loads the bundle ``memgov policy bundle`` writes (``opa run --bundle``, or a bundle server) and
names the bundle's revision in every answer (``?provenance``). memgov accepts an answer only when
that revision is the one of the pack it loaded itself; otherwise the engine is stale, the
gateway is not ready, and the decision is policy_unavailable. Every other failure (timeout,
connection, HTTP error, an undefined or malformed result) raises EngineUnavailable as well:
OPA fails closed.

The HTTP side is opa-python-client's ``AsyncOpaClient``: one aiohttp session per engine, its
``query_rule`` for decisions and ``get_data`` for the bundle status.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
from opa_client import AsyncOpaClient
from opa_client.errors import PolicyNotFoundError

from sidecar.policy import metrics
from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.model import DecisionInput
from sidecar.policy.opa_bundle import ROOT, check_layout
from sidecar.policy.outcome import Verdict
from sidecar.policy.pack import Pack

PACKAGE: Final = "memgov.decision"
RULE: Final = "result"
#: OPA's own document: its ``bundles`` are the loaded bundles' status. ``system/bundles`` itself is
#: undefined while no bundle is loaded, which the client reports like an error; ``system`` always
#: holds OPA's ``version``, so "no bundle" stays a revision mismatch.
SYSTEM: Final = "system"
#: One retry, for a pooled connection that a restarted OPA closed. The client also retries a 500,
#: 502 or 504 once, 0.3 s later (never a 503); the decision budget bounds the whole call either way.
RETRIES: Final = 1
_PROVENANCE: Final = {"provenance": True}
#: The client raises aiohttp's errors, JSON errors (ValueError) and, from get_data, its own
#: PolicyNotFoundError; aiohttp's timeouts are TimeoutErrors.
_FAILURES: Final = (aiohttp.ClientError, TimeoutError, ValueError, OSError, PolicyNotFoundError)
#: memgov's revisions are short hex hashes; anything else OPA names is shown as "other".
_REVISION: Final = re.compile(r"^[0-9a-f]{1,64}$")


def parse_verdict(body: Any) -> Verdict:
    """Read OPA's answer; anything but a well-formed result is an error (a missing field denies)."""
    result = body.get("result") if isinstance(body, dict) else None
    if result is None:
        raise EngineUnavailable("undefined")
    if not isinstance(result, dict):
        raise EngineUnavailable("malformed")
    reasons = result.get("reasons", [])
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise EngineUnavailable("malformed")
    # SECURITY: only a literal true allows; a missing or odd "allow" is a denial.
    return Verdict(allowed=result.get("allow") is True, reasons=frozenset(reasons))


def memgov_bundle(bundles: Any) -> tuple[str, str] | None:
    """Return (name, revision) of the one loaded bundle whose roots hold the memgov package."""
    found = []
    for name, status in (bundles or {}).items() if isinstance(bundles, dict) else ():
        manifest = status.get("manifest") if isinstance(status, dict) else None
        roots = manifest.get("roots", [""]) if isinstance(manifest, dict) else []
        revision = manifest.get("revision") if isinstance(manifest, dict) else None
        if isinstance(roots, list) and any(r in ("", ROOT) for r in roots) and isinstance(revision, str):
            found.append((str(name), revision))
    return found[0] if len(found) == 1 else None


def client_for(url: str, timeout_s: float) -> Any:
    """An AsyncOpaClient for the OPA server at an http(s) URL (the client takes no base path)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("opa_url must be an http(s) URL")
    if parts.path.strip("/") or parts.query or parts.fragment or parts.username:
        raise ValueError("opa_url must name the OPA server only: no path, query or credentials")
    https = parts.scheme == "https"
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = parts.port or (443 if https else 80)
    return AsyncOpaClient(host=host, port=port, ssl=https, retries=RETRIES, timeout=timeout_s)


class OpaEngine:
    """Rego on an OPA server that loaded the pack's bundle, reached through one AsyncOpaClient."""

    name = "opa"

    def __init__(self, url: str, timeout_s: float) -> None:
        self._client = client_for(url, timeout_s)
        self.url = url.rstrip("/")
        self._open = False
        self._timeout = timeout_s
        self._bundle: str | None = None
        self._expected: str | None = None
        #: The revision OPA last said it serves ("" before it answered, or when it has no memgov bundle).
        self.served = ""
        #: True when OPA serves another revision than memgov's pack (or none): not ready until it matches.
        self.stale = False

    async def _ask(self, call: Callable[[Any], Awaitable[Any]]) -> Any:
        """One call of the client, its session opened on first use, all of it within the budget.

        This is the thin part memgov adds: the client's own timeout bounds each attempt, not the
        attempts together with its back-off, and it opens its session only as a context manager.
        """
        async with asyncio.timeout(self._timeout):
            if not self._open:
                await self._client.__aenter__()
                self._open = True
            return await call(self._client)

    def _saw(self, revision: str) -> None:
        shown = revision if not revision or _REVISION.fullmatch(revision) else "other"
        if shown != self.served:
            self.served = shown
            metrics.show_opa_bundle(shown or None)

    def prepare(self, pack: Pack) -> str:
        """Check the pack's Rego layout; what OPA must then serve is the pack's revision."""
        check_layout(pack.select("rego", ".rego"))
        return pack.revision

    async def commit(self, revision: str) -> None:
        """Accept the pack once OPA serves its revision; memgov never changes what OPA holds."""
        try:
            body = await self._ask(lambda opa: opa.get_data(SYSTEM))
        except _FAILURES:
            raise EngineUnavailable("error") from None
        system = body.get("result") if isinstance(body, dict) else None
        found = memgov_bundle(system.get("bundles") if isinstance(system, dict) else None)
        self._bundle, served = found if found else (None, "")
        self._saw(served)
        if served != revision:
            # SECURITY: OPA would decide with other rules than the pack memgov reports and audits.
            self.stale = True
            raise EngineUnavailable("revision_mismatch")
        self._expected, self.stale = revision, False

    async def evaluate(self, inp: DecisionInput) -> Verdict:
        """Query the decision rule for one input; the answer counts only from the expected revision."""
        try:
            query = inp.model_dump(mode="json")
            body = await self._ask(lambda opa: opa.query_rule(query, PACKAGE, RULE, query_params=_PROVENANCE))
        except _FAILURES as exc:
            raise EngineUnavailable("timeout" if isinstance(exc, TimeoutError) else "error") from None
        served = self._answered_by(body)
        if self._expected is None or served != self._expected:
            # SECURITY: an answer from another pack (OPA reloaded, or lost its bundle) is no answer.
            self._saw(served or "")
            self.stale = True
            raise EngineUnavailable("revision_mismatch")
        return parse_verdict(body)

    def _answered_by(self, body: Any) -> str | None:
        """The revision of the memgov bundle an answer names (a lone bundle counts: OPA renamed it)."""
        provenance = body.get("provenance") if isinstance(body, dict) else None
        bundles = provenance.get("bundles") if isinstance(provenance, dict) else None
        if not isinstance(bundles, dict):
            return None
        status = bundles.get(self._bundle) if self._bundle in bundles else None
        if status is None and len(bundles) == 1:
            status = next(iter(bundles.values()))
        revision = status.get("revision") if isinstance(status, dict) else None
        return revision if isinstance(revision, str) else None

    async def evaluate_many(self, inputs: list[DecisionInput]) -> list[Verdict]:
        """Query several inputs concurrently through the one client.

        Not the client's ``bulk_query_rule``: it goes through OPA's ad-hoc query API, which names no
        bundle revision (no provenance), and it embeds every input in the query text that OPA
        parses and compiles on each call, which made it the slower of the two here.
        """
        results = await asyncio.gather(*(self.evaluate(i) for i in inputs), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result if isinstance(result, EngineUnavailable) else EngineUnavailable("error")
        return [r for r in results if isinstance(r, Verdict)]

    async def close(self) -> None:
        """Close the client's session (a later query opens a new one)."""
        self._saw("")
        if self._open:
            self._open = False
            await self._client.close_connection()


def opa_part(engine: object) -> OpaEngine | None:
    """The OPA engine behind an engine: itself, or either side of a shadow pair."""
    for part in (engine, getattr(engine, "primary", None), getattr(engine, "shadow", None)):
        if isinstance(part, OpaEngine):
            return part
    return None
