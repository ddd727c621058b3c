"""``memgov scope …`` and ``memgov erasures …``: a thin command-line client for every control API endpoint.

Human-readable output by default, the API's own JSON with ``--json``. The bearer token comes from
``--token`` or ``--token-file`` and is never printed; the only secret ever shown is the
confirmation token of ``forget-all``/``off``, which the user must type back. Exit codes: 0 done,
1 refused by the control API (4xx), 2 usage or local error, 3 the control API failed (5xx), 4 the
control API did not answer, 5 confirmation required (token printed, nothing erased).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import aiohttp
from pydantic import BaseModel

from sidecar.command import add_command
from sidecar.control import models as answers
from sidecar.control.client import Confirmed, ControlClient, ControlError
from sidecar.identity.tokens import control_room, load_signing_key, mint_context
from sidecar.policy.pack import load_federation
from sidecar.secretfile import SecretError, read_secret
from sidecar.settings import PACKAGED_POLICY_DIR, SettingsError, load_settings

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_SERVER, EXIT_UNREACHABLE, EXIT_CONFIRM = 0, 1, 2, 3, 4, 5


class UsageError(Exception):
    """A local problem (options, files); the message names the option, never a secret."""


def control_url(args: argparse.Namespace) -> str:
    """``--control-url``, else ``MEMGOV_CONTROL_URL``, else the configured control listener on loopback."""
    if args.control_url:
        return str(args.control_url).rstrip("/")
    if os.environ.get("MEMGOV_CONTROL_URL"):
        return os.environ["MEMGOV_CONTROL_URL"].rstrip("/")
    try:
        host, port = load_settings().listen.address("control")
    except SettingsError as exc:
        raise UsageError(f"--control-url not given and {exc}") from None
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"


def bearer_token(args: argparse.Namespace) -> str | None:
    """The caller's token from ``--token`` or ``--token-file`` (a subject token, or an operator token)."""
    if args.token_file is not None:
        try:
            return read_secret(args.token_file, "--token-file").decode()
        except SecretError as exc:
            raise UsageError(str(exc)) from None
    return str(args.token) if args.token else None


async def _contexts(args: argparse.Namespace, client: ControlClient, scope_id: str) -> AsyncGenerator[str, None]:
    """One fresh context per inspect page: read from ``--context-file`` or minted with ``--bridge-key-file``."""
    if args.context_file is not None:
        try:
            lines = [ln.strip() for ln in args.context_file.read_text().splitlines() if ln.strip()]
        except OSError as exc:
            raise UsageError(f"--context-file: cannot read the file ({exc.strerror})") from None
        for line in lines:
            yield line
        raise UsageError("--context-file: no context left for the next page (one line per page)")
    if args.bridge_key_file is None or not (args.server_name and args.bridge_bot and args.ghost):
        raise UsageError(
            "inspect needs --context-file, or --bridge-key-file with --server-name, --bridge-bot "
            "and --ghost to attest the control room"
        )
    try:
        key = load_signing_key(args.bridge_key_file, "--bridge-key-file")
    except SecretError as exc:
        raise UsageError(str(exc)) from None
    scope = await client.status(scope_id)
    classification = args.classification or load_federation(PACKAGED_POLICY_DIR).classification
    sub, bot, server = scope.principal.mxid, args.bridge_bot, args.server_name
    while True:
        yield mint_context(
            key.material,
            key.alg,
            sub=sub,
            origin=scope.principal.origin,
            agent=scope.agent,
            room_id=scope.scope.room_id,
            room=control_room([sub, bot, args.ghost], server),
            servers=[server],
            classification=classification,
            now=int(time.time()),
        )


async def _inspect(args: argparse.Namespace, client: ControlClient) -> answers.InspectPage:
    contexts = _contexts(args, client, args.scope_id)
    try:
        if args.all:
            entries = await client.inspect_all(args.scope_id, contexts, limit=args.limit)
            return answers.InspectPage(scope_id=args.scope_id, entries=entries, next_cursor=None)
        return await client.inspect(args.scope_id, await anext(contexts), cursor=args.cursor, limit=args.limit)
    finally:
        await contexts.aclose()


async def _erasure(args: argparse.Namespace, client: ControlClient) -> answers.ErasureRecord:
    if args.output is None:
        return await client.erasure(args.erasure_id)
    # Exported exactly as the server sent it (checked to be an erasure record).
    document = await client.erasure_document(args.erasure_id)
    args.output.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return answers.ErasureRecord.model_validate(document)


# --- human output ----------------------------------------------------------------------------
def _yn(value: object) -> str:
    return "yes" if value else "no"


def _printable(text: str) -> str:
    # SECURITY: stored text is user-influenced; control characters could drive the terminal.
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _because(reason: str | None) -> str:
    return f" ({reason})" if reason else ""


def _show_created(a: answers.ScopeCreated) -> str:
    return f"scope {a.scope_id}: enabled {_yn(a.enabled)}, generation {a.generation}"


def _show_status(a: answers.ScopeStatus) -> str:
    counts, last = a.entries, a.last_erasure
    consent = (
        f'purpose "{a.purpose}", policy {a.policy_version}, since {a.consented_at}' if a.consented_at else "never given"
    )
    erasure = f"adapter {a.erasure_adapter}; " + (
        f"last {last.kind} {last.erasure_id} {last.state} at {last.updated_at}" if last else "none yet"
    )
    rows = [
        ("scope", a.scope_id),
        ("principal", f"{a.principal.mxid} ({a.principal.origin})"),
        ("agent", a.agent),
        ("room", f"{a.scope.room_id} ({a.scope.kind})"),
        ("enabled", f"{_yn(a.enabled)}, generation {a.generation}"),
        ("consent", consent),
        (
            "entries",
            f"{counts.live} live of {counts.cap}, {counts.pending_physical_deletion} pending physical deletion",
        ),
        ("expiry", f"{a.hard_expiry_days} days after creation, never extended"),
        ("erasure", erasure),
    ]
    return "\n".join(f"{k:<10} {v}" for k, v in rows)


def _show_consent(a: answers.ConsentChange) -> str:
    lines = [f"scope {a.scope_id}: enabled {_yn(a.enabled)}, generation {a.generation}"]
    if r := a.receipt:
        lines.append(f"receipt {r.receipt_id}: {r.action} (policy {r.policy_version}) at {r.at}")
    if erasure := a.erasure:
        lines.append(_show_erasure(erasure))
    return "\n".join(lines)


def _show_page(a: answers.InspectPage) -> str:
    lines = [
        f"{e.id}  created {e.created_at}  expires {e.expires_at}\n    {_printable(e.text)}" for e in a.entries
    ] or ["no entries"]
    if a.next_cursor:
        lines.append(f"more entries: add --cursor {a.next_cursor}")
    return "\n".join(lines)


def _show_erasure(a: answers.ErasureRecord) -> str:
    text = (
        f"erasure {a.erasure_id} ({a.kind}): {a.state}; verification {a.verification.result}; "
        f"physical deletion {a.physical_deletion}\nnot reached: {', '.join(a.residuals)}"
    )
    if (rotation := a.rotated_by) is not None:
        text += f"\nrotation {rotation.erasure_id}: {rotation.state}{_because(rotation.failure_reason)}"
    return text


def _show_offboard(a: answers.OffboardResult) -> str:
    lines = [f"offboarding {'complete' if a.complete else 'INCOMPLETE'}: {len(a.scopes)} scope(s)"]
    lines += [
        f"  {s.scope_id} {s.agent}: erasure {s.erasure_id} {s.state}{_because(s.failure_reason)}, "
        f"physical deletion {s.physical_deletion}"
        for s in a.scopes
    ]
    return "\n".join(lines)


def _show_erasures(a: answers.ErasureList) -> str:
    if not a.erasures:
        return "no erasure matches"
    lines = []
    for e in a.erasures:
        line = f"{e.erasure_id} {e.scope_id} {e.kind} {e.state}{_because(e.failure_reason)} created {e.created_at}"
        if e.retry_of is not None:
            line += f", retry of {e.retry_of}"
        if e.superseded_by is not None:
            line += f", superseded by {e.superseded_by}"
        lines.append(line)
    if a.next_cursor is not None:
        lines.append(f"more: --cursor {a.next_cursor}")
    return "\n".join(lines)


async def _erasures(args: argparse.Namespace, client: ControlClient) -> answers.ErasureList:
    """One page, or with ``--all`` every page joined."""
    found: list[answers.ErasureListed] = []
    cursor = args.cursor
    while True:
        page = await client.erasures(
            state=args.state,
            kind=args.kind,
            scope=args.scope,
            since=args.since,
            until=args.until,
            superseded=False if args.open else None,
            cursor=cursor,
            limit=args.limit,
        )
        found.extend(page.erasures)
        cursor = page.next_cursor
        if not args.all or cursor is None:
            return answers.ErasureList(erasures=found, next_cursor=cursor)


def _show_refusal(exc: ControlError) -> str:
    verdict = "failed" if exc.status >= 500 else "refused"
    text = f"{verdict}: {exc.reason} (HTTP {exc.status}, decision {exc.decision_id or '-'})"
    return text + (f"; evidence at {exc.location}" if exc.location else "")


def _show_confirmation(a: answers.ConfirmationIssued, command: str, scope_id: str) -> str:
    what = "disable memory, then erase every entry" if command == "off" else "erase every entry, keep consent"
    return (
        f"Confirmation required to {what} of scope {scope_id}.\n"
        f"confirm token: {a.confirm_token} (single use, expires {a.expires_at})\n"
        f"to proceed: memgov scope {command} {scope_id} --confirm {a.confirm_token}"
    )


@dataclass(frozen=True)
class _Answer:
    """A command's answer: the API's answer (printed as JSON with ``--json``) and its human-readable form."""

    body: BaseModel
    human: Callable[[], str]
    #: A confirmation token was issued; nothing was erased.
    pending: bool = False


_T = TypeVar("_T", bound=BaseModel)
_Action = Callable[[argparse.Namespace, ControlClient], Awaitable[_Answer]]


def _shown(call: Callable[[argparse.Namespace, ControlClient], Awaitable[_T]], show: Callable[[_T], str]) -> _Action:
    async def run(args: argparse.Namespace, client: ControlClient) -> _Answer:
        answer = await call(args, client)
        return _Answer(answer, lambda: show(answer))

    return run


async def _confirmed(args: argparse.Namespace, client: ControlClient, action: Confirmed) -> _Answer:
    if args.yes:
        record = await client.confirm_and_run(args.scope_id, action)
    elif args.confirm is None:
        issued = await client.confirmed(args.scope_id, action)
        return _Answer(issued, lambda: _show_confirmation(issued, args.scope_command, args.scope_id), pending=True)
    else:
        record = await client.confirmed(args.scope_id, action, args.confirm)
    return _Answer(record, lambda: _show_erasure(record))


#: subcommand → the call, with its human-readable form
_ACTIONS: dict[str, _Action] = {
    "create": _shown(lambda a, c: c.create_scope(a.mxid, a.agent, a.room, origin=a.origin), _show_created),
    "status": _shown(lambda a, c: c.status(a.scope_id), _show_status),
    "consent": _shown(lambda a, c: c.grant(a.scope_id, a.purpose, a.policy_version), _show_consent),
    "withdraw": _shown(lambda a, c: c.withdraw(a.scope_id), _show_consent),
    "inspect": _shown(_inspect, _show_page),
    "forget": _shown(lambda a, c: c.forget(a.scope_id, a.entry_id), _show_erasure),
    "forget-all": lambda a, c: _confirmed(a, c, "forget-all"),
    "off": lambda a, c: _confirmed(a, c, "off"),
    "offboard": _shown(lambda a, c: c.offboard(a.mxid), _show_offboard),
    "erasure": _shown(_erasure, _show_erasure),
    "erasures list": _shown(_erasures, _show_erasures),
    "erasures retry": _shown(lambda a, c: c.retry_erasure(a.erasure_id), _show_erasure),
}


async def _call(args: argparse.Namespace, url: str, token: str | None) -> _Answer:
    async with ControlClient(url, token) as client:
        return await _ACTIONS[args.action](args, client)


def _fail(args: argparse.Namespace, code: int, message: str, body: Mapping[str, object]) -> int:
    if args.json:
        print(json.dumps(body, sort_keys=True))
    else:
        command = "erasures" if args.action.startswith("erasures ") else "scope"
        print(f"memgov {command}: {message}", file=sys.stderr)
    return code


def _cmd_scope(args: argparse.Namespace) -> int:
    try:
        url, token = control_url(args), bearer_token(args)
        answer = asyncio.run(_call(args, url, token))
    except UsageError as exc:
        return _fail(args, EXIT_USAGE, str(exc), {"error": "usage"})
    except ControlError as exc:
        body = {"error": exc.reason, "status": exc.status, "decision_id": exc.decision_id, "location": exc.location}
        code = EXIT_SERVER if exc.status >= 500 else EXIT_REFUSED
        return _fail(args, code, _show_refusal(exc), body)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return _fail(
            args,
            EXIT_UNREACHABLE,
            f"the control API at {url} did not answer ({type(exc).__name__})",
            {"error": "unreachable"},
        )
    if args.json:
        print(json.dumps(answer.body.model_dump(mode="json"), indent=2, sort_keys=True))
    else:
        print(answer.human())
        if not answer.pending and getattr(args, "output", None) is not None:
            print(f"evidence written to {args.output}")
    return EXIT_CONFIRM if answer.pending else EXIT_OK


# --- the command line ----------------------------------------------------------------------
def _globals(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Options every scope command takes, before or after the subcommand name."""
    default = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
    parser.add_argument(
        "--control-url",
        default=default(None),
        help="Control API base URL (default MEMGOV_CONTROL_URL, else the configured listener).",
    )
    token = parser.add_mutually_exclusive_group()
    token.add_argument(
        "--token", default=default(None), help="Bearer token (visible to other local users; prefer --token-file)."
    )
    token.add_argument("--token-file", type=Path, default=default(None), help="File holding the bearer token.")
    parser.add_argument("--json", action="store_true", default=default(False), help="Print the API's JSON answer.")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    scope = add_command(
        sub, "scope", "Call the control API: consent, inspect, forget, off, offboard, evidence.", __doc__
    )
    _globals(scope, suppress=False)
    scope.set_defaults(func=_cmd_scope)
    cmds = scope.add_subparsers(dest="scope_command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, *positionals: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = cmds.add_parser(name, help=help_text)
        p.set_defaults(action=name)
        _globals(p, suppress=True)
        for positional in positionals:
            p.add_argument(positional)
        return p

    p = add("create", "Create (or find) the scope of a subject, agent and control room.")
    p.add_argument("--mxid", required=True, help="The subject's complete MXID.")
    p.add_argument("--agent", required=True, help="Agent ns/name.")
    p.add_argument("--room", required=True, help="Control room id.")
    p.add_argument("--origin", default="native", help="Origin kind of the MXID (default native).")
    add("status", "Show consent, counts, limits and the last erasure.", "scope_id")
    p = add("consent", "Give explicit, versioned consent.", "scope_id")
    p.add_argument("--purpose", required=True, help="What the memory is for, as shown to the subject.")
    p.add_argument("--policy-version", required=True, help="Version of the policy text agreed to.")
    add("withdraw", "Withdraw consent (disable, then erase everything).", "scope_id")
    p = add("inspect", "Show stored entries (needs a fresh attested context per page).", "scope_id")
    p.add_argument("--all", action="store_true", help="Every page.")
    p.add_argument("--limit", type=int, help="Entries per page (1-50).")
    p.add_argument("--cursor", help="Start after this entry (from the previous page).")
    p.add_argument("--context-file", type=Path, help="Signed contexts from the bridge, one per line and page.")
    p.add_argument("--bridge-key-file", type=Path, help="Test setups: mint contexts with the bridge's key.")
    p.add_argument("--server-name", help="Test setups: the local homeserver the room attests.")
    p.add_argument("--bridge-bot", help="Test setups: the bridge bot in the room.")
    p.add_argument("--ghost", help="Test setups: the agent's ghost in the room.")
    p.add_argument("--classification", help="Test setups: the room's classification (default the pack's).")
    add("forget", "Erase exactly one entry, verified.", "scope_id", "entry_id")
    for name, what in (
        ("forget-all", "Erase every entry, keeping consent."),
        ("off", "Disable memory, then erase every entry."),
    ):
        p = add(name, what + " Asks for confirmation.", "scope_id")
        choice = p.add_mutually_exclusive_group()
        choice.add_argument("--confirm", help="The confirmation token printed by the first call.")
        choice.add_argument("--yes", action="store_true", help="Request and use a confirmation token at once.")
    add("offboard", "Operator: disable, erase and verify every scope of one MXID.", "mxid")
    p = add("erasure", "Fetch the content-free evidence record of an erasure.", "erasure_id")
    p.add_argument("--output", type=Path, help="Also write the record to this JSON file.")
    _register_erasures(sub)


def _register_erasures(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    erasures = sub.add_parser(
        "erasures",
        help="Operator: list erasures (content-free) and retry a failed one.",
        description="Operator commands of the control API (an operator token). Exit codes as for memgov scope.",
    )
    _globals(erasures, suppress=False)
    erasures.set_defaults(func=_cmd_scope)
    cmds = erasures.add_subparsers(dest="erasures_command", required=True, metavar="COMMAND")
    p = cmds.add_parser("list", help="Erasures by state, kind, scope and creation time, newest first.")
    p.set_defaults(action="erasures list")
    _globals(p, suppress=True)
    p.add_argument("--state", help="requested, fenced, quiesced, deleted, verified or failed.")
    p.add_argument("--kind", help="forget_one, forget_all, off, withdraw, offboard or rotate.")
    p.add_argument("--scope", help="Only erasures of this scope id.")
    p.add_argument("--since", help="Created at or after this RFC 3339 time (e.g. 2026-01-31T00:00:00Z).")
    p.add_argument("--until", help="Created before this RFC 3339 time.")
    p.add_argument(
        "--open", action="store_true", help="Leave out failures a later verified erasure covers (what alerts count)."
    )
    p.add_argument("--limit", type=int, help="Erasures per page (1-50).")
    p.add_argument("--cursor", help="Start after this cursor (from the previous page).")
    p.add_argument("--all", action="store_true", help="Every page.")
    p = cmds.add_parser("retry", help="Run a failed erasure again; prints the retry's evidence summary.")
    p.set_defaults(action="erasures retry")
    _globals(p, suppress=True)
    p.add_argument("erasure_id")
