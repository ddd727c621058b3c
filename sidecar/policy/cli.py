"""``memgov policy check | test | schema``: tools for policy authors and reviewers."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from sidecar.policy import schema
from sidecar.policy.cases import CaseError
from sidecar.policy.check import check_pack
from sidecar.policy.opa_bundle import write_folder, write_tarball
from sidecar.policy.opa_server import OpaServer, ToolNotFound, start_opa
from sidecar.policy.pack import PackError, read_pack
from sidecar.policy.suite import render, run_suite
from sidecar.settings import SettingsError, load_settings


def _pack_dir(args: argparse.Namespace) -> Path:
    return Path(args.dir) if args.dir else load_settings().policy.dir


def _cmd_check(args: argparse.Namespace) -> int:
    try:
        root = _pack_dir(args)
    except SettingsError as exc:
        print(f"memgov: {exc}")
        return 2
    steps = check_pack(root)
    for step in steps:
        print(f"{'ok  ' if step.ok else 'FAIL'} {step.name}")
        if step.detail:
            print("     " + step.detail.replace("\n", "\n     "))
    return 0 if all(s.ok for s in steps) else 1


def _cmd_test(args: argparse.Namespace) -> int:
    try:
        root = _pack_dir(args)
        settings = load_settings().policy
    except SettingsError as exc:
        print(f"memgov: {exc}")
        return 2
    engines = ["cedar", "opa"] if args.engine == "all" else [args.engine]
    cases = Path(args.cases) if args.cases else root.parent / "policy-tests"
    server: OpaServer | None = None
    try:
        if "opa" in engines and not args.opa_url:
            server = start_opa(root)
        url = args.opa_url or (server.url if server else None)
        report = asyncio.run(run_suite(root, cases, engines, url, max(settings.opa_timeout_s, 2.0)))
    except (PackError, CaseError, ToolNotFound, OSError, RuntimeError) as exc:
        print(f"memgov policy test: {exc}")
        return 2
    finally:
        if server is not None:
            server.stop()
    print(render(report))
    return 0 if report.ok else 1


def _cmd_bundle(args: argparse.Namespace) -> int:
    try:
        pack = read_pack(_pack_dir(args))
        (write_tarball if args.out.endswith(".tar.gz") else write_folder)(pack, Path(args.out))
    except (SettingsError, PackError, OSError) as exc:
        print(f"memgov policy bundle: {exc}")
        return 2
    print(f"wrote {args.out} (revision {pack.revision})")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    if args.check:
        stale = schema.stale()
        for name in stale:
            print(f"stale: docs/schema/{name} (run `memgov policy schema`)")
        return 1 if stale else 0
    for path in schema.write():
        print(f"wrote {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``memgov policy …``."""
    p = sub.add_parser("policy", help="Check and test policy packs; export the decision schemas.")
    policy = p.add_subparsers(dest="policy_command", required=True, metavar="ACTION")

    check = policy.add_parser("check", help="Parse, validate against the schema, format-check and lint the pack.")
    check.add_argument("--dir", help="Policy pack folder (default: policy.dir from the configuration).")
    check.set_defaults(func=_cmd_check)

    test = policy.add_parser("test", help="Run the policy-tests case tables on one or both engines.")
    test.add_argument(
        "--engine", choices=("cedar", "opa", "all"), default="all", help="Engine(s) to run (default all)."
    )
    test.add_argument("--opa-url", help="OPA server to use; without it a local opa is started on loopback.")
    test.add_argument("--dir", help="Policy pack folder (default: policy.dir from the configuration).")
    test.add_argument("--cases", help="Case table folder (default: policy-tests/ beside the pack).")
    test.set_defaults(func=_cmd_test)

    bundle = policy.add_parser(
        "bundle", help="Write the pack as an OPA bundle (a folder, or a .tar.gz for a bundle server)."
    )
    bundle.add_argument("--dir", help="Policy pack folder (default: policy.dir from the configuration).")
    bundle.add_argument(
        "--out", required=True,
        help="Bundle folder to create or replace (never a mount point: it is renamed into place), or FILE.tar.gz.",
    )
    bundle.set_defaults(func=_cmd_bundle)

    sch = policy.add_parser("schema", help="Write the decision input/output JSON Schemas to docs/schema/.")
    sch.add_argument("--check", action="store_true", help="Only report whether docs/schema/ is current.")
    sch.set_defaults(func=_cmd_schema)
