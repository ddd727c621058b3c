"""``memgov policy check | fmt | test | prove | explain | diff | revision | bundle | schema``: authoring tools."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from pydantic import ValidationError

from sidecar.policy import fmt, prove, schema, why
from sidecar.policy.cases import CaseError
from sidecar.policy.check import check_pack
from sidecar.policy.opa_bundle import write_folder, write_tarball
from sidecar.policy.opa_server import OpaServer, ToolNotFound, start_opa
from sidecar.policy.pack import PackError, fingerprint, read_pack
from sidecar.policy.review import diff, explain, find_case, read_input, render_diff
from sidecar.policy.suite import load, render, run_suite
from sidecar.settings import SettingsError, load_settings

#: What the authoring commands can fail on without it being a bug: each prints one line, no traceback.
_EXPECTED = (PackError, CaseError, ToolNotFound, OSError, ValueError, ValidationError, SettingsError)


def _pack_dir(args: argparse.Namespace) -> Path:
    return Path(args.dir) if args.dir else load_settings().policy.dir


def _cases(args: argparse.Namespace, root: Path) -> Path:
    """``--cases`` (a folder or one table), else ``policy-tests/`` beside the pack, else in the working folder."""
    if args.cases:
        return Path(args.cases)
    tried = [root.resolve().parent / "policy-tests", Path.cwd() / "policy-tests"]
    for folder in tried:
        if (folder / "base.yaml").is_file():
            return folder
    raise CaseError("no case tables found in " + " or ".join(map(str, tried)) + ": pass --cases FOLDER|FILE")


def _fail(command: str, exc: BaseException) -> int:
    print(f"memgov policy {command}: {exc}")
    return 2


def _configured_agents() -> list[str] | None:
    """The agents the gateway configuration names, or None when there is no usable configuration."""
    try:
        return list(load_settings().agents)
    except SettingsError:
        return None


def _cmd_check(args: argparse.Namespace) -> int:
    try:
        steps = check_pack(_pack_dir(args), _configured_agents())
    except _EXPECTED as exc:
        return _fail("check", exc)
    for step in steps:
        marks = {"fail": "FAIL", "skip": "SKIP", "warn": "warn", "ok": "ok  "}
        mark = "FAIL" if step.skipped and args.require_tools else marks[step.status]
        print(f"{mark} {step.name}")
        if step.detail:
            print("     " + step.detail.replace("\n", "\n     "))
    skipped = [s.name for s in steps if s.skipped]
    if skipped:
        print(
            f"{len(skipped)} check(s) not run for want of a tool"
            + (": --require-tools makes that a failure" if not args.require_tools else "")
        )
    return 0 if all(s.ok for s in steps) and not (skipped and args.require_tools) else 1


def _cmd_fmt(args: argparse.Namespace) -> int:
    try:
        root = _pack_dir(args)
        if args.write:
            for name in fmt.write(root):
                print(f"formatted {name}")
            return 0
        found = fmt.cedar_unformatted(root) + fmt.rego_unformatted(root)
    except _EXPECTED as exc:
        return _fail("fmt", exc)
    for item in found:
        print(item.diff.rstrip() if args.diff else item.file)
    if found and not args.diff:
        print(fmt.FIX_HINT)
    return 1 if found else 0


def _cmd_test(args: argparse.Namespace) -> int:
    engines = ["cedar", "opa"] if args.engine == "all" else [args.engine]
    server: OpaServer | None = None
    try:
        root = _pack_dir(args)
        cases = _cases(args, root)
        timeout = max(load_settings().policy.opa_timeout_s, 2.0)
        if args.opa_url is None and args.server and "opa" in engines:
            server = start_opa(root)
        url = args.opa_url or (server.url if server else None)
        report = asyncio.run(run_suite(root, cases, engines, url, timeout, args.select))
    except _EXPECTED as exc:
        return _fail("test", exc)
    finally:
        if server is not None:
            server.stop()
    print(render(report, cases))
    return 0 if report.ok else 1


def _cmd_prove(args: argparse.Namespace) -> int:
    try:
        root = _pack_dir(args)
        props = prove.load_properties(root)
        pack = load(root)
        results, findings = asyncio.run(prove.prove(pack, props))
        files = prove.write_counterexamples(findings, Path(args.out)) if args.out else {}
    except _EXPECTED as exc:
        return _fail("prove", exc)
    print(f"prove {root} (revision {pack.revision})")
    print(prove.render_proof(props, results, findings, files))
    return 0 if all(v.proved for v in results) else 1


def _cmd_explain(args: argparse.Namespace) -> int:
    try:
        root = _pack_dir(args)
        if args.input:
            inp, label = read_input(Path(args.input)), args.input
        else:
            inp, label = find_case(root, _cases(args, root), args.case)
        print(asyncio.run(explain(root, inp, label)))
        if args.rule:
            pack = load(root)
            print(f"rule {args.rule}, condition by condition:")
            print("\n".join(why.cedar_conditions(pack, inp, args.rule) + why.rego_conditions(pack, inp, args.rule)))
    except _EXPECTED as exc:
        return _fail("explain", exc)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    try:
        old, new = Path(args.old), Path(args.new)
        cases = _cases(args, new)
        beside_old = old.resolve().parent / "policy-tests"
        old_cases = Path(args.old_cases) if args.old_cases else beside_old if beside_old.is_dir() else None
        report = asyncio.run(diff(old, new, cases, old_cases))
        semantic = ""
        changed = 0
        if args.semantic:
            props = prove.load_properties(new) if (new / prove.PROPERTIES_FILE).is_file() else prove.Properties()
            results, findings = asyncio.run(prove.semantic_diff(load(old), load(new), props))
            semantic = prove.render_semantic(results, findings)
            changed = sum(1 for v in results if not v.proved)
    except _EXPECTED as exc:
        return _fail("diff", exc)
    if semantic:
        print(f"semantic diff {old} -> {new} (Cedar, every request the new pack's data admits):")
        print(semantic)
    print(render_diff(report, old, new))
    return 1 if (report.changes or changed) and args.exit_code else 0


def _cmd_bundle(args: argparse.Namespace) -> int:
    try:
        pack = read_pack(_pack_dir(args))
        (write_tarball if args.out.endswith(".tar.gz") else write_folder)(pack, Path(args.out))
    except _EXPECTED as exc:
        return _fail("bundle", exc)
    print(f"wrote {args.out} (revision {pack.revision})")
    return 0


def _cmd_revision(args: argparse.Namespace) -> int:
    try:
        print(fingerprint(Path(args.pack)))
    except _EXPECTED as exc:
        return _fail("revision", exc)
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


def _dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", help="Policy pack folder (default: policy.dir from the configuration).")


def _case_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cases", help="Case tables: a folder, or one table file (default: policy-tests/ beside the pack).")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memgov policy …``."""
    p = sub.add_parser("policy", help="Check, format, test, explain and compare policy packs; export the schemas.")
    policy = p.add_subparsers(dest="policy_command", required=True, metavar="ACTION")

    check = policy.add_parser(
        "check", help="Both languages: parse, validate, format, rule codes, opa check/test, regal."
    )
    _dir(check)
    check.add_argument(
        "--require-tools",
        action="store_true",
        help="Fail when opa or regal is missing, instead of skipping their checks (CI).",
    )
    check.set_defaults(func=_cmd_check)

    fmt_ = policy.add_parser("fmt", help="Format Cedar and Rego files (default: list the files that need it).")
    _dir(fmt_)
    mode = fmt_.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="List unformatted files; exit 1 if any (the default).")
    mode.add_argument("--diff", action="store_true", help="Print what formatting would change; exit 1 if anything.")
    mode.add_argument("--write", action="store_true", help="Rewrite the files in place.")
    fmt_.set_defaults(func=_cmd_fmt)

    test = policy.add_parser("test", help="Case tables on both engines: coverage per code and rule, differential run.")
    test.add_argument(
        "--engine", choices=("cedar", "opa", "all"), default="all", help="Engine(s) to run (default all)."
    )
    test.add_argument("--opa-url", help="Decide Rego on this OPA server instead of `opa eval` (coverage still local).")
    test.add_argument("--server", action="store_true", help="Decide Rego on a throwaway local OPA server.")
    test.add_argument(
        "-k",
        "--case",
        dest="select",
        action="append",
        default=[],
        metavar="NAME",
        help="Only cases whose name is NAME or whose file::name contains it (repeatable).",
    )
    _dir(test)
    _case_args(test)
    test.set_defaults(func=_cmd_test)

    prv = policy.add_parser(
        "prove", help="Prove properties.yaml and never-errors for every request (Cedar symbolic compiler)."
    )
    prv.add_argument("--out", help="Write each counterexample as a decision input file into this folder.")
    _dir(prv)
    prv.set_defaults(func=_cmd_prove)

    exp = policy.add_parser("explain", help="One input on both engines: rules that decided, Rego trace, the floor.")
    which = exp.add_mutually_exclusive_group(required=True)
    which.add_argument("--case", help="A case by name (or a unique part of file::name).")
    which.add_argument("--input", help="A decision input as a JSON or YAML file.")
    exp.add_argument(
        "--rule", metavar="CODE", help="Also show each condition of the rules answering CODE, both languages."
    )
    _dir(exp)
    _case_args(exp)
    exp.set_defaults(func=_cmd_explain)

    dif = policy.add_parser("diff", help="Every case and mutated input whose decision changes between two packs.")
    dif.add_argument("old", help="The pack before the change.")
    dif.add_argument("new", help="The pack after the change.")
    dif.add_argument(
        "--old-cases",
        help="The old pack's tables, also decided (default: policy-tests/ beside OLD when there is one).",
    )
    dif.add_argument("--exit-code", action="store_true", help="Exit 1 when a decision changes.")
    dif.add_argument(
        "--semantic",
        action="store_true",
        help="Also prove, per action, that the Cedar packs decide every request alike, or show one they do not.",
    )
    _case_args(dif)
    dif.set_defaults(func=_cmd_diff)

    rev = policy.add_parser("revision", help="Print a pack folder's revision, to compare with /readyz.")
    rev.add_argument("pack", help="Policy pack folder.")
    rev.set_defaults(func=_cmd_revision)

    bundle = policy.add_parser(
        "bundle", help="Write the pack as an OPA bundle (a folder, or a .tar.gz for a bundle server)."
    )
    _dir(bundle)
    bundle.add_argument(
        "--out",
        required=True,
        help="Bundle folder to create or replace (never a mount point: it is renamed into place), or FILE.tar.gz.",
    )
    bundle.set_defaults(func=_cmd_bundle)

    sch = policy.add_parser("schema", help="Write the decision input/output JSON Schemas to docs/schema/.")
    sch.add_argument("--check", action="store_true", help="Only report whether docs/schema/ is current.")
    sch.set_defaults(func=_cmd_schema)
