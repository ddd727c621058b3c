"""``memgov drill``: run the ADR acceptance proof and write an evidence bundle (SPEC R-16).

Without URLs the drill starts its own devstack in this process (dev tooling: a checkout, not the
production image); with ``--data-url`` and
``--control-url`` it runs against a deployment, holding the deployment's bridge, operator and
session-key secrets like an in-cluster job with those Secrets mounted. Exit codes: 0 every check
passed, 1 a check failed, 2 usage or configuration error, 3 nothing failed but a check could
not be proven on this target, 4 the target did not answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from sidecar.command import add_command
from sidecar.drill.actors import LocalView
from sidecar.drill.bundle import default_folder, report_json, write_bundle
from sidecar.drill.runner import EXIT_UNREACHABLE, EXIT_USAGE, Report, TargetUnreachable, run_drill
from sidecar.drill.target import Agent, DrillConfigError, Target, load_session_secret, load_signing_key
from sidecar.policy.pack import PackError, load_federation, load_limits
from sidecar.secretfile import SecretError, read_secret
from sidecar.settings import PACKAGED_POLICY_DIR

_NEEDED = ("control_url", "bridge_key_file", "operator_key_file", "session_key_file", "server_name", "bridge_bot")


def deployment_target(args: argparse.Namespace) -> Target:
    """Build the target from the command line; raises DrillConfigError naming the option at fault."""
    missing = [f"--{name.replace('_', '-')}" for name in _NEEDED if getattr(args, name) is None]
    if missing or not args.agent:
        raise DrillConfigError("missing " + ", ".join(missing + ([] if args.agent else ["--agent"])))
    if len(args.ghost) != len(args.agent) or len(args.app_name) > len(args.agent):
        raise DrillConfigError("--ghost: give one per --agent (and at most one --app-name per --agent)")
    try:
        limits, federation = load_limits(args.policy_dir), load_federation(args.policy_dir)
    except PackError as exc:
        raise DrillConfigError(f"--policy-dir: {exc}") from None
    names = args.app_name + [None] * (len(args.agent) - len(args.app_name))
    run = secrets.token_hex(3)
    return Target(
        mode="deployment",
        data_url=args.data_url.rstrip("/"),
        control_url=args.control_url.rstrip("/"),
        ops_url=args.ops_url.rstrip("/") if args.ops_url else None,
        kagent_url=args.kagent_url.rstrip("/") if args.kagent_url else None,
        bridge_key=load_signing_key(args.bridge_key_file, "--bridge-key-file"),
        operator_key=load_signing_key(args.operator_key_file, "--operator-key-file"),
        session_secret=load_session_secret(args.session_key_file),
        server_name=args.server_name,
        bridge_bot=args.bridge_bot,
        subject=args.subject or f"@drill-{run}:{args.server_name}",
        room=args.room or f"!drill-{run}:{args.server_name}",
        agents=tuple(Agent.of(ref, ghost, app) for ref, ghost, app in zip(args.agent, args.ghost, names, strict=True)),
        classification=args.classification or federation.classification,
        limits=limits,
        kagent_token=_kagent_token(args.kagent_token_file),
    )


def _kagent_token(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return read_secret(path, "--kagent-token-file").decode().strip()
    except (SecretError, UnicodeDecodeError):
        raise DrillConfigError("--kagent-token-file: unreadable or not a text token") from None


#: Starts the in-process devstack target; ``sidecar.cli`` sets it where the dev tooling is installed.
InProcess = Callable[[], AbstractAsyncContextManager[tuple[Target, LocalView]]]


async def _run(args: argparse.Namespace, progress: Callable[[str], None]) -> Report:
    if args.data_url is None:
        in_process: InProcess | None = args.in_process
        if in_process is None:
            raise DrillConfigError(
                "the in-process devstack is dev tooling and not installed here; give --data-url "
                "and --control-url of a deployment"
            )
        async with in_process() as (target, local):
            return await run_drill(target, local=local, clock=local.clock, progress=progress)
    return await run_drill(deployment_target(args), progress=progress)


def _cmd_drill(args: argparse.Namespace) -> int:
    if args.devstack and (args.data_url or args.control_url):
        print("memgov drill: --devstack runs its own stand-ins; leave out the URLs", file=sys.stderr)
        return EXIT_USAGE
    if (args.data_url is None) != (args.control_url is None):
        print("memgov drill: give both --data-url and --control-url, or neither (--devstack)", file=sys.stderr)
        return EXIT_USAGE
    out = sys.stderr if args.json else sys.stdout

    def progress(line: str) -> None:
        print(line, file=out, flush=True)

    try:
        report = asyncio.run(_run(args, progress))
    except DrillConfigError as exc:
        print(f"memgov drill: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TargetUnreachable as exc:
        print(f"memgov drill: the target did not answer ({exc})", file=sys.stderr)
        return EXIT_UNREACHABLE
    folder = write_bundle(report, args.output or default_folder())
    if args.json:
        print(json.dumps(report_json(report), indent=2, sort_keys=True))
    counts = ", ".join(f"{report.count(o)} {o.replace('_', ' ')}" for o in ("passed", "failed", "not_provable"))
    print(f"\n{counts}; evidence bundle: {folder}", file=out)
    return report.exit_code


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_command(sub, "drill", "Run the ADR acceptance proof and write an evidence bundle.", __doc__)
    p.add_argument("--devstack", action="store_true", help="Run against in-process stand-ins (the default).")
    target = p.add_argument_group("deployment")
    target.add_argument("--data-url", help="memgov data plane (the URL agents use as KAGENT_URL).")
    target.add_argument("--control-url", help="memgov control API.")
    target.add_argument("--ops-url", help="memgov operations listener (/readyz, /metrics); optional.")
    target.add_argument(
        "--kagent-url",
        help="kagent's controller as seen from here; probed to show it cannot be reached around memgov. Optional.",
    )
    target.add_argument(
        "--kagent-token-file",
        type=Path,
        help="A bearer kagent accepts, for kagent's --auth-mode=trusted-proxy (e.g. a token of "
        "the agent's service account); sent where the runtime and the bridge send theirs.",
    )
    target.add_argument(
        "--bridge-key-file", type=Path, help="The bridge's signing key (HS256 secret or PEM private key)."
    )
    target.add_argument("--operator-key-file", type=Path, help="The operator signing key.")
    target.add_argument("--session-key-file", type=Path, help="memgov's session-key secret (to act as the runtime).")
    target.add_argument(
        "--subject", help="Base MXID of the throwaway test subjects (default @drill-<random>:<server>)."
    )
    target.add_argument("--agent", action="append", default=[], help="Memory-enabled agent ns/name (repeat for two).")
    target.add_argument(
        "--ghost", action="append", default=[], help="MXID of that agent's Matrix ghost (one per --agent)."
    )
    target.add_argument(
        "--app-name", action="append", default=[], help="kagent app_name of that agent, if not derived."
    )
    target.add_argument("--room", help="Base room id !opaque:server of the throwaway control rooms.")
    target.add_argument("--server-name", help="The local homeserver name (matrix.server_name).")
    target.add_argument("--bridge-bot", help="MXID of the bridge bot (matrix.bridge_bot).")
    target.add_argument("--classification", help="Control-room classification (default: the pack's federation.yaml).")
    target.add_argument(
        "--policy-dir",
        type=Path,
        default=PACKAGED_POLICY_DIR,
        help="The deployment's policy pack, for its limits (default: the packaged pack).",
    )
    p.add_argument("--output", type=Path, help="Bundle folder (default ./evidence/drill-<UTC timestamp>/).")
    p.add_argument("--json", action="store_true", help="Also print drill.json on stdout (progress goes to stderr).")
    p.set_defaults(func=_cmd_drill, in_process=None)
