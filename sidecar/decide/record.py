"""Recording: every decision and every refusal, counted, logged and audited once, content-free (R-15).

One :class:`AuditRecorder` per process serves both planes. A refusal or rewrite that carried a genuine
credential (a session key or a context that verified, a bearer token that authenticated) gets
its own audit row; one that did not is only counted per hour, operation and reason, so an
anonymous caller cannot grow the store. While the state store is down the row or count waits in
its audit spool and is written when it answers again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sidecar import metrics, tracing
from sidecar.clock import Clock
from sidecar.logs import get_logger
from sidecar.policy.model import Decision, Operation
from sidecar.reasons import Action, Code, primary
from sidecar.state.types import StateError

if TYPE_CHECKING:
    from sidecar.state.audit import AuditOps

log = get_logger("enforce")


class AuditRecorder:
    """Counts, logs and audits decisions (data plane, inspect) and control-API refusals."""

    __slots__ = ("_audit", "_clock")

    def __init__(self, audit: AuditOps, clock: Clock) -> None:
        self._audit, self._clock = audit, clock

    async def decision(
        self, operation: Operation, decision: Decision, *, scope_id: str | None, credentialed: bool
    ) -> None:
        """One governed decision: trace attributes, the decisions metric, a log line, and unless it
        forwarded, an audit row (credentialed) or an hourly count."""
        reason = primary(decision.reasons)
        engine, revision = decision.engine or "code", decision.revision or None
        reasons = [r.value for r in decision.reasons]
        tracing.annotate(
            operation=operation.value,
            action=decision.action.value,
            reason=reason.value,
            reasons=reasons,
            decision_id=decision.decision_id,
            engine=engine,
            revision=revision,
            scope_id=scope_id,
        )
        metrics.GOVERNED_DECISIONS.labels(operation.value, decision.action.value, reason.value).inc()
        log.info(
            "decision",
            operation=operation.value,
            action=decision.action.value,
            reasons=reasons,
            decision_id=decision.decision_id,
            engine=engine,
            revision=revision,
            scope_id=scope_id,
        )
        if decision.action is Action.FORWARD:
            return
        try:
            if credentialed:
                await self._audit.audit(
                    "decision",
                    reason.value,
                    decision_id=decision.decision_id,
                    scope_id=scope_id,
                    operation=operation.value,
                    policy_revision=revision,
                    now=self._clock(),
                )
                metrics.AUDIT_WRITES.labels("decision").inc()
            else:
                await self._audit.count_refusal(operation.value, reason.value, self._clock())
                metrics.AUDIT_WRITES.labels("refusal_count").inc()
        except Exception:  # noqa: BLE001 - the refusal stands even if its audit row cannot be written
            log.error("audit.failed", operation=operation.value, decision_id=decision.decision_id)

    async def refusal(
        self, operation: str | None, reason: Code, *, decision_id: str, scope_id: str | None, credentialed: bool
    ) -> None:
        """A control-API refusal: its own ``control`` audit row, or an hourly count without a credential."""
        try:
            if credentialed:
                await self._audit.audit(
                    "control",
                    reason.value,
                    decision_id=decision_id,
                    scope_id=scope_id,
                    operation=operation,
                    now=self._clock(),
                )
            else:
                await self._audit.count_refusal(operation or "control", reason.value, self._clock())
        except StateError:
            log.error("audit.failed", decision_id=decision_id, reason=reason.value)
