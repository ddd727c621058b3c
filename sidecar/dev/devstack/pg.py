"""Start a real, throwaway PostgreSQL server on loopback for tests and benchmarks.

The server runs from the machine's PostgreSQL binaries (``initdb``/``pg_ctl`` on PATH or under
/usr/lib/postgresql/*/bin). PostgreSQL refuses to run as root, so as root the cluster is owned by
and started as the ``postgres`` user. Authentication is ``trust`` on 127.0.0.1 only.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for cand in sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True):
        return cand
    raise RuntimeError(f"PostgreSQL binary {name!r} not found; run `make pg` (apt-get install postgresql)")


def bin_dir() -> str:
    """The folder of the PostgreSQL binaries these servers run, its client tools (pg_dump, pg_restore) beside them."""
    return os.path.dirname(_bin("pg_ctl"))


#: ``LOW-HIGH``: pick test ports from this range instead of asking the kernel (the test runner gives each of
#: its parallel workers its own slice below the kernel's ephemeral range, so a port picked here is never
#: taken meanwhile by an outgoing connection or by another worker).
PORT_RANGE_ENV = "MEMGOV_DEV_PORT_RANGE"
_next_in_range: dict[str, int] = {}


def free_port() -> int:
    """A loopback TCP port that is free now, for a server started next."""
    span = os.environ.get(PORT_RANGE_ENV, "")
    if not span:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    low, high = (int(x) for x in span.split("-"))
    size = high - low + 1
    # A process starts at its own offset, so two processes of one slice rarely probe the same ports.
    start = _next_in_range.get(span, low + (os.getpid() * 7919) % size)
    for i in range(size):
        port = low + (start - low + i) % size
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _next_in_range[span] = port + 1
        return port
    raise RuntimeError(f"no free port in {span}")


@dataclass
class PgServer:
    """A running PostgreSQL cluster; ``url(db)`` gives a superuser URL."""

    datadir: Path
    port: int
    _as_user: list[str]
    _opts: str = ""

    def url(self, db: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def psql(self, sql: str, db: str = "postgres") -> str:
        out = subprocess.run(
            [
                _bin("psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                db,
                "-v",
                "ON_ERROR_STOP=1",
                "-Atqc",
                sql,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def create_database(self, name: str, template: str | None = None) -> str:
        """A new database (a copy of ``template`` when given: PostgreSQL copies its files, no SQL replays)."""
        self.psql(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.url(name)

    def halt(self) -> None:
        """Stop the server and keep its data (an outage): ``resume()`` brings it back on the same port.

        A fast shutdown: every client is disconnected, and what was committed stays (with this
        server's ``synchronous_commit=off`` an immediate stop would lose the last commits)."""
        subprocess.run(
            [*self._as_user, _bin("pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop"],
            capture_output=True,
            check=True,
        )

    def resume(self) -> None:
        """Start a halted server again and wait until it answers."""
        log = self.datadir.parent / "log"
        subprocess.run(
            [
                *self._as_user,
                _bin("pg_ctl"),
                "-D",
                str(self.datadir),
                "-o",
                self._opts,
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "start",
            ],
            check=True,
            capture_output=True,
        )
        _wait_answering(self)

    def stop(self) -> None:
        subprocess.run(
            [*self._as_user, _bin("pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.datadir.parent, ignore_errors=True)


def _ensure_postgres_user() -> None:
    """As root, PostgreSQL runs as ``postgres``; create that system user when the machine lacks it."""
    import grp
    import pwd

    try:
        pwd.getpwnam("postgres")
        grp.getgrnam("postgres")
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"],
            check=True,
            capture_output=True,
        )


def start_pg(max_connections: int = 200) -> PgServer:
    """Create a fresh cluster in a temp folder and start it on a free loopback port."""
    root = Path(tempfile.mkdtemp(prefix="memgov-pg-"))
    datadir = root / "data"
    as_user: list[str] = []
    if os.geteuid() == 0:
        _ensure_postgres_user()
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*as_user, _bin("initdb"), "-D", str(datadir), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    opts = (
        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} "
        f"-c max_connections={max_connections} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    )
    subprocess.run(
        [*as_user, _bin("pg_ctl"), "-D", str(datadir), "-o", opts, "-l", str(root / "log"), "-w", "-t", "60", "start"],
        check=True,
        capture_output=True,
    )
    server = PgServer(datadir=datadir, port=port, _as_user=as_user, _opts=opts)
    _wait_answering(server)
    return server


def _wait_answering(server: PgServer) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            server.psql("SELECT 1")
            return
        except subprocess.CalledProcessError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
