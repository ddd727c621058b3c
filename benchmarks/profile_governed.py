"""Profile memgov's own CPU on governed memory calls, with an upstream that costs nothing.

Runs an in-process gateway (Cedar, SQLite or PostgreSQL state) in front of a canned kagent that
answers every save with a fresh id and every search with a fixed list of rows the ledger knows,
so the profile shows memgov's work only (and a pass-through ``GET /health``, relayed to it, for
the per-request cost every route pays). Writes a pyinstrument HTML flame graph per governed
scenario and prints CPU microseconds per request; a second pass prints the CPU microseconds per request of each
stage of the handler (thread CPU time while that stage's code runs, its awaits excluded). Client requests are
encoded once, before the timed loop, so the client's own JSON work is not counted.

    .venv/bin/python benchmarks/profile_governed.py --requests 600 --out benchmarks/flamegraphs

``--totals`` measures the whole process only: the stage timers cost tens of microseconds per stage
where the thread-CPU clock is a system call, so A/B runs of two trees use it, alternated B A B A …
(the code measured is the tree PYTHONPATH names; this script may come from either):

    PYTHONPATH=/path/to/before .venv/bin/python benchmarks/profile_governed.py --totals --requests 2000
    PYTHONPATH=/path/to/after  .venv/bin/python benchmarks/profile_governed.py --totals --requests 2000
"""

from __future__ import annotations

import argparse
import json
import secrets
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from sidecar import evloop
from sidecar.dev.bench.governed import _UNBOUNDED
from sidecar.identity.tokens import control_room, mint_context, mint_subject
from sidecar.logs import configure_logging
from sidecar.server import running_gateway
from sidecar.settings import PACKAGED_POLICY_DIR, load_settings

SERVER, ALICE, BOT = "bench.example", "@bench:bench.example", "@bot:bench.example"
AGENT, APP, GHOST, ROOM = "bench/assistant", "bench__NS__assistant", "@ghost:bench.example", "!r:bench.example"
VECTOR = [((i * 17) % 97) / 97.0 - 0.5 for i in range(768)]


class CannedKagent:
    """Answers saves with a new id and searches with the ids saved so far (up to five)."""

    def __init__(self) -> None:
        self.saved: list[str] = []
        self.user: str | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/api/memories/sessions":
            await request.read()
            entry = str(uuid.uuid4())
            self.saved.append(entry)
            return web.json_response({"id": entry}, status=201)
        if request.path == "/api/memories/search":
            await request.read()
            rows = [
                {"id": e, "content": "fact", "score": 0.9, "metadata": {}, "created_at": "2026-12-01T00:00:00Z"}
                for e in self.saved[-5:]
            ]
            return web.json_response(rows)
        if request.path.startswith("/api/a2a/"):
            self.user = request.headers.get("X-User-Id")
            await request.read()
            return web.json_response({"jsonrpc": "2.0", "id": 1, "result": {}})
        return web.json_response({})


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def run(state: str, requests: int, out: Path | None, *, stages: bool = True) -> dict[str, float]:
    from pyinstrument import Profiler

    kagent = CannedKagent()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", kagent.handle)
    runner, url = await _serve(app)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pack = folder / "pack"
        import shutil

        shutil.copytree(PACKAGED_POLICY_DIR, pack)
        limits = yaml.safe_load((pack / "data" / "limits.yaml").read_text())
        (pack / "data" / "limits.yaml").write_text(yaml.safe_dump({**limits, **_UNBOUNDED}))
        bridge = secrets.token_hex(32).encode()
        (folder / "bridge.key").write_bytes(bridge)
        (folder / "session.key").write_bytes(secrets.token_hex(32).encode())
        state_url = f"sqlite:///{folder}/state.db" if state == "sqlite" else state
        settings = load_settings(
            upstream={"controller_url": url},
            listen={"data": "127.0.0.1:0", "control": "127.0.0.1:0", "ops": "127.0.0.1:0"},
            state={"url": state_url},
            policy={"dir": str(pack), "reload_interval_s": 0},
            secrets={"session_key_file": str(folder / "session.key")},
            trust={"bridge_key_file": str(folder / "bridge.key")},
            matrix={"server_name": SERVER, "bridge_bot": BOT},
            log={"level": "warning"},
            agents={AGENT: {"disabled_variant": "assistant-nomem", "ghost": GHOST}},
        )
        async with running_gateway(settings) as gw, aiohttp.ClientSession() as http:
            now = int(time.time())

            async def control(method: str, path: str, body: Any) -> Any:
                token = mint_subject(ALICE, bridge, "HS256", now=int(time.time()))
                async with http.request(
                    method, gw.control_url + path, json=body, headers={"Authorization": f"Bearer {token}"}
                ) as resp:
                    return await resp.json()

            scope = await control(
                "POST",
                "/v1/scopes",
                {
                    "principal": {"mxid": ALICE, "origin": "native"},
                    "agent": AGENT,
                    "scope": {"kind": "control_room", "room_id": ROOM},
                },
            )
            await control("PUT", f"/v1/scopes/{scope['scope_id']}/consent", {"purpose": "p", "policy_version": "v1"})
            context = mint_context(
                bridge,
                "HS256",
                sub=ALICE,
                agent=AGENT,
                room_id=ROOM,
                room=control_room([ALICE, BOT, GHOST], SERVER),
                servers=[SERVER],
                classification="private",
                now=now,
            )
            # A continuing conversation: no prefetch window, so searches are explicit loads.
            invoke = {"jsonrpc": "2.0", "id": 1, "params": {"message": {"contextId": "c1"}}}
            async with http.post(
                gw.data_url + f"/api/a2a/{AGENT}/", json=invoke, headers={"X-Memgov-Context": context}
            ) as resp:
                await resp.read()
            key = kagent.user
            save = json.dumps({"agent_name": APP, "user_id": key, "content": "a fact", "vector": VECTOR}).encode()
            search = json.dumps(
                {"agent_name": APP, "user_id": key, "vector": VECTOR, "limit": 5, "min_score": 0}
            ).encode()
            headers = {"X-Agent-Name": APP, "Content-Type": "application/json"}
            results: dict[str, float] = {}

            async def send(path: str, body: bytes | None) -> None:
                method = "GET" if body is None else "POST"
                async with http.request(method, gw.data_url + path, data=body, headers=headers) as resp:
                    await resp.read()
                    assert resp.status in (200, 201), resp.status

            for name, path, body in (
                ("save", "/api/memories/sessions", save),
                ("search", "/api/memories/search", search),
                # A pass-through relay (GET /health to the canned upstream): memgov's per-request cost
                # on every route, without governance.
                ("relay", "/health", None),
            ):
                for _ in range(20):  # warm up
                    await send(path, body)
                cpu = time.process_time()
                for _ in range(requests):
                    await send(path, body)
                results[name] = (time.process_time() - cpu) / requests * 1e6
                if not stages or body is None:
                    continue
                for label in STAGE_TIMES:
                    STAGE_TIMES[label] = 0
                for _ in range(requests):
                    await send(path, body)
                results.update({f"{name} {label}": ns / requests / 1000 for label, ns in STAGE_TIMES.items() if ns})
                profiler = Profiler(interval=0.0002, async_mode="disabled")
                profiler.start()
                for _ in range(requests):
                    await send(path, body)
                profiler.stop()
                if out is not None:
                    out.mkdir(parents=True, exist_ok=True)
                    stem = f"governed-{name}-{'sqlite' if state == 'sqlite' else 'postgresql'}"
                    (out / f"{stem}.html").write_text(profiler.output_html())
                    (out / f"{stem}.txt").write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    await runner.cleanup()
    return results


class _Timed:
    """Awaits a coroutine, adding the thread CPU time of each of its steps to ``acc[label]``."""

    def __init__(self, coro: Any, acc: dict[str, int], label: str) -> None:
        self._coro, self._acc, self._label = coro, acc, label

    def __await__(self) -> Any:
        steps = self._coro.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            start = time.thread_time_ns()
            try:
                yielded = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as done:
                self._acc[self._label] += time.thread_time_ns() - start
                return done.value
            self._acc[self._label] += time.thread_time_ns() - start
            try:
                value, error = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001 - passed on into the coroutine
                value, error = None, exc


#: Handler stages: (label, module, attribute). Nested stages are included in their parent.
STAGES = (
    ("whole request inside aiohttp (middlewares, handler)", "sidecar.tracing", "trace_requests"),
    ("save/search pipeline (every stage)", "sidecar.enforce.pipeline", "_stages"),
    ("  strict parse", "sidecar.enforce.memory", "_parse"),
    ("  key check + admission transaction", "sidecar.enforce.memory", "_admit"),
    ("  decision facts", "sidecar.enforce.memory", "_memory_facts"),
    ("  decision (input, Cedar, floor, decision log)", "sidecar.enforce.pipeline", "decide_and_record"),
    ("    Cedar call (orjson in and out, Rust)", "sidecar.policy.cedar", "_authorize"),
    ("  forward to kagent (serialize, send, read)", "sidecar.contentstore.kagent", "KagentMemory._call"),
    ("    serialize the body (orjson)", "sidecar.contentstore.kagent", "dumps"),
    ("  finish transaction (save)", "sidecar.state.admission", "AdmissionOps.finish_write"),
    ("  live filter of results (search)", "sidecar.state.ledger", "LedgerOps.filter_live"),
    ("  answer", "sidecar.enforce.memory", "json_answer"),
)


def _instrument(acc: dict[str, int]) -> None:
    """Wrap each stage so its CPU time on the event loop's thread adds up in ``acc`` (ns)."""
    import functools
    import importlib
    import inspect

    for label, module_name, attr in STAGES:
        owner: Any = importlib.import_module(module_name)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        acc.setdefault(label, 0)

        if inspect.iscoroutinefunction(original):

            def wrapped(*args: Any, _f: Any = original, _l: str = label, **kwargs: Any) -> Any:
                return _Timed(_f(*args, **kwargs), acc, _l)
        else:

            def wrapped(*args: Any, _f: Any = original, _l: str = label, **kwargs: Any) -> Any:
                start = time.thread_time_ns()
                try:
                    return _f(*args, **kwargs)
                finally:
                    acc[_l] += time.thread_time_ns() - start

        setattr(owner, name, functools.wraps(original)(wrapped))


STAGE_TIMES: dict[str, int] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--state", default="sqlite", help="sqlite, or a postgresql:// URL")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--totals",
        action="store_true",
        help="Only the CPU per save and per search, without stage timers or flame graphs (for A/B runs of two trees).",
    )
    args = parser.parse_args()
    configure_logging("warning")
    if not args.totals:
        # Before the gateway starts: the data app registers `guarded` handlers when it is built.
        _instrument(STAGE_TIMES)
    results = evloop.run(run(args.state, args.requests, args.out, stages=not args.totals))
    for name, us in results.items():
        print(
            f"{name}: {us:.0f} µs CPU per request"
            + ("" if " " in name else " (gateway, client and canned upstream in one process)")
        )


if __name__ == "__main__":
    main()
