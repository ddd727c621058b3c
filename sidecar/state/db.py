"""One small transaction interface over asyncpg (PostgreSQL) and aiosqlite (SQLite).

Statements are written once, in PostgreSQL's ``$1`` placeholder style; for SQLite they are
rewritten to its numbered ``?1`` form. The few places where the dialects differ (row locks,
DDL types) ask :attr:`Tx.dialect`. Backend failures become ``StateError(state_unavailable)``.

Transaction modes:
  ``read``      one or more independent statements, no transaction (the fast lookup path);
  ``snapshot``  several reads that must agree with each other;
  ``write``     a read-write transaction; on SQLite ``BEGIN IMMEDIATE`` so writers queue on the
                file lock instead of failing when they upgrade, on PostgreSQL row locks and
                ``ON CONFLICT`` make concurrent writers safe;
  ``single``    writes whose statements are each atomic on their own (autocommit): saves the
                BEGIN/COMMIT round trips on PostgreSQL.

Lanes (PostgreSQL): the data plane's state work runs in the data lane (:func:`data_lane`), which
may hold all but ``_RESERVED`` of the pool's connections at once. Everything else (the control
API, erasures, the sweeper) takes a connection ahead of any backlog of saves, and the row locks a
withdrawal needs wait for at most that many data-plane transactions: a flood of saves cannot hold
up a withdrawal's fence (SPEC D4).

Bounds (PostgreSQL): a store that stops answering without an error (a network blackhole, a frozen
server) must not hold a call. Every statement, BEGIN and COMMIT included, waits at most
``statement_timeout_s``; taking a connection (the data lane, then the pool, a new connection's
handshake included) at most ``acquire_timeout_s``. A statement that ran out of time ends its
connection: the server rolls the open transaction back (nothing of it stays), the connection is
never reused, and the caller gets ``StateError(state_unavailable)`` like any other outage.
Migrations run under :func:`long_statements` (DDL on a large table may take minutes).

Scripts: an operation that needs several statements in one transaction can be written once as a
generator that yields :class:`Stmt` and receives each result (``Database.run`` takes a function
that makes it, so it can be run again). On PostgreSQL it runs statement by statement on one pooled
connection. On SQLite it first runs right on the event loop's thread, in its own transaction on a
connection that never waits for a lock: a governed call's state work is tens of microseconds
there, where each hand-off to a connection thread costs more than that. Only when another
process holds the write lock (SQLITE_BUSY, before anything was written) is the script made again
and run in the connection thread, where it waits for the lock as long as the busy timeout allows.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    asynccontextmanager,
    nullcontext,
)
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeVar, cast

import aiosqlite
import asyncpg
from asyncpg.pool import PoolConnectionProxy

from sidecar import tracing
from sidecar.reasons import Reason
from sidecar.state.codec import valid_scope_id
from sidecar.state.lanes import IN_DATA_LANE, LONG_STATEMENT_S, LONG_STATEMENTS
from sidecar.state.types import StateError

Mode = Literal["read", "snapshot", "write", "single"]
Row = Sequence[Any]
#: A value bound to a statement's placeholder: ids, codes and counts; times as integer microseconds.
Param = str | int | float | bool | bytes | None
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Stmt:
    """One statement of a script, and which Tx method reads its result."""

    op: Literal["fetch", "fetchrow", "execute", "executemany", "fetchmany"]
    sql: str
    args: tuple[Param, ...] = ()
    #: An ``executemany``'s or ``fetchmany``'s rows (each bound to the same statement); empty for every other kind.
    rows: tuple[Sequence[Param], ...] = ()


def fetch(sql: str, *args: Param) -> Stmt:
    return Stmt("fetch", sql, args)


def fetchrow(sql: str, *args: Param) -> Stmt:
    return Stmt("fetchrow", sql, args)


def execute(sql: str, *args: Param) -> Stmt:
    return Stmt("execute", sql, args)


def executemany(sql: str, rows: Iterable[Sequence[Param]]) -> Stmt:
    return Stmt("executemany", sql, rows=tuple(rows))


def fetchmany(sql: str, rows: Iterable[Sequence[Param]]) -> Stmt:
    """One statement run once per row of parameters, in order, answering every row each run returned.

    On PostgreSQL the runs share one round trip (asyncpg pipelines them); each is still its own
    statement, so a later run sees what an earlier one wrote. Outside a transaction (``single``)
    they share one implicit transaction: a run that fails, or declines (:class:`Declined`),
    takes every earlier run back with it.
    """
    return Stmt("fetchmany", sql, rows=tuple(rows))


#: The SQLSTATE of ``memgov_decline(n)`` (PostgreSQL, schema version 9): a statement declining on a
#: condition only it can see, e.g. a budget claim that does not fit.
DECLINED_SQLSTATE: Final = "MG001"


class Declined(Exception):
    """A statement called ``memgov_decline(detail)``; its transaction, implicit or not, is rolled back.

    Thrown into the script that yielded the statement, which decides what it means.
    """

    def __init__(self, detail: int) -> None:
        super().__init__(detail)
        self.detail = detail


def _declined(exc: asyncpg.PostgresError) -> Declined | None:
    """The :class:`Declined` a statement's error stands for (``memgov_decline``'s), else None."""
    detail = getattr(exc, "detail", None) or ""
    if getattr(exc, "sqlstate", None) == DECLINED_SQLSTATE and detail.isdigit():
        return Declined(int(detail))
    return None


#: A transaction written once for both backends: yields statements, receives their results.
Script = Generator[Stmt, Any, T]
#: Makes a fresh script (SQLite runs it again after a lock conflict).
MakeScript = Callable[[], Script[T]]


async def drive(script: Script[T], tx: Tx) -> T:
    """Run a script statement by statement on ``tx``."""
    try:
        stmt = next(script)
        while True:
            result: Any = None
            try:
                if stmt.op == "executemany":
                    await tx.executemany(stmt.sql, stmt.rows)
                elif stmt.op == "fetchmany":
                    result = await tx.fetchmany(stmt.sql, stmt.rows)
                else:
                    result = await getattr(tx, stmt.op)(stmt.sql, *stmt.args)
            except asyncpg.PostgresError as exc:
                # memgov_decline's error is the script's to read; any other stays a backend error.
                declined = _declined(exc)
                if declined is None:
                    raise
                stmt = script.throw(declined)
                continue
            stmt = script.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]  # a generator's return value is Any to mypy


_SQLITE_BUSY_MS = 30_000
_PG_CONNECT_TIMEOUT_S = 10.0
_BACKEND_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    sqlite3.Error,
    OSError,
    asyncio.TimeoutError,
)


class Tx(Protocol):
    """Statements inside one connection (and, except in ``read`` and ``single`` modes, one transaction)."""

    dialect: str

    async def fetch(self, sql: str, *args: Param) -> list[Row]: ...

    async def fetchrow(self, sql: str, *args: Param) -> Row | None: ...

    async def execute(self, sql: str, *args: Param) -> int: ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[Param]]) -> None: ...

    async def fetchmany(self, sql: str, rows: Iterable[Sequence[Param]]) -> list[Row]: ...


class Database(Protocol):
    """A connection pool (PostgreSQL) or a writer/reader connection pair (SQLite)."""

    dialect: str

    def tx(self, mode: Mode = "write") -> AbstractAsyncContextManager[Tx]: ...

    async def run(self, make: MakeScript[T], mode: Mode = "write") -> T: ...

    async def close(self) -> None: ...


class Facet:
    """One concern's statements (scopes, ledger, budgets, …) over the store's shared database handle.

    The store is composed of facets (``store.admission``, ``store.ledger``, …); each reaches the
    database only through the handle it was built with, and none calls another.
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    # A statement that stands alone: the transaction of ``mode`` around it opens and closes with it.
    async def _fetch(self, mode: Mode, sql: str, *args: Param) -> list[Row]:
        async with self._db.tx(mode) as tx:
            return await tx.fetch(sql, *args)

    async def _fetchrow(self, mode: Mode, sql: str, *args: Param) -> Row | None:
        async with self._db.tx(mode) as tx:
            return await tx.fetchrow(sql, *args)

    async def _execute(self, mode: Mode, sql: str, *args: Param) -> int:
        async with self._db.tx(mode) as tx:
            return await tx.execute(sql, *args)

    async def _scope_rows(self, of: Callable[[Row], T], sql: str, scope_id: str, *args: Param) -> list[T]:
        """One scope's rows (``scope_id`` is ``$1``), each read by ``of``; none for a string that cannot
        name a scope."""
        if not valid_scope_id(scope_id):
            return []
        return [of(r) for r in await self._fetch("read", sql, scope_id, *args)]


#: Errors a backend raises when it answered and refused a statement (or stopped answering: see refusal_code).
STATEMENT_ERRORS: tuple[type[BaseException], ...] = (asyncpg.PostgresError, sqlite3.Error)
_SQLSTATE = re.compile(r"^[0-9A-Z]{5}$")
_SQLITE_NAME = re.compile(r"^SQLITE_[A-Z_]{1,40}$")


def refusal_code(exc: BaseException) -> str | None:
    """The backend's error class when the store answered and refused a statement, else None.

    PostgreSQL's SQLSTATE (``42501`` a missing privilege, ``53100`` a full disk, ``55P03`` a lock not
    available, ...) or SQLite's result name (``SQLITE_FULL``, ``SQLITE_READONLY``, ...). None when
    the store stopped answering (connection classes ``08``/``57P``, SQLite busy or locked): that is an
    outage, not a refusal. Only the code is read, never the message, which may quote values.
    """
    if isinstance(exc, asyncpg.PostgresError):
        code = str(getattr(exc, "sqlstate", "") or "")
        if code.startswith(("08", "57P")):
            return None
        return code if _SQLSTATE.match(code) else "unknown"
    if isinstance(exc, sqlite3.Error):
        name = str(getattr(exc, "sqlite_errorname", "") or "")
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            return None
        return name if _SQLITE_NAME.match(name) else "unknown"
    return None


@asynccontextmanager
async def backend_errors() -> AsyncIterator[None]:
    """Turn driver and socket failures into ``StateError(state_unavailable)``."""
    try:
        yield
    except StateError:
        raise
    except _BACKEND_ERRORS as exc:
        # SECURITY: driver messages may quote statement values; only the code leaves this layer.
        raise StateError(Reason.STATE_UNAVAILABLE) from exc


@lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    return re.sub(r"\$(\d+)", r"?\1", sql)


class _PgTx:
    __slots__ = ("_con", "_timeout")
    dialect = "postgresql"

    def __init__(self, con: asyncpg.Connection | PoolConnectionProxy, timeout: float) -> None:
        self._con = con
        self._timeout = timeout

    async def fetch(self, sql: str, *args: Param) -> list[Row]:
        # asyncpg's Record indexes like a tuple (the only way rows are read here); its stubs do not say Sequence.
        return cast(list[Row], await self._con.fetch(sql, *args, timeout=self._timeout))

    async def fetchrow(self, sql: str, *args: Param) -> Row | None:
        return cast(Row | None, await self._con.fetchrow(sql, *args, timeout=self._timeout))

    async def execute(self, sql: str, *args: Param) -> int:
        status: str = await self._con.execute(sql, *args, timeout=self._timeout)
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    async def executemany(self, sql: str, rows: Iterable[Sequence[Param]]) -> None:
        await self._con.executemany(sql, list(rows), timeout=self._timeout)

    async def fetchmany(self, sql: str, rows: Iterable[Sequence[Param]]) -> list[Row]:
        return cast(list[Row], await self._con.fetchmany(sql, list(rows), timeout=self._timeout))


async def _keep_session(con: asyncpg.Connection) -> None:
    """Skip asyncpg's reset query (a round trip on every release): the store never leaves session
    state behind (no LISTEN, session advisory locks, cursors or SET), and asyncpg still rolls back
    a transaction left open before this hook runs."""


#: Connections of a PostgreSQL pool the data lane never takes (fewer when the pool is smaller).
_RESERVED = 2
#: Defaults of ``state.statement_timeout_s`` and ``state.acquire_timeout_s``.
STATEMENT_TIMEOUT_S: Final = 5.0
ACQUIRE_TIMEOUT_S: Final = 5.0


class PgDatabase:
    """asyncpg pool; statements are prepared and cached per connection by asyncpg."""

    dialect = "postgresql"

    def __init__(
        self,
        pool: asyncpg.Pool,
        pool_size: int,
        statement_timeout_s: float = STATEMENT_TIMEOUT_S,
        acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
    ) -> None:
        self._pool = pool
        self._data_lane = asyncio.Semaphore(max(1, pool_size - _RESERVED))
        self._statement_s, self._acquire_s = statement_timeout_s, acquire_timeout_s

    @classmethod
    async def open(
        cls,
        url: str,
        pool_size: int,
        *,
        statement_timeout_s: float = STATEMENT_TIMEOUT_S,
        acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
    ) -> PgDatabase:
        async with backend_errors():
            # command_timeout bounds what asyncpg sends on its own (BEGIN, COMMIT, ROLLBACK, the cancel request).
            pool = await asyncpg.create_pool(
                url,
                min_size=1,
                max_size=pool_size,
                timeout=min(_PG_CONNECT_TIMEOUT_S, acquire_timeout_s),
                command_timeout=statement_timeout_s,
                reset=_keep_session,
            )
        return cls(pool, pool_size, statement_timeout_s, acquire_timeout_s)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[PoolConnectionProxy]:
        """A pooled connection (after a place in the data lane, for its calls), taken within the bound."""
        lane = self._data_lane if IN_DATA_LANE.get() else None
        async with asyncio.timeout(self._acquire_s):
            if lane is not None:
                await lane.acquire()
            try:
                con: PoolConnectionProxy = await self._pool.acquire()
            except BaseException:
                if lane is not None:
                    lane.release()
                raise
        try:
            yield con
        except TimeoutError:
            # The server did not answer in time: the statement's outcome is unknown and the connection may be
            # mid-message. End it, so it is never reused and the server rolls back whatever it left open.
            con.terminate()
            raise
        finally:
            try:
                # Bounded as well: a connection that cannot be reset in time is ended by asyncpg.
                await self._pool.release(con, timeout=self._acquire_s)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError):
                pass  # the transaction's own outcome is already known; only the connection is lost
            finally:
                if lane is not None:
                    lane.release()

    @asynccontextmanager
    async def tx(self, mode: Mode = "write") -> AsyncIterator[Tx]:
        timeout = LONG_STATEMENT_S if LONG_STATEMENTS.get() else self._statement_s
        async with (
            tracing.span("memgov.state", backend="postgresql", step=mode),
            backend_errors(),
            self._connection() as con,
        ):
            if mode in ("read", "single"):
                yield _PgTx(con, timeout)
                return
            isolation: Literal["repeatable_read", "read_committed"] = (
                "repeatable_read" if mode == "snapshot" else "read_committed"
            )
            async with con.transaction(isolation=isolation, readonly=mode == "snapshot"):
                try:
                    yield _PgTx(con, timeout)
                except TimeoutError:
                    # No ROLLBACK to wait for: the server rolls back the transaction of a connection that ends.
                    con.terminate()
                    raise

    async def run(self, make: MakeScript[T], mode: Mode = "write") -> T:
        async with self.tx(mode) as tx:
            return await drive(make(), tx)

    async def close(self) -> None:
        await self._pool.close()


class _SqliteTx:
    __slots__ = ("_con",)
    dialect = "sqlite"

    def __init__(self, con: aiosqlite.Connection) -> None:
        self._con = con

    async def fetch(self, sql: str, *args: Param) -> list[Row]:
        return list(await self._con.execute_fetchall(_qmark(sql), args))

    async def fetchrow(self, sql: str, *args: Param) -> Row | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def execute(self, sql: str, *args: Param) -> int:
        async with self._con.execute(_qmark(sql), args) as cur:
            return max(cur.rowcount, 0)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Param]]) -> None:
        await self._con.executemany(_qmark(sql), [tuple(r) for r in rows])

    async def fetchmany(self, sql: str, rows: Iterable[Sequence[Param]]) -> list[Row]:
        out: list[Row] = []
        for r in rows:
            out.extend(await self._con.execute_fetchall(_qmark(sql), tuple(r)))
        return out


class SqliteDatabase:
    """One writer and one reader connection in WAL mode; a lock per connection keeps one
    transaction per connection at a time inside this process, the file lock across processes."""

    dialect = "sqlite"

    def __init__(
        self, writer: aiosqlite.Connection, reader: aiosqlite.Connection, inline: sqlite3.Connection | None = None
    ) -> None:
        self._writer, self._reader, self._inline = writer, reader, inline
        self._wlock = asyncio.Lock()
        self._rlock = self._wlock if reader is writer else asyncio.Lock()

    @classmethod
    async def open(cls, path: str) -> SqliteDatabase:
        async with backend_errors():
            if path == ":memory:":
                writer = await cls._connect(path)
                return cls(writer, writer)
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # Control state names people (MXIDs): only the gateway's user may read the file. SQLite
            # gives its -wal and -shm files the database file's mode.
            Path(path).touch(mode=0o600, exist_ok=True)
            Path(path).chmod(0o600)
            writer = await cls._connect(path)
            await cls._wal(writer)
            return cls(writer, await cls._connect(path), cls._connect_inline(path))

    @staticmethod
    async def _connect(path: str) -> aiosqlite.Connection:
        con = await aiosqlite.connect(path, isolation_level=None, timeout=_SQLITE_BUSY_MS / 1000)
        await con.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_MS}")
        await con.execute("PRAGMA foreign_keys = ON")
        await con.execute("PRAGMA synchronous = NORMAL")
        return con

    @staticmethod
    def _connect_inline(path: str) -> sqlite3.Connection:
        # No busy wait: a locked database is handed to the connection thread instead (see run).
        con = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        con.execute("PRAGMA busy_timeout = 0")
        con.execute("PRAGMA foreign_keys = ON")
        con.execute("PRAGMA synchronous = NORMAL")
        return con

    @staticmethod
    async def _wal(con: aiosqlite.Connection) -> None:
        # Two processes creating the same file at once can see SQLITE_BUSY here even with a busy
        # timeout (the journal-mode switch needs the file to itself); retry until it sticks.
        for _ in range(200):
            try:
                rows = list(await con.execute_fetchall("PRAGMA journal_mode = WAL"))
            except sqlite3.OperationalError:
                rows = []
            if rows and str(rows[0][0]).lower() == "wal":
                return
            await asyncio.sleep(0.05)
        raise StateError(Reason.STATE_UNAVAILABLE)

    @asynccontextmanager
    async def tx(self, mode: Mode = "write") -> AsyncIterator[Tx]:
        con, lock = (self._writer, self._wlock) if mode in ("write", "single") else (self._reader, self._rlock)
        async with tracing.span("memgov.state", backend="sqlite", step=mode), backend_errors(), lock:
            if mode in ("read", "single"):
                yield _SqliteTx(con)
                return
            await con.execute("BEGIN IMMEDIATE" if mode == "write" else "BEGIN")
            try:
                yield _SqliteTx(con)
            except BaseException:
                try:
                    await con.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # SQLite already rolled back on its own (e.g. disk full); the first error is the one to raise
                raise
            await con.execute("COMMIT")

    async def run(self, make: MakeScript[T], mode: Mode = "write") -> T:
        writes = mode in ("write", "single")
        con, lock = (self._writer, self._wlock) if writes else (self._reader, self._rlock)
        async with tracing.span("memgov.state", backend="sqlite", step=mode), backend_errors():
            if self._inline is not None:
                # Writers of this process queue on the lock; one holding it never awaits inside it.
                async with self._wlock if writes else _NO_LOCK:
                    try:
                        # A write is always one transaction here, so a conflict leaves nothing behind.
                        return _run_sync(self._inline, make(), "write" if writes else mode)
                    except sqlite3.OperationalError as exc:
                        if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                            raise
            async with lock:
                # aiosqlite runs a callable in its connection thread with the connection it owns
                # (`_execute`, `_conn`); the whole transaction is one hand-off to that thread.
                raw: sqlite3.Connection = con._conn
                result: T = await con._execute(_run_sync, raw, make(), mode)  # type: ignore[no-untyped-call]  # aiosqlite internal
                return result

    async def close(self) -> None:
        if self._inline is not None:
            self._inline.close()
        await self._writer.close()
        if self._reader is not self._writer:
            await self._reader.close()


_NO_LOCK: AbstractAsyncContextManager[None] = nullcontext()


def _run_sync(con: sqlite3.Connection, script: Script[T], mode: Mode) -> T:
    """A whole script in SQLite's connection thread: BEGIN, statements, COMMIT (ROLLBACK on error)."""
    begin = {"write": "BEGIN IMMEDIATE", "snapshot": "BEGIN"}.get(mode)
    if begin is not None:
        con.execute(begin)
    try:
        stmt = next(script)
        while True:
            sql = _qmark(stmt.sql)
            if stmt.op == "executemany":
                con.executemany(sql, [tuple(r) for r in stmt.rows])
                result: Any = None
            elif stmt.op == "fetchmany":
                result = [row for r in stmt.rows for row in con.execute(sql, tuple(r)).fetchall()]
            else:
                cur = con.execute(sql, stmt.args)
                if stmt.op == "execute":
                    result = max(cur.rowcount, 0)
                else:
                    rows = cur.fetchall()
                    result = rows if stmt.op == "fetch" else (rows[0] if rows else None)
            stmt = script.send(result)
    except StopIteration as done:
        if begin is not None:
            con.execute("COMMIT")
        return done.value  # type: ignore[no-any-return]  # a generator's return value is Any to mypy
    except BaseException:
        if begin is not None:
            try:
                con.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled back on its own; the first error is the one to raise
        raise


async def connect(
    url: str,
    pool_size: int = 10,
    *,
    statement_timeout_s: float = STATEMENT_TIMEOUT_S,
    acquire_timeout_s: float = ACQUIRE_TIMEOUT_S,
) -> Database:
    """Open the backend named by ``url`` (``sqlite:///path`` or ``postgresql://…``); the timeouts bound
    PostgreSQL's statements and connection hand-outs (see the module's note on bounds)."""
    if url.startswith("sqlite:///"):
        return await SqliteDatabase.open(url.removeprefix("sqlite:///"))
    if url.startswith(("postgresql://", "postgres://")):
        return await PgDatabase.open(
            url, pool_size, statement_timeout_s=statement_timeout_s, acquire_timeout_s=acquire_timeout_s
        )
    raise ValueError("state URL must start with sqlite:/// or postgresql://")
