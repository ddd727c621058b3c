"""The drill's ordered check list and the loop that runs it against one target.

Checks run in the ADR's acceptance order, each in its own throwaway identities and rooms; the
sentinel check runs last because it scans every answer the others received. When all checks are
done every identity the run used is offboarded, so a deployment keeps no drill scope enabled.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import TypedDict

import aiohttp

from sidecar.control.client import ControlError
from sidecar.drill import checks_consent, checks_erasure, checks_limits, checks_reuse, checks_sentinel
from sidecar.drill.actors import DrillRun, LocalView
from sidecar.drill.result import CheckFailed, CheckResult, Evidence, NotProvable, Outcome
from sidecar.drill.target import Target, TargetDescription
from sidecar.drill.wire import Recorder, call, open_session

#: Exit codes of ``memgov drill`` (docs/drill.md).
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_PROVEN, EXIT_UNREACHABLE = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Check:
    """One acceptance property: id, title, and the coroutine that demonstrates it."""

    id: str
    title: str
    run: Callable[[DrillRun, Evidence], Awaitable[None]]


CHECKS: tuple[Check, ...] = (
    Check("no_collection_before_consent", "No collection before consent", checks_consent.no_collection_before_consent),
    Check("private_inspect", "Private inspect", checks_consent.private_inspect),
    Check("exact_one_entry_erase", "Exact one-entry erase", checks_erasure.exact_one_entry_erase),
    Check("disable_and_clear", "Disable and clear", checks_erasure.disable_and_clear),
    Check("hard_expiry", "Hard expiry", checks_limits.hard_expiry),
    Check("cap_refusal", "Entry-cap refusal", checks_limits.cap_refusal),
    Check("no_cross_room_reuse", "No cross-room reuse", checks_reuse.cross_room),
    Check("no_cross_user_reuse", "No cross-user reuse", checks_reuse.cross_user),
    Check("no_cross_agent_reuse", "No cross-agent reuse", checks_reuse.cross_agent),
    Check("no_federated_reuse", "No bridged or federated reuse", checks_reuse.federated),
    Check("offboarding_enumeration", "Offboarding enumeration", checks_erasure.offboarding_enumeration),
    Check("sentinel_absence", "Sentinel absence; a hostile prompt changes nothing", checks_sentinel.sentinel_absence),
)


class Versions(TypedDict):
    """The drill's own version, and what the target showed of its own (None where it did not)."""

    memgov_drill: str | None
    policy_engine: object
    policy_revision: object
    ready: bool | None
    kagent: object


class Cleanup(TypedDict, total=False):
    """How the run's identities were offboarded (empty until the run ends)."""

    subjects: int
    scopes: int
    complete: bool


class TargetUnreachable(Exception):
    """The control API or the data plane did not answer at all."""


@dataclass
class Report:
    """Everything one run established, ready to be written as a bundle."""

    target: TargetDescription
    versions: Versions
    limits: dict[str, object]
    started_at: str
    finished_at: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    cleanup: Cleanup = field(default_factory=Cleanup)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for c in self.checks if c.outcome == outcome)

    @property
    def exit_code(self) -> int:
        """0 only when every check passed; a failure outranks a property that could not be proven."""
        if self.count("failed"):
            return EXIT_FAILED
        return EXIT_NOT_PROVEN if self.count("not_provable") else EXIT_PASSED


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


async def run_check(run: DrillRun, check: Check) -> CheckResult:
    """Run one check; whatever happens, the result is content-free."""
    ev = Evidence()
    started = time.perf_counter()
    outcome: Outcome = "passed"
    try:
        await check.run(run, ev)
    except CheckFailed as failed:
        outcome = "failed"
        ev.data.update(failed.observed, failed_expectation=failed.expectation)
    except NotProvable as unproven:
        outcome = "not_provable"
        ev.data.update(unproven.observed, not_provable=unproven.why)
    except ControlError as exc:
        outcome = "failed"
        ev["error"] = {
            "type": "ControlError",
            "status": exc.status,
            "reason": exc.reason,
            "decision_id": exc.decision_id,
        }
    except (aiohttp.ClientError, TimeoutError, KeyError, TypeError, ValueError) as exc:
        # An answer of the wrong shape or no answer: the property is not shown. Only the type is kept.
        outcome = "failed"
        ev["error"] = {"type": type(exc).__name__}
    duration = round((time.perf_counter() - started) * 1000, 1)
    return CheckResult(check.id, check.title, outcome, ev.data, tuple(ev.notes), duration)


async def _versions(run: DrillRun) -> Versions:
    """memgov's and kagent's versions and the policy revision, where the target shows them."""
    try:
        await run.control().openapi()
        kagent = await call(run.http, "GET", run.target.data_url + "/version")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise TargetUnreachable(type(exc).__name__) from None
    try:
        drill_version = version("memgov")
    except PackageNotFoundError:
        drill_version = None
    found: Versions = {
        "memgov_drill": drill_version,
        "policy_engine": None,
        "policy_revision": None,
        "ready": None,
        "kagent": kagent.body.get("kagent_version") if isinstance(kagent.body, dict) else None,
    }
    if run.target.ops_url is not None:
        try:
            ready = await call(run.http, "GET", run.target.ops_url + "/readyz")
        except (aiohttp.ClientError, TimeoutError):
            return found
        checks = ready.body.get("checks", {}) if isinstance(ready.body, dict) else {}
        policy = checks.get("policy", {}) if isinstance(checks, dict) else {}
        found["ready"] = ready.status == 200
        found["policy_engine"] = policy.get("engine")
        found["policy_revision"] = policy.get("revision") or None
    return found


async def _cleanup(run: DrillRun) -> Cleanup:
    """Offboard every identity the run used; report counts and completeness only."""
    operator = run.control(operator=True)
    complete, scopes = True, 0
    for subject in run.subjects:
        try:
            answer = await operator.offboard(subject)
        except (ControlError, aiohttp.ClientError, TimeoutError):
            complete = False
            continue
        complete = complete and answer.get("complete") is True
        scopes += len(answer.get("scopes", []))
    return {"subjects": len(run.subjects), "scopes": scopes, "complete": complete}


async def run_drill(
    target: Target,
    *,
    local: LocalView | None = None,
    clock: Callable[[], datetime] | None = None,
    checks: Sequence[Check] = CHECKS,
    progress: Callable[[str], None] = lambda line: None,
) -> Report:
    """Run ``checks`` in order against ``target`` and return the report (raises TargetUnreachable)."""
    recorder = Recorder()
    async with open_session(recorder) as http:
        run = DrillRun(target, http, recorder, clock=clock, local=local)
        limits = target.limits.model_dump()
        report = Report(target.describe(), await _versions(run), limits, _now())
        for number, check in enumerate(checks, 1):
            progress(f"[{number:>2}/{len(checks)}] {check.title} …")
            result = await run_check(run, check)
            report.checks.append(result)
            progress(f"        {result.outcome.replace('_', ' ')} ({result.duration_ms:.0f} ms)")
        report.cleanup = await _cleanup(run)
        report.finished_at = _now()
    return report
