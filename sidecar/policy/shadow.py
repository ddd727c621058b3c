"""Shadow mode: one engine enforces, the other is evaluated on the side and compared.

The comparison runs as a background task so the shadow engine never adds latency or failures to
the enforced decision. Disagreements are counted and logged with codes only, the decision id (set
by the runtime in :data:`DECISION_IDS`, which the task inherits) and the revision each engine holds.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

from sidecar.logs import get_logger
from sidecar.policy import metrics
from sidecar.policy.engine import Engine, EngineUnavailable
from sidecar.policy.model import DecisionInput
from sidecar.policy.outcome import Verdict, deny_action
from sidecar.policy.pack import Pack
from sidecar.reasons import REASON_VALUES, Action

log = get_logger("policy")

#: Decision ids of the inputs being decided, in input order (set by the runtime before it asks).
DECISION_IDS: ContextVar[tuple[str, ...]] = ContextVar("memgov_decision_ids", default=())


def _action(inp: DecisionInput, verdict: Verdict) -> Action:
    return Action.FORWARD if verdict.allowed else deny_action(inp.operation)


class ShadowEngine:
    """Enforce with ``primary``; evaluate ``shadow`` too and report where they differ."""

    #: Comparisons in flight beyond this are skipped rather than queued without bound.
    MAX_PENDING = 256

    def __init__(self, primary: Engine, shadow: Engine) -> None:
        self.primary = primary
        self.shadow = shadow
        self.name = primary.name
        self._pending: set[asyncio.Task[None]] = set()
        #: Pack revision each engine last committed (they differ only after a half-failed commit).
        self.revisions: dict[str, str] = {}

    @property
    def stale(self) -> bool:
        """True when either engine lost its pack."""
        return self.primary.stale or self.shadow.stale

    def prepare(self, pack: Pack) -> tuple[Any, Any, str]:
        """Validate the pack for both engines."""
        return self.primary.prepare(pack), self.shadow.prepare(pack), pack.revision

    async def commit(self, prepared: tuple[Any, Any, str]) -> None:
        """Commit the remote-capable engine first, so a failed check leaves both on the old pack."""
        first, second = (self.shadow, self.primary) if self.shadow.name == "opa" else (self.primary, self.shadow)
        parts = dict(zip((self.primary.name, self.shadow.name), prepared[:2], strict=True))
        await first.commit(parts[first.name])
        self.revisions[first.name] = prepared[2]
        await second.commit(parts[second.name])
        self.revisions[second.name] = prepared[2]

    def _compare(self, inputs: list[DecisionInput], enforced: list[Verdict]) -> None:
        if len(self._pending) >= self.MAX_PENDING:
            metrics.ENGINE_FAILURES.labels(self.shadow.name, "shadow_skipped").inc()
            return
        ids = DECISION_IDS.get()
        ids = ids if len(ids) == len(inputs) else ()
        task = asyncio.get_running_loop().create_task(self._run(inputs, enforced, ids))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _run(self, inputs: list[DecisionInput], enforced: list[Verdict], ids: tuple[str, ...]) -> None:
        try:
            many = len(inputs) > 1
            seen = await self.shadow.evaluate_many(inputs) if many else [await self.shadow.evaluate(inputs[0])]
        except EngineUnavailable as exc:
            metrics.ENGINE_FAILURES.labels(self.shadow.name, exc.kind).inc()
            return
        for i, (inp, mine, theirs) in enumerate(zip(inputs, enforced, seen, strict=True)):
            if mine == theirs:
                continue
            metrics.SHADOW_DISAGREEMENTS.labels(inp.operation.value).inc()
            log.warning(
                "policy.shadow_disagreement",
                decision_id=ids[i] if ids else None,
                revision=self.revisions.get(self.primary.name),
                shadow_revision=self.revisions.get(self.shadow.name),
                operation=inp.operation.value,
                action=_action(inp, mine).value,
                shadow_action=_action(inp, theirs).value,
                reasons=sorted(r for r in mine.reasons ^ theirs.reasons if r in REASON_VALUES),
                engine=self.shadow.name,
            )

    async def evaluate(self, inp: DecisionInput) -> Verdict:
        """Enforced verdict of the primary; the shadow comparison is scheduled."""
        verdict = await self.primary.evaluate(inp)
        self._compare([inp], [verdict])
        return verdict

    async def evaluate_many(self, inputs: list[DecisionInput]) -> list[Verdict]:
        """Enforced verdicts of the primary; one shadow comparison for the batch."""
        verdicts = await self.primary.evaluate_many(inputs)
        if inputs:
            self._compare(inputs, verdicts)
        return verdicts

    async def drain(self) -> None:
        """Wait for the comparisons in flight (shutdown and tests)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def close(self) -> None:
        """Finish comparisons, then close both engines."""
        await self.drain()
        await self.primary.close()
        await self.shadow.close()
