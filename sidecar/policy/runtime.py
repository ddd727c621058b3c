"""The policy stage of the pipeline: engine, then floor, with hot reload and fail-closed answers.

``decide`` never raises: a missing pack or an engine failure becomes a policy_unavailable denial
with the operation's deny action. Reloads (file change or SIGHUP) validate the new pack fully and
swap it atomically; on any failure the previous pack keeps serving.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict

from sidecar.logs import get_logger
from sidecar.policy import metrics
from sidecar.policy.cedar import CedarEngine
from sidecar.policy.engine import Engine, EngineUnavailable
from sidecar.policy.floor import apply_floor
from sidecar.policy.model import Decision, DecisionInput, Deployment, Limits
from sidecar.policy.opa import OpaEngine, opa_part
from sidecar.policy.outcome import Verdict, assemble, unavailable
from sidecar.policy.pack import Pack, PackError, load_limits
from sidecar.policy.reload import PackLoader, ReloadOutcome
from sidecar.policy.shadow import DECISION_IDS, ShadowEngine
from sidecar.reasons import new_decision_id
from sidecar.settings import PolicySettings

log = get_logger("policy")


def _logged(decision: Decision, inp: DecisionInput) -> dict[str, object]:
    """The fields of a ``policy.decision`` line: its id, codes and engine (never an input's facts)."""
    return {
        "decision_id": decision.decision_id,
        "operation": inp.operation.value,
        "action": decision.action.value,
        "reasons": [r.value for r in decision.reasons],
        "engine": decision.engine,
    }


def build_engine(settings: PolicySettings, engine: str | None = None, opa_url: str | None = None) -> Engine:
    """Construct the configured engine (nothing is loaded yet)."""
    name = engine or settings.engine
    url = opa_url or settings.opa_url
    if name == "cedar":
        return CedarEngine()
    if name == "opa":
        return OpaEngine(url, settings.opa_timeout_s)
    if name == "shadow":
        cedar, opa = CedarEngine(), OpaEngine(url, settings.opa_timeout_s)
        return ShadowEngine(cedar, opa) if settings.shadow_primary == "cedar" else ShadowEngine(opa, cedar)
    raise ValueError(f"unknown policy engine {name!r}")


class PolicyRuntime:
    """Decides governed requests with the live pack; reloads it when it changes."""

    def __init__(self, settings: PolicySettings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        #: Owns the live pack and replaces it (file watcher, SIGHUP).
        self.loader = PackLoader(settings, engine)
        #: Deployment facts per (server, bot, ghost) of the live pack: built once, then the same
        #: object, which the Cedar engine's entity cache recognises by identity.
        self._deployments: tuple[Pack | None, dict[tuple[str, str | None, str | None], Deployment]] = (None, {})
        #: The pack folder's limits as read at start: used only until a pack is live (decisions fail
        #: closed meanwhile anyway), so status pages and caps still have their numbers.
        self.fallback_limits: Limits | None = None

    @classmethod
    async def start(
        cls, settings: PolicySettings, *, engine: str | None = None, opa_url: str | None = None, watch: bool = True
    ) -> PolicyRuntime:
        """Load the pack (a failure leaves the runtime not ready) and start the file watcher."""
        runtime = cls(settings, build_engine(settings, engine, opa_url))
        runtime.fallback_limits = load_limits(settings.dir)
        await runtime.reload()
        if watch and settings.reload_interval_s > 0:
            runtime.loader.watch()
        return runtime

    @property
    def last_reload(self) -> ReloadOutcome | None:
        """The last reload attempt (for /readyz)."""
        return self.loader.last_reload

    async def reload(self) -> bool:
        """Read, validate and swap in the pack on disk; keep the live one on any failure."""
        return await self.loader.reload()

    def next_reload(self) -> asyncio.Future[bool]:
        """A future, registered now, that resolves when the next reload attempt ends (True: loaded)."""
        return self.loader.next_reload()

    def install_sighup(self) -> None:
        """Reload on SIGHUP (call once from the running server; ``close`` removes the handler)."""
        self.loader.install_sighup()

    @property
    def ready(self) -> bool:
        """True while a validated pack is live in the engine."""
        return self.pack is not None and not self.engine.stale

    @property
    def revision(self) -> str | None:
        """Content hash of the live pack, or None before one loaded."""
        return self.pack.revision if self.pack else None

    @property
    def pack(self) -> Pack | None:
        """The live pack (limits and federation data included)."""
        return self.loader.pack

    def limits(self) -> Limits:
        """The live pack's limits (hot-reloaded with it), or the folder's as read at start."""
        pack = self.pack
        if pack is not None:
            return pack.limits
        if self.fallback_limits is None:
            raise PackError("no policy pack is loaded")
        return self.fallback_limits

    def deployment(self, server_name: str, bridge_bot: str | None, agent_ghost: str | None) -> Deployment:
        """Deployment facts for an input, with the live pack's limits and partners."""
        pack = self.pack
        if pack is None:
            raise PackError("no policy pack is loaded")
        seen_pack, built = self._deployments
        if seen_pack is not pack:
            built = {}
            self._deployments = (pack, built)
        key = (server_name, bridge_bot, agent_ghost)
        found = built.get(key)
        if found is None:
            found = built[key] = Deployment(
                server_name=server_name,
                bridge_bot=bridge_bot,
                agent_ghost=agent_ghost,
                classification=pack.federation.classification,
                federation_partners=pack.federation.partners,
                limits=pack.limits,
                org=pack.org,
            )
        return found

    async def ready_check(self) -> tuple[bool, dict[str, object]]:
        """Readiness for /readyz: ready flag, engine, revision, the last reload attempt and what an OPA serves."""
        last = {k: v for k, v in asdict(self.last_reload).items() if v is not None} if self.last_reload else {}
        detail: dict[str, object] = {"engine": self.engine.name, "revision": self.revision or "", "last_reload": last}
        opa = opa_part(self.engine)
        if opa is not None:
            detail["opa_revision"] = opa.served
        return self.ready, detail

    def _finish(self, pack: Pack, decision: Decision, inp: DecisionInput, did: str, started: float) -> Decision:
        decision = apply_floor(decision, inp, pack.limits, pack.federation, pack.org)
        stamp = {"decision_id": did, "engine": self.engine.name, "revision": pack.revision}
        decision = decision.model_copy(update=stamp)
        metrics.count_decision(inp.operation, decision, time.perf_counter() - started)
        # Debug level: the enforcement stage logs every governed request once at info, with these fields.
        log.debug("policy.decision", **_logged(decision, inp), revision=decision.revision)
        return decision

    def _unloaded(self, inp: DecisionInput, did: str) -> Decision:
        # SECURITY: no validated pack, no memory: fail closed.
        decision = unavailable(inp).model_copy(update={"decision_id": did, "engine": self.engine.name})
        metrics.ENGINE_FAILURES.labels(self.engine.name, "unloaded").inc()
        log.warning("policy.decision", **_logged(decision, inp))
        return decision

    def _conclude(
        self, pack: Pack, inp: DecisionInput, verdict: Verdict | Exception, did: str | None, started: float
    ) -> Decision:
        if isinstance(verdict, Exception):
            # SECURITY: whatever went wrong inside the engine, the answer is a denial.
            kind = verdict.kind if isinstance(verdict, EngineUnavailable) else "internal"
            metrics.ENGINE_FAILURES.labels(self.engine.name, kind).inc()
            decision = unavailable(inp)
        else:
            decision = assemble(inp, verdict, pack.limits)
        return self._finish(pack, decision, inp, did or new_decision_id(), started)

    async def decide(self, inp: DecisionInput, decision_id: str | None = None) -> Decision:
        """Engine, then floor; never raises."""
        started, pack = time.perf_counter(), self.pack
        did = decision_id or new_decision_id()
        if pack is None:
            return self._unloaded(inp, did)
        DECISION_IDS.set((did,))
        try:
            verdict: Verdict | Exception = await self.engine.evaluate(inp)
        except Exception as exc:  # noqa: BLE001 - turned into policy_unavailable
            verdict = exc
        return self._conclude(pack, inp, verdict, did, started)

    def decide_sync(self, inp: DecisionInput, decision_id: str | None = None) -> Decision:
        """Decide without awaiting (Cedar only), for callers on a hot synchronous path."""
        if not isinstance(self.engine, CedarEngine):
            raise TypeError("decide_sync needs the cedar engine")
        started, pack = time.perf_counter(), self.pack
        if pack is None:
            return self._unloaded(inp, decision_id or new_decision_id())
        try:
            verdict: Verdict | Exception = self.engine.evaluate_sync(inp)
        except Exception as exc:  # noqa: BLE001 - turned into policy_unavailable
            verdict = exc
        return self._conclude(pack, inp, verdict, decision_id, started)

    async def decide_many(self, inputs: list[DecisionInput]) -> list[Decision]:
        """Decide a fan-out (e.g. the prefetch searches of one turn) in one engine call."""
        started, pack = time.perf_counter(), self.pack
        ids = [new_decision_id() for _ in inputs]
        if pack is None:
            return [self._unloaded(inp, did) for inp, did in zip(inputs, ids, strict=True)]
        DECISION_IDS.set(tuple(ids))
        try:
            verdicts: list[Verdict | Exception] = list(await self.engine.evaluate_many(inputs))
        except Exception as exc:  # noqa: BLE001 - every input becomes policy_unavailable
            verdicts = [exc] * len(inputs)
        return [self._conclude(pack, inp, v, did, started) for inp, v, did in zip(inputs, verdicts, ids, strict=True)]

    async def close(self) -> None:
        """Stop the watcher, remove the SIGHUP handler and release the engine."""
        await self.loader.close()
        await self.engine.close()
        metrics.show_pack(self.engine.name, None)
