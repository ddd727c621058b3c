"""Check outcomes and their content-free evidence.

A check fills an :class:`Evidence` as it goes, so a failure keeps what was observed up to that
point. It ends by returning (passed), raising :class:`CheckFailed` with a fixed expectation code,
or raising :class:`NotProvable` when the target makes the property impossible to demonstrate
(for example an hourly budget too small to fill a scope to its cap). Evidence holds only ids,
reason codes, counts, booleans and timestamps; notes are fixed sentences written by the drill.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

Outcome = Literal["passed", "failed", "not_provable"]


class CheckFailed(Exception):
    """An expectation did not hold; ``expectation`` names it (a fixed snake_case code)."""

    def __init__(self, expectation: str, **observed: object) -> None:
        super().__init__(expectation)
        self.expectation, self.observed = expectation, observed


class NotProvable(Exception):
    """The target cannot demonstrate the property; ``why`` is a fixed snake_case code."""

    def __init__(self, why: str, **observed: object) -> None:
        super().__init__(why)
        self.why, self.observed = why, observed


def expect(condition: bool, expectation: str, **observed: object) -> None:
    """Raise :class:`CheckFailed` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(expectation, **observed)


@dataclass
class Evidence:
    """What one check observed, plus notes on what it could not show."""

    data: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __setitem__(self, key: str, value: object) -> None:
        self.data[key] = value

    def __getitem__(self, key: str) -> object:
        return self.data[key]

    def note(self, text: str) -> None:
        """Add a fixed sentence on a limit of this proof."""
        self.notes.append(text)


class CheckJson(TypedDict):
    """A check in the bundle document."""

    id: str
    title: str
    passed: bool
    outcome: Outcome
    evidence: dict[str, object]
    notes: list[str]
    duration_ms: float


@dataclass(frozen=True)
class CheckResult:
    """One check as reported: id, title, outcome, evidence, duration."""

    id: str
    title: str
    outcome: Outcome
    evidence: dict[str, object]
    notes: tuple[str, ...]
    duration_ms: float

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    def as_json(self) -> CheckJson:
        return {
            "id": self.id,
            "title": self.title,
            "passed": self.passed,
            "outcome": self.outcome,
            "evidence": self.evidence,
            "notes": list(self.notes),
            "duration_ms": self.duration_ms,
        }
