"""kagent's own agent runtimes through memgov, against the stand-in and each release of kagent itself.

Each upstream brings its release's runtimes: kagent-adk 0.9.11 with v0.9.11 (and the stand-in's
default model), kagent-adk 0.10.4 with v0.10.0-rc3 (and the stand-in's v0.10 model). The Python
runtime runs in its own venv (tests/enforce/kagent_runtime_driver.py): KagentMemoryService with
kagent's token hooks and OpenAI-provider embeddings through memgov's embedding route, and an ADK
agent with kagent's memory tools and auto-save callback. The Go runtime (go/adk of the same
release) runs as conformance/kagent/runtime/main.go built in kagent's tree: its memory service,
token-service HTTP client, and the preload/load/save memory tools. The test plays the bridge: it
makes the scope, takes the session key memgov hands kagent, and gives that key to the runtime.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from sidecar.control.client import ControlClient
from sidecar.dev.devstack.deployment import pack_with_limits
from sidecar.dev.devstack.realkagent import AUTH_MODES, build
from sidecar.identity.tokens import mint_subject
from tests.support.sentinel import assert_absent, make_sentinel
from tests.support.stack import AGENT, ALICE, APP, BOB, ROOM_B, Stack
from tests.support.upstream import sa_token

#: kagent's own runtime code is exercised on every upstream, so all of this belongs to ``make conformance``.
pytestmark = pytest.mark.real_kagent
DRIVER = Path(__file__).with_name("kagent_runtime_driver.py")


class Runtime:
    """One kagent runtime session: AGENT's runtime for one user, over the driver's line protocol.

    Lines are written and read in a thread, so a Python driver process outlives the event loop
    of the test that started it and serves the next test's session."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    def _line(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write((json.dumps(message) + "\n").encode())
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        assert line, "the kagent runtime exited"
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def __call__(self, op: str, **args: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self._line, {"op": op, **args})

    async def logs(self) -> str:
        """Everything kagent's runtime logged so far in this session, one line per record."""
        return "\n".join((await self("logs"))["lines"])


#: Python driver processes between sessions, per kagent-adk release, in this test process (importing
#: kagent-adk takes seconds).
_IDLE: dict[str, list[subprocess.Popen[bytes]]] = {}


def _start(argv: list[str], stderr_path: Path) -> subprocess.Popen[bytes]:
    with open(stderr_path, "ab") as stderr:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "OPENAI_API_KEY": "test-provider-key"},
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=60)


@pytest.fixture(scope="session", autouse=True)
def _idle_drivers() -> Iterator[None]:
    """Stop the pooled driver processes when the session ends."""
    yield
    for idle in _IDLE.values():
        while idle:
            _stop(idle.pop())


@asynccontextmanager
async def kagent_runtime(
    stack: Stack, user_id: str, tmp_path: Path, *, go: bool = False, **cfg: Any
) -> AsyncIterator[Runtime]:
    """kagent's Python (or Go) runtime of the upstream's release for AGENT, with KAGENT_URL = memgov's data plane."""
    release = stack.upstream.release
    idle = _IDLE.setdefault(release.adk, [])
    ns, name = AGENT.split("/")
    config = {
        "kagent_url": stack.gw.data_url,
        "embedding_url": f"{stack.gw.data_url}/embeddings/{ns}/{name}/v1",
        "app_name": APP,
        "agent": name.replace("-", "_"),
        "user_id": user_id,
        **cfg,
    }
    if go:
        config["token"] = sa_token(AGENT)
        proc = _start([await asyncio.to_thread(build, "runtime", release)], tmp_path / "kagent-runtime.stderr")
    else:
        token = tmp_path / "kagent-token"
        token.write_text(sa_token(AGENT))
        config["token_path"] = str(token)
        proc = idle.pop() if idle else None
        if proc is None or proc.poll() is not None:
            stderr = tmp_path.parent / f"kagent-runtime-{os.getpid()}-{time.monotonic_ns()}.stderr"
            proc = _start([await asyncio.to_thread(build, "client", release), str(DRIVER)], stderr)
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(config) + "\n").encode())
    proc.stdin.flush()
    runtime = Runtime(proc)
    ended = False
    try:
        yield runtime
        if not go:
            ended = (await runtime("end")) == {"ended": True}
    finally:
        if ended:
            idle.append(proc)
        else:
            await asyncio.to_thread(_stop, proc)


async def _scope_rows(stack: Stack, scope_id: str) -> list[Any]:
    """kagent's rows of the entries memgov's ledger recorded for the scope."""
    ids = {e.entry_id for e in await stack.parts.store.ledger.entries_of_scope(scope_id)}
    return [r for r in await stack.rows() if r.id in ids]


@pytest.mark.kagent(standins=("0.9", "0.10"), auth_modes=AUTH_MODES)
class TestKagentRuntime:
    async def test_consented_saves_land_under_the_storage_key_and_come_back(self, stack: Stack, tmp_path: Path):
        """add_memory, the save tool and the fifth-turn auto-save batch land; search, load and prefetch recall them."""
        scope = await stack.scope()
        key = await stack.session_key()
        facts = ["alice prefers oolong tea in the morning", "alice works on the billing service"]
        async with kagent_runtime(stack, key, tmp_path, facts=facts) as rt:
            await rt("add_memory", content="alice keeps a cat called Miso")
            saved = await rt("turn", session="s1", text="remember: alice plays the cello on sundays")
            assert "Successfully saved" in " ".join(saved["replies"])
            for i in range(4):  # turns 2-5 of s1: the fifth triggers kagent's auto-save callback
                await rt("turn", session="s1", text=f"small talk {i}")
            assert (await rt("drain"))["drained"] == 1
            found = await rt("search_memory", query="alice keeps a cat called Miso")
            loaded = await rt("turn", session="s2", text="recall: what instrument does alice play on sundays")
            prefetched = await rt("turn", session="s3", text="Does alice still work on the billing service these days?")
        rows = await _scope_rows(stack, scope.scope_id)
        assert sorted(r.content for r in rows) == sorted(
            ["alice keeps a cat called Miso", "alice plays the cello on sundays", *facts]
        )
        assert len({r.user_id for r in rows}) == 1 and rows[0].user_id not in (key, ALICE)
        assert rows[0].agent_name == APP
        assert "alice keeps a cat called Miso" in [m["text"] for m in found["memories"]]
        assert "cello" in " ".join(loaded["replies"])
        assert "billing service" in " ".join(prefetched["replies"])

    async def test_forget_one_rotates_and_the_runtime_still_finds_the_rest_in_order(self, stack: Stack, tmp_path: Path):
        """Under rest, forget-one rotates the namespace, re-embedding with the model declared for the agent (the
        one kagent-adk embeds with, at 768 dimensions): the runtime's own query then finds the kept
        memories in the order it found them before, and the forgotten one is in no row of kagent's table."""
        scope = await stack.scope()
        key = await stack.session_key()
        # Three: the packaged limits allow a burst of three explicit saves per sender and agent.
        facts = [
            "alice drinks green tea every morning",
            "alice likes green tea with honey",
            "alice brews green tea for guests",
        ]
        query = "what green tea does alice drink"
        async with kagent_runtime(stack, key, tmp_path) as rt:
            for fact in facts:
                await rt("add_memory", content=fact)
            before = [m["text"] for m in (await rt("search_memory", query=query))["memories"]]
            doomed = next(r.id for r in await _scope_rows(stack, scope.scope_id) if r.content == facts[1])
            control = ControlClient(
                stack.gw.control_url,
                lambda: mint_subject(ALICE, stack.bridge_key, "HS256", now=int(time.time())),
                session=stack.http,
            )
            record = await control.forget(scope.scope_id, doomed)
            after = [m["text"] for m in (await rt("search_memory", query=query))["memories"]]
        assert record.rotated_by is not None
        assert (record.physical_deletion, record.rotated_by.state) == ("complete", "verified")
        assert sorted(before) == sorted(facts) and after == [t for t in before if t != facts[1]]
        rows = await _scope_rows(stack, scope.scope_id)
        assert sorted(r.content for r in rows) == sorted(f for f in facts if f != facts[1])
        assert all(r.content != facts[1] for r in await stack.rows())

    async def test_denied_saves_and_empty_searches_do_not_break_a_turn(self, stack: Stack, tmp_path: Path):
        """Without consent saves are refused and searches are 200 []: the runtime answers anyway, content-free."""
        await stack.scope()  # someone else's consented scope keeps the agent's embedding route open
        bob = await stack.scope(mxid=BOB, room_id=ROOM_B, consent=False)
        key = stack.parts.keys.session_key(bob.scope_id, bob.generation)
        fact = make_sentinel("runtime")
        async with kagent_runtime(stack, key, tmp_path) as rt:
            await rt("add_memory", content=f"bob said {fact}")
            saved = await rt("turn", session="s1", text=f"remember: bob said {fact}")
            loaded = await rt("turn", session="s2", text="recall: what did bob say")
            found = await rt("search_memory", query="what did bob say")
            logs = await rt.logs()
        assert saved["replies"] and loaded["replies"] and found == {"memories": []}
        assert await _scope_rows(stack, bob.scope_id) == [] and await stack.rows() == []
        refusals = [line for line in logs.splitlines() if "Response body" in line]  # kagent-adk logs error bodies
        assert refusals and all("consent_disabled" in line for line in refusals)
        assert_absent(fact, *refusals, stack.kagent_log())

    async def test_withdrawal_fences_the_background_auto_save(self, stack: Stack, tmp_path: Path):
        """A withdrawal while the auto-save is summarising: its batch is refused and nothing reaches kagent."""
        scope = await stack.scope()
        await stack.scope(mxid=BOB, room_id=ROOM_B)  # keeps the agent's embedding route open after the withdrawal
        key = await stack.session_key()
        async with kagent_runtime(stack, key, tmp_path, facts=["alice is moving to Porto"], hold_autosave=True) as rt:
            for i in range(5):
                await rt("turn", session="s1", text=f"turn {i}")
            await stack.parts.store.scopes.withdraw(scope.scope_id, stack.clock())
            await rt("release")
            assert (await rt("drain"))["drained"] == 1
            logs = await rt.logs()
        assert "Response body" in logs and ("consent_disabled" in logs or "stale_generation" in logs)
        assert await _scope_rows(stack, scope.scope_id) == [] and await stack.rows() == []


@pytest.mark.kagent(standins=("0.9", "0.10"), auth_modes=AUTH_MODES)
class TestKagentGoRuntime:
    async def test_saves_land_under_the_storage_key_and_come_back(self, stack: Stack, tmp_path: Path):
        """The save_memory tool and AddSessionToMemory land; SearchMemory and the preload tool recall."""
        scope = await stack.scope()
        key = await stack.session_key()
        async with kagent_runtime(stack, key, tmp_path, go=True) as rt:
            saved = await rt("turn", session="s1", text="remember: alice plays the cello on sundays")
            assert (await rt("add_session", session="s1"))["error"] == ""
            found = await rt("search", query="alice plays the cello on sundays")
            preloaded = await rt("turn", session="s2", text="what does alice play on sundays")
        assert "Successfully saved" in " ".join(saved["replies"]) and not saved["errors"]
        rows = await _scope_rows(stack, scope.scope_id)
        assert len(rows) == 2 and "alice plays the cello on sundays" in [r.content for r in rows]
        assert len({r.user_id for r in rows}) == 1 and rows[0].user_id not in (key, ALICE)
        assert "alice plays the cello on sundays" in found["memories"] and found["error"] == ""
        assert "cello" in " ".join(preloaded["replies"])

    async def test_denied_saves_and_empty_searches_do_not_break_a_turn(self, stack: Stack, tmp_path: Path):
        """Without consent the save tool reports a failure to the model and searches are empty; turns complete."""
        await stack.scope()
        bob = await stack.scope(mxid=BOB, room_id=ROOM_B, consent=False)
        key = stack.parts.keys.session_key(bob.scope_id, bob.generation)
        async with kagent_runtime(stack, key, tmp_path, go=True) as rt:
            saved = await rt("turn", session="s1", text="remember: bob likes jazz")
            found = await rt("search", query="bob likes jazz")
            preloaded = await rt("turn", session="s2", text="what does bob like")
        assert saved["replies"] and not saved["errors"] and "403" in " ".join(saved["replies"])
        assert found == {"memories": [], "error": ""}
        assert preloaded["replies"] and not preloaded["errors"]
        assert await stack.rows() == []


#: Five explicit memories for one add_memory call.
FIVE = [f"alice's fact number {i}" for i in range(5)]


@pytest.mark.kagent(releases=("0.10",), standins=("0.10",), auth_modes=AUTH_MODES)
class TestSeveralEntries:
    """kagent-adk 0.10.4's ``add_memory`` takes several entries and posts once per entry."""

    async def _add_five(self, stack: Stack, tmp_path: Path) -> tuple[list[str], list[str]]:
        """One add_memory of FIVE in a consented scope: the contents kagent kept, and the refusals kagent-adk logged.

        kagent-adk raises at the first refused entry, so it never sends the ones after it."""
        scope = await stack.scope()
        key = await stack.session_key()
        async with kagent_runtime(stack, key, tmp_path) as rt:
            assert await rt("add_memory", contents=FIVE) == {"error": "HTTPStatusError", "status": 403}
            logs = await rt.logs()
        kept = sorted(r.content for r in await _scope_rows(stack, scope.scope_id))
        return kept, [line for line in logs.splitlines() if "Response body" in line]

    async def test_each_entry_is_rate_limited(self, stack: Stack, tmp_path: Path):
        """Five entries against the burst of three explicit saves: three land, the fourth is refused with
        rate_limited."""
        kept, refusals = await self._add_five(stack, tmp_path)
        assert kept == FIVE[:3]
        assert len(refusals) == 1 and "rate_limited" in refusals[0]

    async def test_each_entry_pays_the_hourly_budget(self, make_stack, tmp_path: Path):
        """With the rate limit out of the way, each entry costs a save and an embedding item of the scope's
        hourly budget: six operations fit three entries of five."""
        pack = pack_with_limits(tmp_path, {"hourly_operations": 6, "rate_per_minute": 60, "rate_burst": 60})
        stack = await make_stack(policy={"dir": str(pack), "reload_interval_s": 0})
        kept, refusals = await self._add_five(stack, tmp_path)
        assert kept == FIVE[:3]
        assert len(refusals) == 1 and "hourly_budget_exhausted" in refusals[0]
