"""The OPA engine: a real OPA server for pushes and answers, fake ones for every way OPA can fail."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.model import Action
from sidecar.policy.opa import MODULE_ID, OpaEngine, merge_modules, parse_verdict
from sidecar.policy.pack import PackError, read_pack
from sidecar.policy.runtime import PolicyRuntime
from sidecar.reasons import Reason
from tests.policy.conftest import MakeInput, policy_settings


def _fake_opa(answer: Any, status: int = 200) -> web.Application:
    async def decide(request: web.Request) -> web.Response:
        return web.json_response(answer, status=status)

    app = web.Application()
    app.router.add_post("/v1/data/memgov/decision/result", decide)
    return app


@pytest.fixture
async def stalled_opa(aiohttp_server: Any) -> AsyncIterator[TestServer]:
    """An OPA stand-in that accepts the query and never answers."""
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/data/memgov/decision/result", hang)
    server = await aiohttp_server(app)
    yield server
    release.set()


class TestParseVerdict:
    @pytest.mark.parametrize(
        ("body", "allowed", "reasons"),
        [
            ({"result": {"allow": True, "reasons": []}}, True, set()),
            ({"result": {"allow": False, "reasons": ["consent_missing"]}}, False, {"consent_missing"}),
            ({"result": {"allow": "true", "reasons": []}}, False, set()),
            ({"result": {"reasons": []}}, False, set()),
            ({"result": {"allow": 1}}, False, set()),
        ],
        ids=["allow", "deny", "string-true", "missing-allow", "number"],
    )
    def test_only_a_literal_true_allows(self, body: dict[str, Any], allowed: bool, reasons: set[str]) -> None:
        """A missing or odd allow field is a denial."""
        verdict = parse_verdict(body)
        assert (verdict.allowed, set(verdict.reasons)) == (allowed, reasons)

    @pytest.mark.parametrize(
        ("body", "kind"),
        [
            ({}, "undefined"),
            ({"result": "yes"}, "malformed"),
            ({"result": {"allow": True, "reasons": "x"}}, "malformed"),
        ],
    )
    def test_unusable_answers_raise(self, body: dict[str, Any], kind: str) -> None:
        """An undefined or malformed answer cannot be turned into a decision."""
        with pytest.raises(EngineUnavailable) as err:
            parse_verdict(body)
        assert err.value.kind == kind


class TestFailClosed:
    async def test_timeout_is_unavailable(self, stalled_opa: TestServer, make_input: MakeInput) -> None:
        """An OPA that does not answer within opa_timeout_s yields no verdict."""
        engine = OpaEngine(str(stalled_opa.make_url("/")), 0.2)
        with pytest.raises(EngineUnavailable) as err:
            await engine.decide(make_input("save"))
        await engine.close()
        assert err.value.kind == "timeout"

    @pytest.mark.parametrize(("answer", "status"), [({"code": "internal_error"}, 500), ({}, 200)])
    async def test_errors_and_undefined_are_unavailable(
        self, aiohttp_server: Any, make_input: MakeInput, answer: dict[str, Any], status: int
    ) -> None:
        """A server error or an undefined decision yields no verdict; undefined marks the engine stale."""
        server = await aiohttp_server(_fake_opa(answer, status))
        engine = OpaEngine(str(server.make_url("/")), 2.0)
        with pytest.raises(EngineUnavailable):
            await engine.decide(make_input("save"))
        await engine.close()
        assert engine.stale is (status == 200)

    async def test_unreachable_opa_leaves_the_runtime_unready_and_closed(
        self, pack_copy: Path, make_input: MakeInput, unused_tcp_port: int
    ) -> None:
        """With OPA down at start, no pack is live and every decision is policy_unavailable."""
        url = f"http://127.0.0.1:{unused_tcp_port}"
        runtime = await PolicyRuntime.start(policy_settings(pack_copy), engine="opa", opa_url=url)
        try:
            assert not runtime.ready
            for base, action in [("invoke", Action.REWRITE_DISABLED), ("search", Action.EMPTY_RESULT),
                                 ("save", Action.DENY)]:
                decision = await runtime.decide(make_input(base))
                assert (decision.action, decision.reasons) == (action, [Reason.POLICY_UNAVAILABLE])
        finally:
            await runtime.close()


class TestPush:
    def test_files_merge_into_one_module(self) -> None:
        """The pack's files become one module, so one PUT swaps the whole pack at once."""
        merged = merge_modules({"rego/a.rego": "package memgov.decision\n\nx := 1\n",
                                "rego/b.rego": "package memgov.decision\n\nimport data.y\n\nz := 2\n"})
        assert merged.count("package memgov.decision") == 1 and "import data.y" in merged

    def test_other_packages_are_refused(self) -> None:
        """Every pushed file must be in package memgov.decision."""
        with pytest.raises(PackError, match="package"):
            merge_modules({"rego/a.rego": "package other\n\nx := 1\n"})

    async def test_rejected_pack_keeps_the_previous_one(
        self, opa_url: str, pack_copy: Path, make_input: MakeInput
    ) -> None:
        """When OPA will not compile a new pack, the old pack keeps answering."""
        engine = OpaEngine(opa_url, 5.0)
        try:
            await engine.commit(engine.prepare(read_pack(pack_copy)))
            (pack_copy / "rego" / "memgov" / "decision" / "broken.rego").write_text(
                "package memgov.decision\n\ndeny contains x if {\n"
            )
            with pytest.raises(PackError):
                await engine.commit(engine.prepare(read_pack(pack_copy)))
            assert (await engine.decide(make_input("save"))).allowed
        finally:
            await engine.close()

    async def test_opa_that_lost_the_pack_gets_it_again(
        self, opa_url: str, pack_copy: Path, make_input: MakeInput
    ) -> None:
        """After OPA loses the pack (a restart), decisions fail closed until the watcher pushes it again."""
        runtime = await PolicyRuntime.start(
            policy_settings(pack_copy, reload_interval_s=0.05), engine="opa", opa_url=opa_url
        )
        try:
            async with aiohttp.ClientSession() as http:
                async with http.delete(f"{opa_url}/v1/policies/{MODULE_ID}") as resp:
                    assert resp.status == 200
            pushed = runtime.next_reload()
            lost = await runtime.decide(make_input("save"))
            assert lost.reasons == [Reason.POLICY_UNAVAILABLE] and not runtime.ready
            assert await asyncio.wait_for(pushed, 30)
            assert runtime.ready and (await runtime.decide(make_input("save"))).allowed
        finally:
            await runtime.close()

    async def test_batch_matches_single_queries(self, opa_url: str, pack_copy: Path, make_input: MakeInput) -> None:
        """A prefetch fan-out of 8 queried in one round trip answers like 8 single queries."""
        engine = OpaEngine(opa_url, 5.0)
        try:
            await engine.commit(engine.prepare(read_pack(pack_copy)))
            inputs = [make_input("prefetch", {"budget.prefetch_ok": i < 6}) for i in range(8)]
            assert await engine.decide_many(inputs) == [await engine.decide(i) for i in inputs]
        finally:
            await engine.close()
