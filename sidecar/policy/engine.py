"""The one interface every engine implements, and the one error they raise when they cannot answer.

Loading is two-phase so a reload is atomic: ``prepare`` validates a pack without side effects
and ``commit`` swaps it in (for OPA, checks that the server serves its revision), keeping the old
pack when anything fails.
"""

from __future__ import annotations

from typing import Any, Protocol

from sidecar.policy.model import DecisionInput
from sidecar.policy.outcome import Verdict
from sidecar.policy.pack import Pack


class EngineUnavailable(Exception):
    """The engine gave no usable answer; the runtime answers policy_unavailable.

    ``kind`` is a short code for metrics and logs (timeout, error, undefined, malformed).
    """

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class Engine(Protocol):
    """A policy engine behind the runtime."""

    name: str

    @property
    def stale(self) -> bool:
        """True when the engine lost the committed pack (an OPA restart) and needs it committed again."""

    def prepare(self, pack: Pack) -> Any:
        """Validate a pack and return what ``commit`` needs; raises PackError, changes nothing."""

    async def commit(self, prepared: Any) -> None:
        """Make a prepared pack the live one; on failure the previous pack stays live."""

    async def evaluate(self, inp: DecisionInput) -> Verdict:
        """Answer one input; raises EngineUnavailable."""

    async def evaluate_many(self, inputs: list[DecisionInput]) -> list[Verdict]:
        """Answer several inputs at once (prefetch fan-out); raises EngineUnavailable."""

    async def close(self) -> None:
        """Release connections."""
