"""What one cedarpy call costs, and how much of it is the decision context.

For the case tables' ``save`` and ``invoke`` inputs: the CPU of one ``is_authorized_batch`` call
on the pre-parsed policy set and cached entities with the full context, with each top-level
context record left out in turn, and with an empty context (the call's floor on this machine).

    .venv/bin/python benchmarks/cedar_call.py [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

import cedarpy
import orjson

from sidecar.logs import configure_logging
from sidecar.policy.cases import load_bases
from sidecar.policy.cedar import CedarEngine
from sidecar.policy.cedar_input import request
from sidecar.policy.model import DecisionInput
from sidecar.policy.pack import read_pack
from sidecar.policy.runtime import PolicyRuntime
from sidecar.settings import PACKAGED_POLICY_DIR, PolicySettings


def _cpu_us(call: Callable[[], object], calls: int) -> float:
    for _ in range(200):
        call()
    start = time.process_time_ns()
    for _ in range(calls):
        call()
    return (time.process_time_ns() - start) / calls / 1000


async def _run(calls: int) -> None:
    pack = read_pack(PACKAGED_POLICY_DIR)
    bases = load_bases(PACKAGED_POLICY_DIR.parent / "policy-tests", pack)
    settings = PolicySettings(dir=PACKAGED_POLICY_DIR, reload_interval_s=0)
    runtime = await PolicyRuntime.start(settings, engine="cedar", watch=False)
    engine = runtime.engine
    assert isinstance(engine, CedarEngine)
    compiled = engine.prepare(pack)
    try:
        for name in ("save", "invoke"):
            inp = DecisionInput.model_validate(bases[name])
            handle = engine._entities(compiled, inp)
            asked = request(inp)
            context = asked["context"]
            assert isinstance(context, dict)

            def call(ctx: dict[str, object], asked: dict[str, object] = asked, handle: object = handle) -> float:
                wire = [{**asked, "context": orjson.dumps(ctx).decode()}]
                inner = getattr(handle, "_inner")  # noqa: B009 - the extension's handle, as the engine passes it
                return _cpu_us(
                    lambda: cedarpy._internal.is_authorized_batch(wire, compiled.policies, inner, None, False), calls
                )

            print(f"{name}: full context ({len(orjson.dumps(context))} bytes) {call(context):.1f} µs")
            for key in context:
                rest = {k: v for k, v in context.items() if k != key}
                print(f"{name}:   without {key:<11} {call(rest):.1f} µs")
            print(f"{name}: empty context {call({}):.1f} µs")
    finally:
        await runtime.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    configure_logging("warning")
    asyncio.run(_run(args.calls))


if __name__ == "__main__":
    main()
