"""``memgov state migrate | check | stats | purge-audit``: operate the configured state store.

``migrate`` and ``check`` speak JSON log lines only (they run as the chart's hook Jobs: migrate
before install and upgrade, check before a rollback). ``check`` changes nothing: it says whether
this release runs on the store's schema as it is, without migrating (as a gateway with
``state.auto_migrate: false`` would find it). Exit codes, the same as ``memgov serve``'s:

  0  the schema is one this release runs on (migrate: after applying what was pending)
  1  the store does not answer (``state.migrate_failed`` / ``state.check_failed``, reason code)
  2  a configuration error
  3  the schema is outside this release's window: migrated by a newer release that does not name
     this one compatible (``state.schema_unknown``), or, for check, not migrated to this release yet
     (``state.schema_not_migrated``)
  4  the store refused a migration statement (``state.migration_failed`` with the migration's
     version and the backend's error code); nothing of the run was applied
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta

from sidecar.logs import configure_logging, get_logger
from sidecar.secretfile import SecretError
from sidecar.settings import SettingsError, load_settings
from sidecar.state.db import connect
from sidecar.state.migrations import LATEST, migrate, schema_version
from sidecar.state.store import StateStore, open_store
from sidecar.state.types import SchemaMismatch, StateError

_log = get_logger("state")


def _run(action: Callable[[str], Coroutine[object, None, int]]) -> int:
    try:
        url = load_settings().state_url()
    except (SettingsError, SecretError) as exc:
        print(f"memgov: {exc}")
        return 2
    try:
        return asyncio.run(action(url))
    except StateError as exc:
        print(f"memgov state: {exc.reason.value}")
        return 1


async def _with_store(url: str, body: Callable[[StateStore], Awaitable[int]]) -> int:
    store = await open_store(url)
    try:
        return await body(store)
    finally:
        await store.close()


async def _migrate(url: str) -> int:
    db = await connect(url)
    try:
        applied = await migrate(db)
    finally:
        await db.close()
    _log.info("state.schema_current", backend=db.dialect, schema_version=LATEST, count=applied)
    return 0


async def _check(url: str) -> int:
    db = await connect(url)
    try:
        await migrate(db, apply=False)
        found = await schema_version(db)
    finally:
        await db.close()
    _log.info("state.schema_compatible", backend=db.dialect, schema_version=found, supported=LATEST)
    return 0


def _schema_command(run: Callable[[str], Coroutine[object, None, int]], failed: str) -> int:
    """Run ``migrate`` or ``check`` with JSON lines only, mapping each outcome to its exit code."""
    configure_logging()
    try:
        url = load_settings().state_url()
    except (SettingsError, SecretError) as exc:
        _log.error(failed, error_type=type(exc).__name__)
        return 2
    try:
        return asyncio.run(run(url))
    except StateError as exc:
        _log.error(failed, reason=exc.reason.value)
        return 1
    except SchemaMismatch as exc:  # MigrationFailed included: its own event, fields and exit code
        _log.error(exc.event, **exc.fields())
        return exc.EXIT_CODE


def _cmd_migrate(args: argparse.Namespace) -> int:
    return _schema_command(_migrate, "state.migrate_failed")


def _cmd_check(args: argparse.Namespace) -> int:
    return _schema_command(_check, "state.check_failed")


def _cmd_stats(args: argparse.Namespace) -> int:
    async def body(store: StateStore) -> int:
        stats = await store.stats()
        if args.json:
            print(json.dumps({"backend": store.backend, **stats}, sort_keys=True))
        else:
            print(f"backend: {store.backend}")
            width = max(len(k) for k in stats)
            for key, value in stats.items():
                print(f"{key:<{width}}  {value}")
        return 0

    return _run(lambda url: _with_store(url, body))


def _cmd_purge_audit(args: argparse.Namespace) -> int:
    if args.older_than_days is None:
        try:
            args.older_than_days = load_settings().audit.retention_days
        except SettingsError as exc:
            print(f"memgov: {exc}")
            return 2
    cutoff = datetime.now(UTC) - timedelta(days=args.older_than_days)

    async def body(store: StateStore) -> int:
        purged = await store.audit_log.purge_audit(cutoff)
        print(f"purged {purged} audit record(s) older than {args.older_than_days} day(s)")
        return 0

    return _run(lambda url: _with_store(url, body))


def _days(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``memgov state …``."""
    p = sub.add_parser("state", help="Migrate the state store, show its counts, purge old audit records.")
    state = p.add_subparsers(dest="state_command", required=True, metavar="ACTION")
    state.add_parser("migrate", help="Apply pending schema migrations (also done on every start).").set_defaults(
        func=_cmd_migrate
    )
    state.add_parser(
        "check", help="Say whether this release runs on the schema as it is; change nothing (exit 0 or 3)."
    ).set_defaults(func=_cmd_check)
    stats = state.add_parser("stats", help="Row counts per record kind (counts only, no ids).")
    stats.add_argument("--json", action="store_true", help="Print one JSON object.")
    stats.set_defaults(func=_cmd_stats)
    purge = state.add_parser("purge-audit", help="Delete audit records older than the retention window.")
    purge.add_argument(
        "--older-than-days",
        type=_days,
        default=None,
        help="Retention window in days (default: audit.retention_days, 90).",
    )
    purge.set_defaults(func=_cmd_purge_audit)
