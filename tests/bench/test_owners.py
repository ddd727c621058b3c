"""benchmarks/owners.py: each sample is charged to the innermost frame that names an owner."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("owners", Path(__file__).parents[2] / "benchmarks" / "owners.py")
assert _SPEC is not None and _SPEC.loader is not None
owners = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(owners)

LOOP = "run_forever (loop.c:33397);Handle__run (loop.c:70959);task_step (_asynciomodule.c:2990)"


def test_interpreter_and_libc_frames_go_to_the_python_code_that_called_them() -> None:
    ours = f"{LOOP};_context (sidecar/policy/cedar_input.py:190);PyDict_New (object.h:12);0x7f (libc.so.6)"
    assert owners.owner(ours.split(";")) == "memgov: sidecar.policy.cedar_input"


_BIND = f"{LOOP};fetchrow (asyncpg/connection.py:1);CoreProtocol__bind_execute (protocol.c:55447)"


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        (f"{LOOP};_authorize (sidecar/policy/cedar.py:318);x (cedarpy/_internal.cpython-311.so)", "cedarpy (Rust)"),
        (f"{LOOP};_run_sync (sidecar/state/db.py:462);execute (cursor.c:800);x (libsqlite3.so.0.8.6)", "sqlite3"),
        (f"{LOOP};Upstream.request (sidecar/upstream.py:150);uv_write (stream.c:1);0x7f (libc.so.6)", "uvloop"),
        # asyncpg's Cython protocol is built as protocol.c, a name an event loop could have: it is asyncpg's.
        (_BIND, "asyncpg"),
        (f"{LOOP};_run (sidecar/state/db.py:1);decode (pgproto.c:10);0x7f (libc.so.6)", "asyncpg"),
        (f"{LOOP};Pool.acquire (asyncpg/pool.py:1)", "asyncpg"),
        # ...while the socket write it asks for is the event loop's.
        (f"{_BIND};BaseProtocol__write (protocol.c:86300);UVStream_write (loop.c:1);0x7f (libc.so.6)", "uvloop"),
    ],
)
def test_native_extension_frames_name_their_library(stack: str, expected: str) -> None:
    assert owners.owner(stack.split(";")) == expected


def test_library_python_frames_are_not_memgovs() -> None:
    client = f"{LOOP};Upstream.request (sidecar/upstream.py:150);ClientSession._request (aiohttp/client.py:700)"
    assert owners.owner(client.split(";")) == "aiohttp"


def test_waiting_threads_and_imports_are_left_out_of_the_shares() -> None:
    idle = "_bootstrap (threading.py:1);_worker (concurrent/futures/thread.py:81);0x7f (libc.so.6)"
    start = "<module> (x.py:1);_find_and_load (<frozen importlib._bootstrap>:1);y (sidecar/proxy.py:3)"
    busy = f"{LOOP};observe_data (sidecar/proxy.py:109)"
    assert owners.owner(idle.split(";")) == "idle thread (waiting)"
    assert owners.owner(start.split(";")) == "startup (imports)"
    counts = owners.tally([f"{idle} 5\n", f"{start} 7\n", f"{busy} 2\n"])
    assert counts == {"memgov: sidecar.proxy": 2}
    table = owners.report(counts)
    assert "memgov (all modules)                             100.0%" in table
    assert table.splitlines()[-1].split() == ["samples", "2"]
    # Given the process's CPU per request, each share is also given in µs per request.
    costed = owners.report(owners.Counter({"memgov: sidecar.proxy": 3, "aiohttp": 1}), per_request_us=200.0)
    assert [line.split()[-1] for line in costed.splitlines()[1:4]] == ["150", "150", "50"]


def test_stages_are_named_by_what_the_pipeline_runner_called() -> None:
    handler = f"{LOOP};observe_data (sidecar/proxy.py:109);handler (sidecar/enforce/pipeline.py:115)"
    decide = f"{handler};_stages (sidecar/enforce/pipeline.py:95);decide_and_record (sidecar/decide/respond.py:60)"
    cedar = f"{decide};_authorize (sidecar/policy/cedar.py:318);x (cedarpy/_internal.so)"
    middleware = f"{LOOP};observe_data (sidecar/proxy.py:131);emit (structlog/_native.py:1)"
    server = f"{LOOP};RequestHandler.start (aiohttp/web_protocol.py:1)"
    counts = owners.tally([f"{cedar} 3\n", f"{middleware} 2\n", f"{server} 1\n"], owners.stage)
    assert counts == {
        "pipeline: decide_and_record": 3,
        "middlewares and routing": 2,
        "aiohttp's server and the event loop": 1,
    }
