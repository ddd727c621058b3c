"""The OPA engine: OPA owns and loads the Rego pack as a bundle; memgov only queries ``/v1/data``.

OPA loads the bundle ``memgov policy bundle`` writes (``opa run --bundle``, or a bundle server) and
names the bundle's revision in every answer (``?provenance``). memgov accepts an answer only when
that revision is the one of the pack it loaded itself; otherwise the engine is stale, the
gateway is not ready, and the decision is policy_unavailable. Every other failure (timeout,
connection, HTTP error, an undefined or malformed result) raises EngineUnavailable as well:
OPA fails closed.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp

from sidecar.policy import metrics
from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.model import DecisionInput
from sidecar.policy.opa_bundle import ROOT, check_layout
from sidecar.policy.outcome import Verdict
from sidecar.policy.pack import Pack

PACKAGE: Final = "memgov.decision"
RULE: Final = "result"
DECISION_PATH: Final = "/v1/data/" + PACKAGE.replace(".", "/") + "/" + RULE
BUNDLES_PATH: Final = "/v1/data/system/bundles"
_FAILURES: Final = (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError)
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


class OpaEngine:
    """Rego on an OPA server that loaded the pack's bundle, reached over one reused HTTP session."""

    name = "opa"

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("opa_url must be an http(s) URL")
        self.url = url.rstrip("/")
        self._timeout = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._bundle: str | None = None
        self._expected: str | None = None
        #: The revision OPA last said it serves ("" before it answered, or when it has no memgov bundle).
        self.served = ""
        #: True when OPA serves another revision than memgov's pack (or none): not ready until it matches.
        self.stale = False

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        return self._session

    def _saw(self, revision: str) -> None:
        shown = revision if not revision or _REVISION.fullmatch(revision) else "other"
        if shown != self.served:
            self.served = shown
            metrics.show_opa_bundle(shown or None)

    def prepare(self, pack: Pack) -> str:
        """Check the pack's Rego layout; what OPA must then serve is the pack's revision."""
        check_layout(pack.select("rego", ".rego"))
        return pack.revision

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request, retried once when a pooled connection turns out dead (OPA restarted).

        OPA queries have no side effects, so a retry cannot change anything; the timeout bounds both.
        """
        async with asyncio.timeout(self._timeout):
            for attempt in (1, 2):
                try:
                    async with self._http().request(method, self.url + path, **kwargs) as resp:
                        resp.raise_for_status()
                        return await resp.json()
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    async def commit(self, revision: str) -> None:
        """Accept the pack once OPA serves its revision; memgov never changes what OPA holds."""
        try:
            body = await self._call("GET", BUNDLES_PATH)
        except _FAILURES:
            raise EngineUnavailable("error") from None
        found = memgov_bundle(body.get("result") if isinstance(body, dict) else None)
        self._bundle, served = found if found else (None, "")
        self._saw(served)
        if served != revision:
            # SECURITY: OPA would decide with other rules than the pack memgov reports and audits.
            self.stale = True
            raise EngineUnavailable("revision_mismatch")
        self._expected, self.stale = revision, False

    async def decide(self, inp: DecisionInput) -> Verdict:
        """Query the decision rule for one input; the answer counts only from the expected revision."""
        try:
            body = await self._call(
                "POST", DECISION_PATH, params={"provenance": "true"}, json={"input": inp.model_dump(mode="json")}
            )
        except _FAILURES as exc:
            raise EngineUnavailable("timeout" if isinstance(exc, asyncio.TimeoutError) else "error") from None
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

    async def decide_many(self, inputs: list[DecisionInput]) -> list[Verdict]:
        """Query several inputs concurrently over the shared session.

        Concurrent single queries beat OPA's ad-hoc batch query here: the batch embeds every input
        in the query text, which OPA must parse and compile on each call.
        """
        results = await asyncio.gather(*(self.decide(i) for i in inputs), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result if isinstance(result, EngineUnavailable) else EngineUnavailable("error")
        return [r for r in results if isinstance(r, Verdict)]

    async def close(self) -> None:
        """Close the HTTP session."""
        self._saw("")
        if self._session is not None:
            await self._session.close()
            self._session = None


def opa_part(engine: object) -> OpaEngine | None:
    """The OPA engine behind an engine: itself, or either side of a shadow pair."""
    for part in (engine, getattr(engine, "primary", None), getattr(engine, "shadow", None)):
        if isinstance(part, OpaEngine):
            return part
    return None
