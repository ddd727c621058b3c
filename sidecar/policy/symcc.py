"""Running the ``memgov-symcc`` helper (tools/symcc/) on a job, with the cvc5 solver it needs.

The helper is built by ``make tools`` into .tools/bin, or found on PATH. The solver is cvc5: the
one in ``$CVC5``, a ``cvc5`` on PATH, or the PyPI build served by ``memgov-cvc5`` beside this
Python (``pip install 'memgov[prove]'``). Without either, the caller gets one line saying what
to install, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sidecar.policy.opa_server import ToolNotFound, tool_binary
from sidecar.policy.pack import PackError

_HELPER: Final = "memgov-symcc"
#: A whole pack takes a minute on an idle machine; a busy one can take many times that.
_TIMEOUT_S: Final = 1800
#: Helpers run side by side on one job (each drives its own solver process).
_PARALLEL: Final = 4


class ProverUnavailable(ToolNotFound):
    """The helper or the solver is missing: the message says what to install."""


def _solver_env() -> dict[str, str]:
    env = dict(os.environ)
    if env.get("CVC5") or shutil.which("cvc5"):
        return env
    shim = Path(sys.executable).with_name("memgov-cvc5")
    try:
        import cvc5  # noqa: F401 - only whether the PyPI solver is installed
    except ImportError:
        shim = Path("/nonexistent")
    if not shim.is_file():
        raise ProverUnavailable(
            "no SMT solver: pip install 'memgov[prove]' (cvc5 1.3.1), or put cvc5 on PATH or in $CVC5"
        )
    env["CVC5"] = str(shim)
    return env


def _run_one(helper: str, task: dict[str, Any], env: dict[str, str]) -> list[dict[str, Any]]:
    try:
        proc = subprocess.run(
            [helper],
            input=json.dumps(task),
            capture_output=True,
            text=True,
            env=env,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PackError(f"{_HELPER} gave no answer within {_TIMEOUT_S} s", step="cedar") from None
    try:
        answer = json.loads(proc.stdout)
    except json.JSONDecodeError:
        first = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PackError(f"{_HELPER} failed (exit {proc.returncode}): {first}", step="cedar") from None
    if "error" in answer:
        raise PackError(f"{_HELPER}: {answer['error']}", step="cedar")
    results: list[dict[str, Any]] = answer["results"]
    return results


def run_helper(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one job through memgov-symcc; ProverUnavailable or PackError on failure, never a traceback.

    The checks are independent: they are split over one helper per core (at most _PARALLEL), each
    with its own solver, and the results come back in the job's order.
    """
    try:
        helper = tool_binary(_HELPER)
    except ToolNotFound:
        raise ProverUnavailable(
            f"{_HELPER} not found: run `make tools` (builds tools/symcc/ with cargo) or put {_HELPER} on PATH"
        ) from None
    env = _solver_env()
    checks = task["checks"]
    ways = max(1, min(_PARALLEL, os.cpu_count() or 1, len(checks)))
    if ways == 1:
        return _run_one(helper, task, env)
    parts = [{**task, "checks": checks[i::ways]} for i in range(ways)]
    with ThreadPoolExecutor(max_workers=ways) as pool:
        answers = list(pool.map(lambda part: _run_one(helper, part, env), parts))
    order = {c["name"]: i for i, c in enumerate(checks)}
    merged = [r for found in answers for r in found]
    return sorted(merged, key=lambda r: order.get(r["name"], len(order)))


@dataclass(frozen=True)
class Verdict:
    """One property on one action (and, for never-errors, one policy)."""

    prop: str
    action: str
    policy: str | None
    proved: bool
    counterexample: dict[str, Any] | None


def verdicts(results: list[dict[str, Any]]) -> list[Verdict]:
    """The helper's answer as verdicts."""
    return [
        Verdict(r["name"], r["action"], r.get("policy"), r["verdict"] == "proved", r.get("counterexample"))
        for r in results
    ]
