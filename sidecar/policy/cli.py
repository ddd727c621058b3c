"""``memgov policy check | fmt | test | prove | explain | diff | revision | bundle | schema``: authoring tools."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from sidecar.policy import fmt, prove, reports, schema, why
from sidecar.policy.cases import CaseError, load_bases, load_cases
from sidecar.policy.check import check_pack
from sidecar.policy.opa_bundle import write_folder, write_tarball
from sidecar.policy.opa_server import OpaServer, ToolNotFound, start_opa
from sidecar.policy.pack import Pack, PackError, fingerprint, read_pack
from sidecar.policy.properties import NEVER_ERRORS, Properties, load_properties, properties_or_none
from sidecar.policy.review import diff, explain, find_case, read_input
from sidecar.policy.semantic import semantic_diff
from sidecar.policy.suite import load, run_suite
from sidecar.settings import SettingsError, load_settings

_R = TypeVar("_R")

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
    render = {
        "text": reports.check_text,
        "json": reports.check_json,
        "markdown": reports.check_markdown,
        "sarif": reports.check_sarif,
    }[args.format]
    print(render(steps, args.require_tools))
    return 0 if reports.check_ok(steps, args.require_tools) else 1


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
    _print(args, lambda: reports.test_text(report, cases), reports.test_json, reports.test_markdown, report)
    return 0 if report.ok else 1


def _print(
    args: argparse.Namespace,
    text: Callable[[], str],
    as_json: Callable[[_R], str],
    as_markdown: Callable[[_R], str],
    report: _R,
) -> None:
    """The report in the format ``--format`` asks for."""
    print(as_json(report) if args.format == "json" else as_markdown(report) if args.format == "markdown" else text())


def _tables(args: argparse.Namespace, root: Path, pack: Pack) -> prove.Tables:
    """The bases and rows a counterexample is reduced towards (none when no tables are found)."""
    try:
        cases = _cases(args, root)
    except CaseError:
        return prove.Tables()
    folder = cases if cases.is_dir() else cases.parent
    return prove.Tables(load_bases(folder, pack), load_cases(cases, pack))


def _cmd_prove(args: argparse.Namespace) -> int:
    try:
        root = _pack_dir(args)
        props = load_properties(root)
        pack = load(root)
        baseline = load_properties(Path(args.baseline)) if args.baseline else None
        unknown = [n for n in args.property if not props.named(n) and n != NEVER_ERRORS]
        if unknown:
            raise ValueError(f"--property {', '.join(unknown)}: no such property in {root / 'properties.yaml'}")
        tables = _tables(args, root, pack)
        report = asyncio.run(prove.prove(pack, props, tables, baseline=baseline, only=args.property))
        if args.out:
            prove.write_counterexamples(report, Path(args.out))
    except _EXPECTED as exc:
        return _fail("prove", exc)
    _print(args, lambda: reports.prove_text(report, root), reports.prove_json, reports.prove_markdown, report)
    return 0 if report.ok else 1


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
        semantic = None
        if args.semantic:
            props = properties_or_none(new) or Properties()
            new_pack = load(new)
            tables = _tables(args, new, new_pack)
            semantic = asyncio.run(semantic_diff(load(old), new_pack, props, tables))
    except _EXPECTED as exc:
        return _fail("diff", exc)
    only = args.loosening_only
    view = reports.DiffView(report, old, new, semantic, loosening_only=only)
    if args.format == "json":
        print(reports.diff_json(view))
    elif args.format == "markdown":
        print(reports.diff_markdown(view))
    else:
        print(reports.diff_text(view))
    if not args.exit_code:
        return 0
    found = reports.loosens(report, semantic) if only else reports.changes_anything(report, semantic)
    return 1 if found else 0


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


def _format(p: argparse.ArgumentParser, *, sarif: bool = False) -> None:
    choices = (*reports.FORMATS, "sarif") if sarif else reports.FORMATS
    p.add_argument(
        "--format",
        choices=choices,
        default="text",
        help="text (default), json, markdown (a pull-request comment)" + (", or sarif" if sarif else "") + ".",
    )


def _names(p: argparse.ArgumentParser, *flags: str, dest: str | None = None, help: str) -> None:
    """A repeatable ``NAME`` option that narrows what runs (empty: everything)."""
    p.add_argument(*flags, dest=dest, action="append", default=[], metavar="NAME", help=help)


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
    _format(check, sarif=True)
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
    _names(
        test,
        "-k",
        "--case",
        dest="select",
        help="Only cases whose name is NAME or whose file::name contains it (repeatable).",
    )
    _dir(test)
    _case_args(test)
    _format(test)
    test.set_defaults(func=_cmd_test)

    prv = policy.add_parser(
        "prove", help="Prove properties.yaml and never-errors for every request (Cedar symbolic compiler)."
    )
    prv.add_argument("--out", help="Write each property's counterexample as OUT/<property>.yaml (a decision input).")
    prv.add_argument(
        "--baseline",
        metavar="OLD_DIR",
        help="Also prove OLD_DIR/properties.yaml's properties that this pack's file dropped or changed.",
    )
    _names(prv, "--property", help="Prove only this property (repeatable; never-errors is one too).")
    _dir(prv)
    _case_args(prv)
    _format(prv)
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
    dif.add_argument(
        "--exit-code",
        action="store_true",
        help="Exit 1 when a decision, a property or the data changes (with --loosening-only: when anything loosens).",
    )
    dif.add_argument(
        "--loosening-only",
        action="store_true",
        help="Show only what admits more than before: loosened decisions, looser contract changes.",
    )
    _format(dif)
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
