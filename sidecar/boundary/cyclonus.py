"""Ask cyclonus (``cyclonus analyze --mode query-traffic``) which flows a set of policies allows.

cyclonus reads NetworkPolicies from a folder and a JSON list of traffic objects, and prints one
verdict table per traffic object, in order, each ending in an ``IS ALLOWED?`` row. This module
writes both inputs into a scratch folder, runs the binary, and reads the verdicts back.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sidecar.boundary.model import Flow, Policy

_VERDICT = re.compile(r"^\|\s*IS ALLOWED\?\s*\|\s*(TRUE|FALSE)\s*\|")
TIMEOUT_S = 120


class CyclonusError(Exception):
    """No cyclonus binary on PATH (``missing``), or cyclonus exited non-zero or answered something
    other than one verdict per flow."""

    def __init__(self, message: str = "cyclonus is not on PATH", *, missing: bool = False) -> None:
        super().__init__(message)
        self.missing = missing


def find_cyclonus() -> str:
    """The cyclonus binary on PATH, or CyclonusError(missing=True)."""
    found = shutil.which("cyclonus")
    if found is None:
        raise CyclonusError(missing=True)
    return found


def allowed(policies: Sequence[Policy], flows: Sequence[Flow], binary: str | None = None) -> list[bool]:
    """For each flow, whether the policies allow it (ingress of its target and egress of its source)."""
    if not flows:
        return []
    binary = binary or find_cyclonus()
    with tempfile.TemporaryDirectory(prefix="memgov-cyclonus-") as scratch:
        folder = Path(scratch) / "policies"
        folder.mkdir()
        # cyclonus walks the folder and reads every file, so an empty set is an empty folder.
        for index, policy in enumerate(policies):
            (folder / f"{index:04d}.json").write_text(json.dumps(policy))
        traffic = Path(scratch) / "traffic.json"
        traffic.write_text(json.dumps([flow.traffic() for flow in flows]))
        args = [
            binary,
            "analyze",
            "--mode",
            "query-traffic",
            "--policy-path",
            str(folder),
            "--traffic-path",
            str(traffic),
        ]
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CyclonusError(f"cyclonus did not run: {type(exc).__name__}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise CyclonusError(f"cyclonus exited {proc.returncode}: {last[:300]}")
    verdicts = [m.group(1) == "TRUE" for line in proc.stdout.splitlines() if (m := _VERDICT.match(line))]
    if len(verdicts) != len(flows):
        raise CyclonusError(f"cyclonus gave {len(verdicts)} verdicts for {len(flows)} flows")
    return verdicts
