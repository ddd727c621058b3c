"""The stand-in and kagent itself answer the observed request set identically, for each release.

Both run on PostgreSQL: the real kagent with pgvector and its own migrations, the stand-in with
its ``real[]`` copy of the table. Every request of tests/conformance/transcript.py goes to both;
status, Content-Type and the body (ids, share tokens and timestamps reduced to their shape, scores
rounded) must match, and so must the rows after each section. The stand-in models the release
under test (v0.9.11 or v0.10.0-rc3, whose section S adds sessions, share links and tasks). What it
deliberately does not model is listed in docs/conformance.md (and proved on the real kagent in
test_kagent_facts.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from sidecar.dev.devstack.pg import PgServer
from sidecar.dev.devstack.realkagent import RealKagent, start_real_kagent
from sidecar.dev.devstack.releases import RELEASES, KagentRelease
from sidecar.dev.devstack.stack import start_devstack
from sidecar.dev.devstack.store import DbFault
from tests.conformance.transcript import AGENT, NO_VECTOR, SECTION_S, TRANSCRIPT, Prune, Req, Rows, Sql, Step

pytestmark = pytest.mark.real_kagent

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TS_NANO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{1,9}Z$")
_TS_SEC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
_SHARE_TOKEN = re.compile(r"[0-9a-f]{48}")
#: One parameter per supported release, named by its tag.
RELEASE_PARAMS = [pytest.param(r, id=r.tag) for r in RELEASES.values()]


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str | None
    body: Any


def shape(value: Any) -> Any:
    """A JSON value with generated ids, timestamps and float noise reduced to what must be equal."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, str):
        if _UUID.fullmatch(value):
            return "<uuid>"
        if _SHARE_TOKEN.fullmatch(value):
            return "<share-token>"
        if _TS_NANO.match(value):
            return "<time.nanos>"
        if _TS_SEC.match(value):
            return "<time.seconds>"
        return value
    if isinstance(value, float):
        return round(value, 5)
    return value


async def ask(http: aiohttp.ClientSession, base: str, req: Req, kept: dict[str, str] | None = None) -> Answer:
    """Send ``req`` (``{name}`` in its path and headers replaced by what ``kept`` holds for this side)."""
    kept = kept if kept is not None else {}
    headers = {k: v.format_map(kept) for k, v in req.headers.items()}
    if req.payload() is not None:
        headers = {"Content-Type": "application/json", **headers}
    path = req.path.format_map(kept) if "{" in req.path and kept else req.path
    async with http.request(req.method, base + path, data=req.payload(), headers=headers) as resp:
        raw = await resp.read()
        ctype = resp.headers.get("Content-Type")
    try:
        parsed = json.loads(raw)
        body: Any = shape(parsed)
    except ValueError:
        parsed, body = None, raw
    if req.capture is not None and isinstance(parsed, dict) and isinstance(parsed.get("data"), dict):
        kept[req.capture] = str(parsed["data"].get("token"))
    if req.compare == "count":
        body = len(body) if isinstance(body, list) else body
    return Answer(resp.status, ctype, body)


@dataclass
class Side:
    """One kagent under test: where to send requests, its database and how to prune it."""

    base: str
    db: asyncpg.Connection
    prune_url: str
    kept: dict[str, str] = field(default_factory=dict)

    async def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in await self.db.fetch(sql)]


async def replay(http: aiohttp.ClientSession, real: Side, standin: Side, steps: list[Step]) -> list[str]:
    """Run every step on both sides; the differences, one line each."""
    diffs = []
    for step in steps:
        if isinstance(step, Req):
            got_real = await ask(http, real.base, step, real.kept)
            got_standin = await ask(http, standin.base, step, standin.kept)
            if got_real != got_standin:
                diffs.append(f"{step.name}: kagent {got_real} != stand-in {got_standin}")
        elif isinstance(step, Sql):
            for side in (real, standin):
                await side.db.execute(step.sql)
        elif isinstance(step, Rows):
            rows_real, rows_standin = await real.rows(step.sql), await standin.rows(step.sql)
            if rows_real != rows_standin:
                diffs.append(f"{step.name}: kagent rows {rows_real} != stand-in rows {rows_standin}")
        elif isinstance(step, Prune):
            for side in (real, standin):
                async with http.post(side.prune_url) as resp:
                    assert resp.status == 200, step.name
    return diffs


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def _kagent(pg_server: PgServer, tmp_path: Path, **kwargs: Any) -> RealKagent:
    db_url = pg_server.create_database(f"real_{tmp_path.name[-20:]}".replace("-", "_"))
    return await asyncio.to_thread(functools.partial(start_real_kagent, db_url, tmp_path / "kagent", **kwargs))


@pytest.mark.parametrize("release", RELEASE_PARAMS)
class TestDifferential:
    async def test_transcript_answers_and_rows_match(
        self,
        release: KagentRelease,
        pg_server: PgServer,
        pg_url: str,
        tmp_path: Path,
        http: aiohttp.ClientSession,
    ) -> None:
        """Every request of sections A-H (and S on v0.10) gets the same answer, and every table snapshot the
        same rows, from the stand-in modelling the release and from that release itself."""
        dev = await start_devstack(store_url=pg_url, stream_delay_s=0, agents=[AGENT], release=release)
        agents = {AGENT: f"{dev.kagent_url}/api/a2a/{AGENT}/"}
        kagent = await _kagent(pg_server, tmp_path, release=release, agents=agents)
        real_db, standin_db = await asyncpg.connect(kagent.db_url), await asyncpg.connect(pg_url)
        try:
            diffs = await replay(
                http,
                Side(kagent.url, real_db, kagent.admin_url + "/prune"),
                Side(dev.kagent_url, standin_db, dev.kagent_url + "/__devstack/prune"),
                [*TRANSCRIPT, *(SECTION_S if release.newer else [])],
            )
            assert not diffs, "\n".join(diffs)
            for log in (kagent.log_text(), dev.kagent_log()):
                assert "SENTINEL-7f3a9c" not in log  # saved content never reaches kagent's log
                assert '"msg":"added memory"' in log and '"userID":"u1"' in log
                assert '"user_id":"u-search"' in log  # the user_id query parameter of GET/DELETE is logged
        finally:
            await real_db.close()
            await standin_db.close()
            await dev.stop()
            kagent.stop()

    async def test_without_the_vector_track_every_memory_route_fails_alike(
        self, release: KagentRelease, pg_server: PgServer, tmp_path: Path, http: aiohttp.ClientSession
    ) -> None:
        """--database-vector-enabled=false (the chart's default): kagent's raw 500s, matched by the stand-in's fault."""
        kagent = await _kagent(pg_server, tmp_path, vector=False, release=release)
        dev = await start_devstack(stream_delay_s=0, release=release)
        dev.store.fault = DbFault()
        try:
            diffs = []
            for step in NO_VECTOR:
                assert isinstance(step, Req)
                got_real, got_standin = await ask(http, kagent.url, step), await ask(http, dev.kagent_url, step)
                if got_real != got_standin:
                    diffs.append(f"{step.name}: kagent {got_real} != stand-in {got_standin}")
            assert not diffs, "\n".join(diffs)
        finally:
            await dev.stop()
            kagent.stop()
