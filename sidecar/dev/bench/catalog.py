"""Every benchmark scenario by name, in the order ``--scenario all`` runs them."""

from __future__ import annotations

from typing import Final

from sidecar.dev.bench.governed import GOVERNED
from sidecar.dev.bench.scenarios import PASSTHROUGH, Scenario

SCENARIOS: Final[dict[str, Scenario]] = {s.name: s for s in (*PASSTHROUGH, *GOVERNED)}
