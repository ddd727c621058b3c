"""Versioned schema migrations, applied on start and by ``memgov state migrate``.

Content-free by construction: every column is an integer, a boolean, a float, or a string with
a declared bound (PostgreSQL ``VARCHAR(n)``; SQLite ``STRICT`` tables with ``CHECK(length(...))``).
No column exists that could hold memory text, a query, a vector or a request body.

Safe when several processes start at once: the whole run is one transaction that first takes a
migration lock (PostgreSQL advisory lock; SQLite ``BEGIN IMMEDIATE``), then reads the applied
versions. DDL is transactional on both backends, so a crash leaves the previous version intact.

Rollback: each migration records ``compatible_from``, the oldest schema version whose binary still
runs correctly on the schema it leaves (the previous one for an additive change: a new table, a
new nullable column). A binary that finds applied versions it does not know runs only when every
one of them names a ``compatible_from`` no newer than its own latest version; otherwise it refuses
(:class:`~sidecar.state.types.SchemaMismatch`) and changes nothing. See docs/deploy.md.

Releases: :data:`RELEASES` records, for every package version, the schema version it runs on and a
digest of its migrations. tests/state/test_releases.py refuses a change of the migrations that no
new package version records, and any change of a migration an earlier version shipped
(docs/releases.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from sidecar.logs import get_logger
from sidecar.state import codec
from sidecar.state.codec import AGENT_MAX, CODE_MAX, ID_MAX, MODEL_MAX, MXID_MAX, PURPOSE_MAX, ROOM_MAX
from sidecar.state.db import DECLINED_SQLSTATE, STATEMENT_ERRORS, Database, Param, refusal_code
from sidecar.state.lanes import long_statements
from sidecar.state.types import MigrationFailed, SchemaMismatch

_log = get_logger("state")
#: Arbitrary constant naming memgov's migration lock among PostgreSQL advisory locks.
_PG_MIGRATION_LOCK = 0x6D656D676F76


@dataclass(frozen=True)
class Dialect:
    """Column spellings for one backend."""

    name: str

    @property
    def pg(self) -> bool:
        return self.name == "postgresql"

    def s(self, col: str, n: int, *, null: bool = False) -> str:
        """A string column of at most ``n`` characters."""
        nn = "" if null else " NOT NULL"
        if self.pg:
            return f"{col} VARCHAR({n}){nn}"
        return f"{col} TEXT{nn} CHECK (length({col}) <= {n})"

    def i(self, col: str, *, null: bool = False) -> str:
        """A 64-bit integer column (times are microseconds since the epoch)."""
        return f"{col} {'BIGINT' if self.pg else 'INTEGER'}{'' if null else ' NOT NULL'}"

    def b(self, col: str) -> str:
        """A boolean column."""
        return f"{col} BOOLEAN NOT NULL" if self.pg else f"{col} INTEGER NOT NULL CHECK ({col} IN (0, 1))"

    def f(self, col: str) -> str:
        """A double-precision column."""
        return f"{col} {'DOUBLE PRECISION' if self.pg else 'REAL'} NOT NULL"

    @property
    def strict(self) -> str:
        return "" if self.pg else " STRICT"

    def table(self, name: str, *cols: str, if_not_exists: bool = False) -> str:
        """A CREATE TABLE statement (STRICT on SQLite so declared types are enforced)."""
        head = "CREATE TABLE IF NOT EXISTS" if if_not_exists else "CREATE TABLE"
        return f"{head} {name} (\n  " + ",\n  ".join(cols) + f"\n){self.strict}"


def _v1(d: Dialect) -> list[str]:
    def sid() -> str:
        return d.s("scope_id", 25)  # "s" + 24 hex

    stmts = [
        d.table(
            "scopes",
            sid() + " PRIMARY KEY",
            d.s("principal_mxid", MXID_MAX),
            d.s("origin", 16),
            d.s("agent", AGENT_MAX),
            d.s("kind", 32),
            d.s("room_id", ROOM_MAX),
            d.b("enabled"),
            d.i("generation"),
            d.s("purpose", PURPOSE_MAX, null=True),
            d.s("policy_version", CODE_MAX, null=True),
            d.i("created_us"),
            d.i("updated_us"),
            d.i("consented_us", null=True),
            "UNIQUE (principal_mxid, origin, agent, kind, room_id)",
        ),
        "CREATE INDEX scopes_agent_enabled ON scopes (agent) WHERE enabled",
        d.table(
            "receipts",
            d.s("receipt_id", 25) + " PRIMARY KEY",
            sid() + " NOT NULL REFERENCES scopes (scope_id)",
            d.s("action", 8) + " CHECK (action IN ('grant', 'withdraw'))",
            d.s("purpose", PURPOSE_MAX),
            d.s("policy_version", CODE_MAX),
            d.i("generation_after"),
            d.i("at_us"),
        ),
        "CREATE INDEX receipts_scope ON receipts (scope_id, at_us)",
        d.table(
            # A row is a pending slot (entry_id and expires_us NULL, lease_us set) until filled.
            "ledger",
            d.s("slot_id", 25) + " PRIMARY KEY",
            sid() + " NOT NULL REFERENCES scopes (scope_id)",
            d.i("generation"),
            d.s("entry_id", ID_MAX, null=True) + " UNIQUE",
            d.i("created_us"),
            d.i("expires_us", null=True),
            d.i("lease_us", null=True),
            d.i("tombstoned_us", null=True),
            d.i("deleted_us", null=True),
            d.i("verified_us", null=True),
        ),
        "CREATE INDEX ledger_scope ON ledger (scope_id, created_us, entry_id)",
        "CREATE INDEX ledger_unswept ON ledger (expires_us) WHERE deleted_us IS NULL",
        d.table(
            "inflight",
            d.s("op_id", 25) + " PRIMARY KEY",
            sid() + " NOT NULL REFERENCES scopes (scope_id)",
            d.i("generation"),
            d.i("started_us"),
            d.i("lease_us"),
        ),
        "CREATE INDEX inflight_scope ON inflight (scope_id, lease_us)",
        d.table(
            # bkey is a SHA-256 of the caller's key; mark is a window end or counter expiry.
            "budgets",
            d.s("kind", 8),
            d.s("bkey", 64),
            d.f("level"),
            d.i("mark"),
            d.i("at_us"),
            d.i("expires_us"),
            "PRIMARY KEY (kind, bkey)",
        ),
        "CREATE INDEX budgets_expiry ON budgets (expires_us)",
        d.table("replay", d.s("jti_hash", 64) + " PRIMARY KEY", d.i("exp_us")),
        "CREATE INDEX replay_exp ON replay (exp_us)",
        d.table(
            "confirmations",
            d.s("token_hash", 64) + " PRIMARY KEY",
            sid(),
            d.s("subject", MXID_MAX),
            d.s("action", CODE_MAX),
            d.i("expires_us"),
        ),
        d.table(
            "audit",
            ("audit_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY" if d.pg else "audit_id INTEGER PRIMARY KEY"),
            d.i("at_us"),
            d.s("kind", CODE_MAX),
            d.s("reason", CODE_MAX),
            d.s("decision_id", ID_MAX, null=True),
            d.s("scope_id", 25, null=True),
            d.s("entry_id", ID_MAX, null=True),
            d.s("erasure_id", 25, null=True),
            d.s("operation", CODE_MAX, null=True),
            d.s("policy_revision", CODE_MAX, null=True),
        ),
        "CREATE INDEX audit_at ON audit (at_us)",
        "CREATE INDEX audit_scope ON audit (scope_id, at_us)",
        d.table(
            "erasures",
            d.s("erasure_id", 25) + " PRIMARY KEY",
            sid() + " NOT NULL REFERENCES scopes (scope_id)",
            d.s("kind", CODE_MAX),
            d.s("state", 16),
            d.s("adapter", CODE_MAX),
            d.s("requested_by_kind", CODE_MAX),
            d.s("failure_reason", CODE_MAX, null=True),
            d.i("created_us"),
            d.i("updated_us"),
        ),
        "CREATE INDEX erasures_unfinished ON erasures (created_us) WHERE state NOT IN ('verified', 'failed')",
        d.table(
            "erasure_entries",
            d.s("erasure_id", 25) + " NOT NULL REFERENCES erasures (erasure_id)",
            d.s("entry_id", ID_MAX),
            "PRIMARY KEY (erasure_id, entry_id)",
        ),
        d.table(
            "erasure_steps",
            d.s("erasure_id", 25) + " NOT NULL REFERENCES erasures (erasure_id)",
            d.i("seq"),
            d.s("state", 16),
            d.i("at_us"),
            "PRIMARY KEY (erasure_id, seq)",
        ),
    ]
    return stmts + (_pg_guards() if d.pg else _sqlite_guards())


# Receipts are append-only evidence; a ledger row's id, creation time and hard expiry never
# change once filled (R-9: expiry is never extended). The store never issues such updates;
# these triggers make the database itself refuse them.
_LEDGER_CHANGED = (
    "OLD.expires_us IS NOT NULL AND (NEW.expires_us IS DISTINCT FROM OLD.expires_us"
    " OR NEW.entry_id IS DISTINCT FROM OLD.entry_id OR NEW.created_us IS DISTINCT FROM OLD.created_us)"
)


def _pg_guards() -> list[str]:
    return [
        "CREATE FUNCTION memgov_refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$f$ BEGIN RAISE EXCEPTION 'memgov: % on % is refused', TG_OP, TG_TABLE_NAME; END $f$",
        "CREATE TRIGGER receipts_append_only BEFORE UPDATE OR DELETE ON receipts "
        "FOR EACH ROW EXECUTE FUNCTION memgov_refuse()",
        f"CREATE TRIGGER ledger_fill_once BEFORE UPDATE ON ledger FOR EACH ROW WHEN ({_LEDGER_CHANGED}) "
        "EXECUTE FUNCTION memgov_refuse()",
    ]


def _sqlite_guards() -> list[str]:
    changed = _LEDGER_CHANGED.replace("IS DISTINCT FROM", "IS NOT")
    return [
        "CREATE TRIGGER receipts_no_update BEFORE UPDATE ON receipts "
        "BEGIN SELECT RAISE(ABORT, 'memgov: receipts are append-only'); END",
        "CREATE TRIGGER receipts_no_delete BEFORE DELETE ON receipts "
        "BEGIN SELECT RAISE(ABORT, 'memgov: receipts are append-only'); END",
        f"CREATE TRIGGER ledger_fill_once BEFORE UPDATE ON ledger WHEN {changed} "
        "BEGIN SELECT RAISE(ABORT, 'memgov: filled ledger rows are immutable'); END",
    ]


@dataclass(frozen=True)
class Migration:
    """One schema version: its number, a short name, its statements per dialect, and the oldest
    schema version whose binary still runs on the result (``None``: only this one and newer)."""

    version: int
    name: str
    statements: Callable[[Dialect], list[str]]
    compatible_from: int | None = None

    @property
    def oldest_binary(self) -> int:
        return self.version if self.compatible_from is None else self.compatible_from


def _v2(d: Dialect) -> list[str]:
    """Storage namespaces (SPEC D2), unknown-outcome leases and re-checks (D4), refusal counts (R-15).

    Every scope's existing generations become ``legacy`` namespaces (empty salt, the unsalted
    ``mgs1.<scope>.<generation>`` key they were written under): the current one stays live until
    the scope's next generation change, the others are retired and swept like any other.
    """

    def ns(col: str, null: bool = False) -> str:
        return d.s(col, 25, null=null)  # "n" + 24 hex

    rand_id = (
        "'n' || substr(md5(random()::text || g.scope_id || g.g), 1, 24)"
        if d.pg
        else "'n' || lower(hex(randomblob(12)))"
    )
    gens = (
        "SELECT s.scope_id AS scope_id, gs AS g, s.generation AS top, s.enabled AS enabled"
        " FROM scopes s, generate_series(0, s.generation) gs"
        if d.pg
        else "WITH RECURSIVE gs(scope_id, g, top, enabled) AS (SELECT scope_id, 0, generation, enabled FROM scopes"
        " UNION ALL SELECT scope_id, g + 1, top, enabled FROM gs WHERE g < top)"
        " SELECT scope_id, g, top, enabled FROM gs"
    )
    live = "(g.g = g.top AND g.enabled)"
    return [
        d.table(
            "namespaces",
            ns("ns_id") + " PRIMARY KEY",
            d.s("scope_id", 25) + " NOT NULL REFERENCES scopes (scope_id)",
            d.i("generation"),
            d.s("salt", 32),
            d.s("state", 8) + " CHECK (state IN ('live', 'retired', 'cleared'))",
            d.i("possibly_until_us", null=True),
            d.i("created_us"),
            d.i("retired_us", null=True),
            d.i("cleared_us", null=True),
        ),
        "CREATE INDEX namespaces_scope ON namespaces (scope_id, created_us)",
        # SECURITY: at most one namespace of a scope is ever written to.
        "CREATE UNIQUE INDEX namespaces_live ON namespaces (scope_id) WHERE state = 'live'",
        "CREATE INDEX namespaces_retired ON namespaces (retired_us) WHERE state = 'retired'",
        f"ALTER TABLE ledger ADD COLUMN {ns('ns_id', null=True)}",
        f"ALTER TABLE inflight ADD COLUMN {ns('ns_id', null=True)}",
        f"ALTER TABLE erasures ADD COLUMN {d.i('not_before_us', null=True)}",
        d.table(
            # One read-back of one namespace during an erasure: what was found, never what was asked.
            "erasure_readbacks",
            d.s("erasure_id", 25) + " NOT NULL REFERENCES erasures (erasure_id)",
            d.i("seq"),
            ns("ns_id"),
            d.i("at_us"),
            d.i("remaining"),
            d.s("scope_of_check", 16),
            "PRIMARY KEY (erasure_id, seq)",
        ),
        d.table(
            # Refusals without a valid credential, counted per hour instead of one audit row each.
            "audit_counts",
            d.i("hour_us"),
            d.s("operation", CODE_MAX),
            d.s("reason", CODE_MAX),
            d.i("n"),
            "PRIMARY KEY (hour_us, operation, reason)",
        ),
        "INSERT INTO namespaces (ns_id, scope_id, generation, salt, state, created_us, retired_us)"
        f" SELECT {rand_id}, g.scope_id, g.g, '', CASE WHEN {live} THEN 'live' ELSE 'retired' END,"
        f" {_now_sql(d)}, CASE WHEN {live} THEN NULL ELSE {_now_sql(d)} END FROM ({gens}) g",
        "UPDATE ledger SET ns_id = (SELECT n.ns_id FROM namespaces n WHERE n.scope_id = ledger.scope_id"
        " AND n.generation = ledger.generation)",
        "UPDATE inflight SET ns_id = (SELECT n.ns_id FROM namespaces n WHERE n.scope_id = inflight.scope_id"
        " AND n.generation = inflight.generation)",
        "CREATE INDEX ledger_ns ON ledger (ns_id, entry_id)",
        "CREATE INDEX inflight_ns ON inflight (ns_id, lease_us)",
    ]


_NS_STATES = "('live', 'retired', 'cleared', 'staged')"


def _v3(d: Dialect) -> list[str]:
    """Namespace rotation (exact erasure over REST): staged namespaces, frozen live ones, moves, model facts.

    A ``staged`` namespace belongs to one rotation (``rotation_id``) and is never read or written
    by anything else; ``frozen_by`` marks a live namespace no save may write while a rotation
    copies it. SQLite cannot alter a CHECK constraint, so its ``namespaces`` table is rebuilt.
    """

    def ns(col: str, null: bool = False) -> str:
        return d.s(col, 25, null=null)

    cols = "ns_id, scope_id, generation, salt, state, possibly_until_us, created_us, retired_us, cleared_us"
    if d.pg:
        namespaces = [
            "ALTER TABLE namespaces DROP CONSTRAINT namespaces_state_check",
            f"ALTER TABLE namespaces ADD CONSTRAINT namespaces_state_check CHECK (state IN {_NS_STATES})",
            f"ALTER TABLE namespaces ADD COLUMN {d.s('frozen_by', 25, null=True)}",
            f"ALTER TABLE namespaces ADD COLUMN {d.s('rotation_id', 25, null=True)}",
            "ALTER TABLE inflight ADD COLUMN outcome_unknown BOOLEAN NOT NULL DEFAULT FALSE",
        ]
    else:
        namespaces = [
            d.table(
                "namespaces_v3",
                ns("ns_id") + " PRIMARY KEY",
                d.s("scope_id", 25) + " NOT NULL REFERENCES scopes (scope_id)",
                d.i("generation"),
                d.s("salt", 32),
                d.s("state", 8) + f" CHECK (state IN {_NS_STATES})",
                d.i("possibly_until_us", null=True),
                d.i("created_us"),
                d.i("retired_us", null=True),
                d.i("cleared_us", null=True),
                d.s("frozen_by", 25, null=True),
                d.s("rotation_id", 25, null=True),
            ),
            f"INSERT INTO namespaces_v3 ({cols}) SELECT {cols} FROM namespaces",
            "DROP TABLE namespaces",
            "ALTER TABLE namespaces_v3 RENAME TO namespaces",
            "CREATE INDEX namespaces_scope ON namespaces (scope_id, created_us)",
            "CREATE UNIQUE INDEX namespaces_live ON namespaces (scope_id) WHERE state = 'live'",
            "CREATE INDEX namespaces_retired ON namespaces (retired_us) WHERE state = 'retired'",
            "ALTER TABLE inflight ADD COLUMN outcome_unknown INTEGER NOT NULL DEFAULT 0"
            " CHECK (outcome_unknown IN (0, 1))",
        ]
    return [
        *namespaces,
        # SECURITY: at most one staged namespace per rotation, so a resumed copy can always find it.
        "CREATE UNIQUE INDEX namespaces_staged ON namespaces (rotation_id) WHERE state = 'staged'",
        "CREATE INDEX namespaces_frozen ON namespaces (frozen_by) WHERE frozen_by IS NOT NULL",
        # The sweeper's rotation candidates, found from the rows that need it, never by scanning scopes.
        "CREATE INDEX namespaces_legacy_live ON namespaces (scope_id) WHERE state = 'live' AND salt = ''",
        "CREATE INDEX ledger_tombstoned ON ledger (ns_id) WHERE tombstoned_us IS NOT NULL AND deleted_us IS NULL",
        f"ALTER TABLE erasures ADD COLUMN {ns('ns_id', null=True)}",
        d.table(
            # One entry a rotation copied: the old id, the new id (NULL when kagent no longer held the
            # row) and the original, never extended, hard expiry it keeps.
            "erasure_moves",
            d.s("erasure_id", 25) + " NOT NULL REFERENCES erasures (erasure_id)",
            d.s("old_entry_id", ID_MAX),
            d.s("new_entry_id", ID_MAX, null=True),
            ns("ns_id"),
            d.i("created_us"),
            d.i("expires_us"),
            "PRIMARY KEY (erasure_id, old_entry_id)",
        ),
        "CREATE INDEX erasure_moves_old ON erasure_moves (old_entry_id)",
        d.table(
            # What an agent's own embedding calls named: the model (a configuration fact, no content).
            "embedding_models",
            d.s("agent", AGENT_MAX) + " PRIMARY KEY",
            d.s("model", MODEL_MAX),
            d.i("dimensions", null=True),
            d.s("encoding_format", 8, null=True),
            d.i("seen_us"),
        ),
    ]


def _v4(d: Dialect) -> list[str]:
    """Who runs an erasure: one runner (a gateway process) at a time, for as long as it renews its lease."""
    return [
        f"ALTER TABLE erasures ADD COLUMN {d.s('runner', 25, null=True)}",
        f"ALTER TABLE erasures ADD COLUMN {d.i('runner_until_us', null=True)}",
    ]


def _v5(d: Dialect) -> list[str]:
    """Model facts learnt from embedding traffic are not trusted: rotation takes the model from configuration."""
    return ["DROP TABLE embedding_models"]


def _v6(d: Dialect) -> list[str]:
    """Bounded history: per-scope reads touch only rows still in play, and final rows can be compacted.

    Partial indexes hold a scope's entries not yet erased, its entries not yet physically deleted
    and its namespaces not yet cleared, so status, inspect, forget-one and admission never walk the
    scope's history. The evidence an erasure shows is kept on the erasure itself (each entry's
    stamps, each read-back's generation, a rotation's source namespace), so the ledger rows and
    cleared namespaces it was read from can be compacted once they are final.
    """
    flag = "legacy BOOLEAN" if d.pg else "legacy INTEGER CHECK (legacy IN (0, 1))"
    snapshot = [f"ALTER TABLE erasure_entries ADD COLUMN {col}" for col in _entry_snapshot(d)]
    return [
        "CREATE INDEX ledger_scope_held ON ledger (scope_id, created_us, entry_id)"
        " WHERE tombstoned_us IS NULL AND deleted_us IS NULL",
        "CREATE INDEX ledger_scope_unswept ON ledger (scope_id, ns_id) WHERE verified_us IS NULL",
        "CREATE INDEX ledger_final ON ledger (verified_us) WHERE deleted_us IS NOT NULL AND verified_us IS NOT NULL",
        "CREATE INDEX namespaces_open ON namespaces (scope_id, created_us) WHERE state <> 'cleared'",
        "CREATE INDEX namespaces_cleared ON namespaces (cleared_us) WHERE state = 'cleared'",
        "CREATE INDEX namespaces_rotation ON namespaces (rotation_id) WHERE rotation_id IS NOT NULL",
        "CREATE INDEX erasures_scope ON erasures (scope_id, created_us)",
        "CREATE INDEX erasures_scope_unfinished ON erasures (scope_id) WHERE state NOT IN ('verified', 'failed')",
        "CREATE INDEX erasure_entries_entry ON erasure_entries (entry_id)",
        *snapshot,
        f"ALTER TABLE erasure_readbacks ADD COLUMN {d.i('generation', null=True)}",
        f"ALTER TABLE erasure_readbacks ADD COLUMN {flag}",
        f"ALTER TABLE erasures ADD COLUMN {d.s('from_ns_id', 25, null=True)}",
        "CREATE INDEX ledger_scope_expiry ON ledger (scope_id, expires_us) WHERE tombstoned_us IS NULL"
        " AND deleted_us IS NULL",
        d.table(
            # A scope's ledger rows neither tombstoned nor deleted (slots included), and the filled ones among
            # them, kept by triggers: a save's cap check costs the same with 10 or 10,000 entries.
            "ledger_counts",
            d.s("scope_id", 25) + " PRIMARY KEY",
            d.i("open_rows"),
            d.i("open_filled"),
        ),
        "INSERT INTO ledger_counts (scope_id, open_rows, open_filled) SELECT scope_id, COUNT(*),"
        " SUM(CASE WHEN expires_us IS NOT NULL THEN 1 ELSE 0 END) FROM ledger"
        " WHERE tombstoned_us IS NULL AND deleted_us IS NULL GROUP BY scope_id",
        *(_pg_counters() if d.pg else _sqlite_counters()),
        "UPDATE erasure_readbacks SET (generation, legacy) = (SELECT n.generation, n.salt = ''"
        " FROM namespaces n WHERE n.ns_id = erasure_readbacks.ns_id)",
        "UPDATE erasures SET from_ns_id = (SELECT MIN(n.ns_id) FROM namespaces n"
        " WHERE n.frozen_by = erasures.erasure_id) WHERE kind = 'rotate'",
    ]


_OPEN = "{r}.tombstoned_us IS NULL AND {r}.deleted_us IS NULL"


def _pg_counters() -> list[str]:
    def delta(r: str, sign: str) -> str:
        return (
            f"IF {_OPEN.format(r=r)} THEN d_open := d_open {sign} 1;"
            f" IF {r}.expires_us IS NOT NULL THEN d_filled := d_filled {sign} 1; END IF; END IF;"
        )

    return [
        "CREATE FUNCTION memgov_ledger_count() RETURNS trigger LANGUAGE plpgsql AS $f$"
        " DECLARE d_open BIGINT := 0; d_filled BIGINT := 0; BEGIN"
        f" IF TG_OP <> 'INSERT' THEN {delta('OLD', '-')} END IF;"
        f" IF TG_OP <> 'DELETE' THEN {delta('NEW', '+')} END IF;"
        " IF d_open <> 0 OR d_filled <> 0 THEN"
        " INSERT INTO ledger_counts AS c (scope_id, open_rows, open_filled)"
        " VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.scope_id ELSE NEW.scope_id END, d_open, d_filled)"
        " ON CONFLICT (scope_id) DO UPDATE SET open_rows = c.open_rows + excluded.open_rows,"
        " open_filled = c.open_filled + excluded.open_filled; END IF; RETURN NULL; END $f$",
        "CREATE TRIGGER ledger_counted AFTER INSERT OR UPDATE OR DELETE ON ledger"
        " FOR EACH ROW EXECUTE FUNCTION memgov_ledger_count()",
    ]


def _sqlite_counters() -> list[str]:
    def counted(r: str) -> tuple[str, str]:
        return f"({_OPEN.format(r=r)})", f"({_OPEN.format(r=r)} AND {r}.expires_us IS NOT NULL)"

    def apply(sid: str, d_open: str, d_filled: str) -> str:
        return (
            f"INSERT OR IGNORE INTO ledger_counts (scope_id, open_rows, open_filled) VALUES ({sid}, 0, 0);"
            f" UPDATE ledger_counts SET open_rows = open_rows + {d_open}, open_filled = open_filled + {d_filled}"
            f" WHERE scope_id = {sid};"
        )

    (old_open, old_filled), (new_open, new_filled) = counted("OLD"), counted("NEW")
    return [
        f"CREATE TRIGGER ledger_count_insert AFTER INSERT ON ledger WHEN {new_open}"
        f" BEGIN {apply('NEW.scope_id', '1', new_filled)} END",
        f"CREATE TRIGGER ledger_count_delete AFTER DELETE ON ledger WHEN {old_open}"
        f" BEGIN {apply('OLD.scope_id', '-1', f'-{old_filled}')} END",
        "CREATE TRIGGER ledger_count_update AFTER UPDATE OF tombstoned_us, deleted_us, expires_us ON ledger"
        f" WHEN {old_open} <> {new_open} OR {old_filled} <> {new_filled}"
        f" BEGIN {apply('NEW.scope_id', f'{new_open} - {old_open}', f'{new_filled} - {old_filled}')} END",
    ]


def _entry_snapshot(d: Dialect) -> list[str]:
    """The ledger columns an erasure keeps of each of its entries once the ledger row is compacted."""
    return [
        d.i("generation", null=True),
        d.i("created_us", null=True),
        d.i("expires_us", null=True),
        d.i("tombstoned_us", null=True),
        d.i("deleted_us", null=True),
        d.i("verified_us", null=True),
        d.s("ns_id", 25, null=True),
    ]


def _v7(d: Dialect) -> list[str]:
    """Each migration names the oldest binary that still runs on its result, so a rolled-back one can tell."""
    return [f"ALTER TABLE schema_migrations ADD COLUMN {d.i('compatible_from', null=True)}"]


def _v8(d: Dialect) -> list[str]:
    """Audit spool segments already replayed: a segment whose process died before removing it lands once."""
    return [d.table("audit_spool_segments", d.s("segment_id", ID_MAX) + " PRIMARY KEY", d.i("replayed_us"))]


def _v9(d: Dialect) -> list[str]:
    """PostgreSQL: ``memgov_decline(n)`` lets a statement roll back its own implicit transaction.

    A request's budget claims call it when one does not fit, so the claims need no explicit
    transaction (its BEGIN and COMMIT were two round trips of a search's five). VOLATILE, so the
    planner never evaluates it ahead of the row that calls it.
    """
    if not d.pg:
        return []
    return [
        "CREATE OR REPLACE FUNCTION memgov_decline(detail INTEGER) RETURNS DOUBLE PRECISION"
        " LANGUAGE plpgsql VOLATILE AS $fn$ BEGIN"
        f" RAISE EXCEPTION USING ERRCODE = '{DECLINED_SQLSTATE}', MESSAGE = 'declined', DETAIL = detail::text;"
        " END $fn$"
    ]


def _v10(d: Dialect) -> list[str]:
    """Retries of failed erasures: each names the first failure of its chain, and a chain has at most one
    unfinished retry at a time (two replicas asked to retry the same failure start one)."""
    return [
        f"ALTER TABLE erasures ADD COLUMN {d.s('retry_of', 25, null=True)}",
        "CREATE UNIQUE INDEX erasures_retry_unfinished ON erasures (retry_of)"
        " WHERE retry_of IS NOT NULL AND state NOT IN ('verified', 'failed')",
        "CREATE INDEX erasures_retries ON erasures (retry_of) WHERE retry_of IS NOT NULL",
        "CREATE INDEX erasures_by_state ON erasures (state, created_us)",
    ]


#: From this version on, ``schema_migrations`` records each migration's ``compatible_from``.
_COMPAT_RECORDED = 7


def _now_sql(d: Dialect) -> str:
    """Microseconds since the epoch, computed by the database."""
    if d.pg:
        return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"
    return "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)"


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial_schema", _v1),
    Migration(2, "storage_namespaces", _v2),
    Migration(3, "namespace_rotation", _v3),
    Migration(4, "erasure_run_lease", _v4),
    Migration(5, "untrusted_model_facts_dropped", _v5),
    Migration(6, "bounded_history", _v6),
    Migration(7, "schema_compatibility", _v7, compatible_from=6),
    Migration(8, "audit_spool_segments", _v8, compatible_from=7),
    Migration(9, "declining_statements", _v9, compatible_from=8),
    Migration(10, "erasure_retries", _v10, compatible_from=9),
)
LATEST: int = MIGRATIONS[-1].version


def digest(migrations: tuple[Migration, ...]) -> str:
    """A SHA-256 of what these migrations do: each one's version, name, ``compatible_from`` and its
    statements on both backends. It changes with any edit that changes a schema."""
    h = hashlib.sha256()
    for m in migrations:
        h.update(f"{m.version}\0{m.name}\0{m.compatible_from}\0".encode())
        for dialect in ("postgresql", "sqlite"):
            for stmt in m.statements(Dialect(dialect)):
                h.update(stmt.encode() + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class Release:
    """One package version: the schema version it runs on and the digest of migrations 1..schema."""

    version: str
    schema: int
    migrations: str


#: Every package version, oldest first; the last one is this package's (pyproject.toml, the chart's
#: version and appVersion). A row is never edited once a newer one exists: a new schema needs a new
#: version, whose row is added here (docs/releases.md).
RELEASES: tuple[Release, ...] = (
    Release("0.1.0", 9, "cbadc7ccde08b8322f1030838a3fdbf05ab83ec1e136763a1fb2572211e11f61"),
    Release("0.2.0", 10, "54e5877a95f8d79bed996b9888aed8b5959f443c8a4d8a0bf2f3876b95b2eda3"),
)


@contextmanager
def _refusals(found: int, supported: int, *, migration: int) -> Iterator[None]:
    """A statement the store refused becomes MigrationFailed (the transaction then rolls the whole run
    back); a store that stopped answering stays a backend error, i.e. state_unavailable."""
    try:
        yield
    except STATEMENT_ERRORS as exc:
        code = refusal_code(exc)
        if code is None:
            raise
        raise MigrationFailed(found, supported, migration, code) from exc


async def migrate(db: Database, *, apply: bool = True, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Apply every pending migration; return how many were applied (0 when up to date).

    Raises SchemaMismatch, changing nothing, when a newer binary left the schema in a state this one
    cannot run on, or (``apply`` False: check only) when migrations are pending; MigrationFailed
    when the store refuses one of the statements (nothing of the run is applied).
    """
    dialect = Dialect(db.dialect)
    latest = migrations[-1].version
    # DDL on a large table may run far longer than a request's statement is allowed to.
    with long_statements():
        async with db.tx("write") as tx:
            if dialect.pg:
                await tx.execute("SELECT pg_advisory_xact_lock($1)", _PG_MIGRATION_LOCK)
            with _refusals(0, latest, migration=0):  # 0: the bookkeeping table itself
                await tx.execute(
                    dialect.table(
                        "schema_migrations",
                        dialect.i("version") + " PRIMARY KEY",
                        dialect.s("name", CODE_MAX),
                        dialect.i("applied_us"),
                        if_not_exists=True,
                    )
                )
            applied = {int(r[0]) for r in await tx.fetch("SELECT version FROM schema_migrations")}
            known = {m.version for m in migrations}
            if applied - known:
                # A newer binary migrated this database: run only where every change it made says we still can.
                rows = await tx.fetch(
                    "SELECT version, compatible_from FROM schema_migrations WHERE version > $1", latest
                )
                if any(r[1] is None or int(r[1]) > latest for r in rows) or min(applied - known) < latest:
                    raise SchemaMismatch(max(applied), latest)
                _log.warning("state.schema_newer", backend=db.dialect, schema_version=max(applied), supported=latest)
            pending = [m for m in migrations if m.version not in applied]
            if pending and not apply:
                raise SchemaMismatch(max(applied, default=0), latest)
            for m in pending:
                cols = "version, name, applied_us"
                args: list[Param] = [m.version, m.name, codec.to_us(datetime.now(UTC))]
                if m.version >= _COMPAT_RECORDED:
                    cols, args = cols + ", compatible_from", [*args, m.oldest_binary]
                marks = ", ".join(f"${i}" for i in range(1, len(args) + 1))
                with _refusals(max(applied, default=0), latest, migration=m.version):
                    for stmt in m.statements(dialect):
                        await tx.execute(stmt)
                    await tx.execute(f"INSERT INTO schema_migrations ({cols}) VALUES ({marks})", *args)
    if pending:
        _log.info("state.migrated", backend=db.dialect, count=len(pending), schema_version=latest)
    return len(pending)


async def schema_version(db: Database) -> int:
    """Return the highest applied migration version."""
    async with db.tx("read") as tx:
        row = await tx.fetchrow("SELECT MAX(version) FROM schema_migrations")
    return int(row[0]) if row and row[0] is not None else 0
