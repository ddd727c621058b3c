"""The OPA engine: memgov pushes the Rego pack into an OPA server and queries its decision rule.

Every failure (timeout, connection, HTTP error, an undefined or malformed result) raises
EngineUnavailable, which the runtime turns into a policy_unavailable denial: OPA fails closed.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp
from opa_client import AsyncOpaClient
from opa_client.errors import ConnectionsError, DeletePolicyError, QueryExecuteError, RegoParseError

from sidecar.logs import get_logger
from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.model import DecisionInput
from sidecar.policy.outcome import Verdict
from sidecar.policy.pack import Pack, PackError

log = get_logger("policy")

PACKAGE: Final = "memgov.decision"
RULE: Final = "result"
#: Policy ids memgov owns on the OPA server; anything else there is left alone.
ID_PREFIX: Final = "memgov/"
MODULE_ID: Final = ID_PREFIX + "decision.rego"
#: OPA refused a module change (it would not compile); the pack, not the transport, is at fault.
_REJECTED: Final = (RegoParseError, DeletePolicyError)
_FAILURES: Final = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionsError, QueryExecuteError, ValueError, OSError)


def merge_modules(files: dict[str, str]) -> str:
    """Join the files of the decision package into one module, so one PUT swaps the whole pack.

    OPA compiles every policy PUT against what it already holds, so files that refer to each
    other cannot be pushed one by one, and a half-pushed pack would be live. Test files stay local.
    """
    if not files:
        raise PackError("rego/: no .rego policy files")
    header: list[str] = []
    imports: dict[str, None] = {}
    bodies: list[str] = []
    for rel in sorted(files):
        lines = files[rel].splitlines()
        at = next((i for i, line in enumerate(lines) if line.startswith("package ")), None)
        if at is None or lines[at].split()[1:] != [PACKAGE]:
            raise PackError(f"{rel}: every policy file must be in package {PACKAGE}")
        if "# METADATA" in lines[:at] and not header:
            header = lines[:at]
        rest = lines[at + 1 :]
        imports.update(dict.fromkeys(line for line in rest if line.startswith("import ")))
        bodies.append(f"# from {rel}\n" + "\n".join(line for line in rest if not line.startswith("import ")))
    return "\n".join([*header, f"package {PACKAGE}", *imports, *bodies]) + "\n"


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


class OpaEngine:
    """Rego on an OPA server, reached over one reused HTTP session."""

    name = "opa"

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("opa_url must be an http(s) URL")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = parts.scheme == "https"
        self._timeout = timeout_s
        self._client: AsyncOpaClient | None = None
        self._modules: dict[str, str] = {}
        #: Set when OPA answered "undefined": it lost the pack (restart) and needs a push.
        self.stale = False

    async def _opa(self) -> AsyncOpaClient:
        if self._client is None:
            client = AsyncOpaClient(host=self._host, port=self._port, ssl=self._ssl, timeout=self._timeout, retries=0)
            await client._init_session()  # the client's own context-manager entry, kept open for reuse
            self._client = client
        return self._client

    def prepare(self, pack: Pack) -> dict[str, str]:
        """Merge the pack's Rego files into the one module OPA gets; OPA compiles it on commit."""
        return {MODULE_ID: merge_modules(pack.select("rego", ".rego"))}

    async def _push(self, modules: dict[str, str]) -> None:
        opa = await self._opa()
        async with asyncio.timeout(max(self._timeout, 5.0) * (len(modules) + 2)):
            present = [p for p in await opa.get_policies_list() if isinstance(p, str) and p.startswith(ID_PREFIX)]
            for pid in sorted(set(present) - set(modules)):
                await opa.delete_policy(pid)
            for pid in sorted(modules):
                if self._modules.get(pid) != modules[pid] or pid not in present:
                    await opa.update_policy_from_string(modules[pid], pid, rego_compat=False)

    async def _clean_push(self, modules: dict[str, str]) -> None:
        # A rule that moved between files conflicts during a file-by-file update: start empty.
        opa = await self._opa()
        async with asyncio.timeout(max(self._timeout, 5.0) * (len(modules) + 2)):
            for pid in [p for p in await opa.get_policies_list() if isinstance(p, str) and p.startswith(ID_PREFIX)]:
                await opa.delete_policy(pid)
        self._modules = {}
        await self._push(modules)

    async def commit(self, prepared: dict[str, str]) -> None:
        """Push the modules; when OPA rejects them, put the previous modules back."""
        previous = self._modules
        try:
            try:
                await self._push(prepared)
            except _REJECTED:
                await self._clean_push(prepared)
        except _REJECTED:
            if previous:
                await self._restore(previous)
            raise PackError("rego/: OPA rejected the modules") from None
        except Exception:  # noqa: BLE001 - a transport failure: what OPA holds is unknown now
            self._modules = {}
            self.stale = True
            raise EngineUnavailable("push_failed") from None
        self._modules = dict(prepared)
        self.stale = False

    async def _restore(self, previous: dict[str, str]) -> None:
        try:
            await self._clean_push(previous)
            self._modules = dict(previous)
        except Exception:  # noqa: BLE001 - OPA stays without a pack; decisions fail closed
            self._modules = {}
            self.stale = True
            log.error("policy.opa_restore_failed", engine=self.name)

    async def decide(self, inp: DecisionInput) -> Verdict:
        """Query the decision rule for one input."""
        opa = await self._opa()
        try:
            async with asyncio.timeout(self._timeout):
                body = await opa.query_rule(inp.model_dump(mode="json"), PACKAGE, RULE)
        except _FAILURES as exc:
            raise EngineUnavailable("timeout" if isinstance(exc, asyncio.TimeoutError) else "error") from None
        try:
            return parse_verdict(body)
        except EngineUnavailable as exc:
            self.stale = self.stale or exc.kind == "undefined"
            raise

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
        if self._client is not None:
            await self._client.close_connection()
            self._client = None
