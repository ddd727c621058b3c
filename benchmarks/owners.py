"""Who owns the CPU in a py-spy ``--native --format raw`` profile: memgov's code or a library.

Each sample is charged to the innermost frame that names an owner: a Python source frame by its
package (``sidecar/...`` is memgov, by module), a native frame by the extension it lives in
(cedarpy's Rust, SQLite, orjson, uvloop, aiohttp's HTTP parser, ...). Interpreter and libc frames
name no owner, so their time goes to the code that called them: a ``dict`` built in memgov's code
is memgov's, a ``write`` issued by uvloop is uvloop's.

    .venv/bin/python benchmarks/owners.py profile.raw [--top 25] [--stages]

``--stages`` splits the same samples by where in a governed call they fall: the function memgov's
pipeline runner called (parse, admit, decide and record, forward), the middlewares, or aiohttp's
server and the event loop around them.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

#: Native frames by the file or library py-spy names, first match wins.
_NATIVE = (
    ("cedarpy", "cedarpy (Rust)"),
    ("libsqlite3", "sqlite3"),
    ("cursor.c", "sqlite3"),
    ("connection.c", "sqlite3"),
    ("orjson", "orjson"),
    ("pydantic_core", "pydantic"),
    ("psycopg", "psycopg"),
    ("libpq", "psycopg"),
    # asyncpg's Cython modules (protocol.pyx, pgproto.pyx, its Record type).
    ("protocol.c", "asyncpg"),
    ("pgproto.c", "asyncpg"),
    ("recordobj.c", "asyncpg"),
    ("_http_parser", "aiohttp"),
    ("llhttp", "aiohttp"),
    ("_http_writer", "aiohttp"),
    ("_helpers_c", "aiohttp"),
    ("_find_header", "aiohttp"),
    ("_multidict", "multidict"),
    ("yarl", "yarl"),
    ("loop.c", "uvloop"),
    ("stream.c", "uvloop"),
    ("core.c", "uvloop"),
    ("linux.c", "uvloop"),
    ("loop-watcher.c", "uvloop"),
    ("timer.c", "uvloop"),
    ("_asynciomodule", "asyncio"),
    ("libcrypto", "hashlib/hmac"),
    ("_hashopenssl", "hashlib/hmac"),
)
#: Python packages by path prefix; anything else under site-packages is "other library".
_PYTHON = (
    ("aiohttp/", "aiohttp"),
    ("asyncio/", "asyncio"),
    ("pydantic", "pydantic"),
    ("structlog/", "structlog"),
    ("prometheus_client/", "prometheus_client"),
    ("opentelemetry/", "opentelemetry"),
    ("psycopg", "psycopg"),
    ("asyncpg/", "asyncpg"),
    ("aiosqlite/", "aiosqlite"),
    ("multidict/", "multidict"),
    ("yarl/", "yarl"),
    ("cedarpy/", "cedarpy (Python)"),
)
_NOT_BUSY = frozenset({"idle thread (waiting)", "startup (imports)"})
_FRAME = re.compile(r"^(?P<func>.*) \((?P<where>[^()]*?)(?::\d+)?\)$")


#: Python frames that block a thread on a queue or a condition: a native profile samples them too.
_WAITS = ("concurrent/futures/thread.py", "aiosqlite/core.py", "threading.py", "queue.py")


def owner(frames: list[str]) -> str:
    """The owner of one sample, its frames outermost first."""
    if any("<frozen importlib" in f for f in frames):
        return "startup (imports)"
    for frame in reversed(frames):
        m = _FRAME.match(frame)
        where = m.group("where") if m else frame
        if where.endswith(".py"):
            if where.endswith(_WAITS) and frame is not frames[-1]:
                return "idle thread (waiting)"
            if where.startswith("sidecar/") or "/sidecar/" in where:
                module = where[where.index("sidecar/") :].removesuffix(".py").replace("/", ".")
                return "memgov: " + module
            for prefix, name in _PYTHON:
                if prefix in where:
                    return name
            if "site-packages" in where:
                return "other library"
            return "python stdlib"
        for needle, name in _NATIVE:
            if needle in where:
                return name
    return "interpreter (no Python frame)"


#: The governed pipeline's stage runner: the frame it calls names the stage (parse, admit, decide, forward).
_RUNNER = "_stages (sidecar/enforce/pipeline.py"


def stage(frames: list[str]) -> str:
    """Where in a governed call a sample falls: the function the pipeline runner called, else outside it."""
    for i in range(len(frames) - 1, -1, -1):
        if frames[i].startswith(_RUNNER):
            callee = next((f for f in frames[i + 1 :] if ".py:" in f), None)
            return "pipeline: " + (callee.split(" (")[0] if callee else "(the runner itself)")
    if any("observe_data (sidecar/proxy.py" in f for f in frames):
        return "middlewares and routing"
    return "aiohttp's server and the event loop"


def tally(lines: Iterable[str], by: Callable[[list[str]], str] = owner) -> Counter[str]:
    """Samples per owner (or per ``by``) from py-spy raw lines (``frame;... count``); idle and start-up left out."""
    counts: Counter[str] = Counter()
    for line in lines:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if stack and n.isdigit():
            frames = stack.split(";")
            if owner(frames) not in _NOT_BUSY:
                counts[by(frames)] += int(n)
    return counts


def report(counts: Counter[str], top: int = 25, title: str = "owner", per_request_us: float | None = None) -> str:
    """A table by share of the busy samples; for owners, memgov's modules are also summed in a first line.

    With ``per_request_us`` (the process's CPU per request), each share is also given in µs per request.
    """
    total = sum(counts.values()) or 1
    ours = sum(v for k, v in counts.items() if k.startswith("memgov: "))

    def row(name: str, n: int) -> str:
        us = f" {per_request_us * n / total:8.0f}" if per_request_us is not None else ""
        return f"{name:<48} {100 * n / total:5.1f}%{us}"

    rows = [f"{title:<48} {'share':>6}" + (f" {'µs/req':>8}" if per_request_us is not None else "")]
    if ours:
        rows.append(row("memgov (all modules)", ours))
    rows += [row(k, v) for k, v in counts.most_common(top)]
    rows.append(f"{'samples':<48} {total:>6}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--stages", action="store_true", help="Split by pipeline stage instead of by owner.")
    args = parser.parse_args()
    with args.raw.open() as fh:
        print(report(tally(fh, stage), args.top, "stage") if args.stages else report(tally(fh), args.top))


if __name__ == "__main__":
    main()
