"""The OPA engine: real OPA servers loading bundles, fake ones for every way OPA can fail."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import REGISTRY

from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.opa import RETRIES, OpaEngine, parse_verdict
from sidecar.policy.opa_bundle import check_layout, write_folder, write_tarball
from sidecar.policy.opa_server import RUN_FLAGS, start_opa, tool_binary
from sidecar.policy.pack import PackError, fingerprint, read_pack
from sidecar.policy.runtime import PolicyRuntime
from sidecar.reasons import Action, Reason
from tests.support.policy import MakeInput, OpaServers, policy_settings

FAKE_REVISION = "0123456789abcdef"


def _fake_opa(
    answer: Any, status: int = 200, provenance: bool = True, asked: list[int] | None = None
) -> web.Application:
    """An OPA stand-in holding one memgov bundle; its decision answers name that bundle's revision.

    ``asked`` collects one entry per decision query received.
    """

    async def system(request: web.Request) -> web.Response:
        bundles = {"b": {"manifest": {"revision": FAKE_REVISION, "roots": ["memgov"]}}}
        return web.json_response({"result": {"bundles": bundles, "version": {"version": "1.22.3"}}})

    async def decide(request: web.Request) -> web.Response:
        if asked is not None:
            asked.append(status)
        body = answer
        if isinstance(answer, dict) and provenance:
            body = {**answer, "provenance": {"bundles": {"b": {"revision": FAKE_REVISION}}}}
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_get("/v1/data/system", system)
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
            await engine.evaluate(make_input("save"))
        await engine.close()
        assert err.value.kind == "timeout"

    @pytest.mark.parametrize(("answer", "status"), [({"code": "internal_error"}, 500), ({}, 200)])
    async def test_errors_and_undefined_are_unavailable(
        self, aiohttp_server: Any, make_input: MakeInput, answer: dict[str, Any], status: int
    ) -> None:
        """A server error or an undefined decision of the expected pack yields no verdict."""
        server = await aiohttp_server(_fake_opa(answer, status))
        engine = OpaEngine(str(server.make_url("/")), 2.0)
        await engine.commit(FAKE_REVISION)
        with pytest.raises(EngineUnavailable) as err:
            await engine.evaluate(make_input("save"))
        await engine.close()
        assert err.value.kind == ("undefined" if status == 200 else "error")

    @pytest.mark.parametrize(
        ("status", "budget_s", "kind", "asked"),
        [
            (503, 5.0, "error", [503]),
            (502, 5.0, "error", [502] * (1 + RETRIES)),
            (502, 0.25, "timeout", [502]),
        ],
        ids=["503-not-retried", "502-retried-as-set", "back-off-past-the-budget"],
    )
    async def test_opa_errors_are_retried_only_within_the_budget(
        self, aiohttp_server: Any, make_input: MakeInput, status: int, budget_s: float, kind: str, asked: list[int]
    ) -> None:
        """A 503 is asked once, a gateway error RETRIES more times, and never past the budget (0.3 s back-off)."""
        seen: list[int] = []
        server = await aiohttp_server(_fake_opa({"code": "unavailable"}, status, asked=seen))
        engine = OpaEngine(str(server.make_url("/")), budget_s)
        try:
            await engine.commit(FAKE_REVISION)
            with pytest.raises(EngineUnavailable) as err:
                await engine.evaluate(make_input("save"))
        finally:
            await engine.close()
        assert (err.value.kind, seen) == (kind, asked)

    @pytest.mark.parametrize(
        "url",
        ["ftp://opa:8181", "http://opa:8181/prefix", "http://opa:8181/?x=1", "http://user:pw@opa:8181", "http://:8181"],
        ids=["scheme", "path", "query", "credentials", "no-host"],
    )
    def test_opa_url_names_the_server_only(self, url: str) -> None:
        """The client reaches OPA's API at the server's root, so anything else in opa_url is refused."""
        with pytest.raises(ValueError, match="opa_url"):
            OpaEngine(url, 1.0)

    async def test_unreachable_opa_leaves_the_runtime_unready_and_closed(
        self, pack_copy: Path, make_input: MakeInput, unused_tcp_port: int
    ) -> None:
        """With OPA down at start, no pack is live and every decision is policy_unavailable."""
        url = f"http://127.0.0.1:{unused_tcp_port}"
        runtime = await PolicyRuntime.start(policy_settings(pack_copy), engine="opa", opa_url=url)
        try:
            assert not runtime.ready
            for base, action in [
                ("invoke", Action.REWRITE_DISABLED),
                ("search", Action.EMPTY_RESULT),
                ("save", Action.DENY),
            ]:
                decision = await runtime.decide(make_input(base))
                assert (decision.action, decision.reasons) == (action, [Reason.POLICY_UNAVAILABLE])
        finally:
            await runtime.close()


class TestBundle:
    def test_policy_files_must_stay_under_the_bundle_root(self) -> None:
        """OPA refuses a bundle whose files leave its root, so the pack is refused first."""
        check_layout({"rego/a.rego": "package memgov.decision\n", "rego/b.rego": "package memgov.extra\n"})
        with pytest.raises(PackError, match="package"):
            check_layout({"rego/a.rego": "package other\n\nx := 1\n"})
        with pytest.raises(PackError, match="no .rego"):
            check_layout({})

    def test_folder_is_the_pack_plus_a_manifest(self, pack_copy: Path, tmp_path: Path) -> None:
        """The bundle folder reads back as the same pack, and its manifest names that pack's revision."""
        pack = read_pack(pack_copy)
        write_folder(pack, tmp_path / "bundle")
        assert read_pack(tmp_path / "bundle").revision == pack.revision
        assert json.loads((tmp_path / "bundle" / ".manifest").read_text()) == {
            "revision": pack.revision,
            "roots": ["memgov"],
        }
        write_folder(pack, tmp_path / "bundle")  # an init container that runs again replaces it
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "notes.txt").write_text("keep")
        with pytest.raises(PackError, match="not a bundle folder"):
            write_folder(pack, tmp_path / "mine")

    def test_opa_loads_the_tarball(self, pack_copy: Path, tmp_path: Path, make_input: MakeInput) -> None:
        """The .tar.gz form is a bundle the real OPA loads and reports the revision of."""
        pack = read_pack(pack_copy)
        tarball = tmp_path / "memgov.tar.gz"
        write_tarball(pack, tarball)
        port = _port()
        proc = subprocess.Popen(
            [tool_binary("opa"), "run", "--server", f"--addr=127.0.0.1:{port}", *RUN_FLAGS, "--bundle", str(tarball)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            async def check() -> None:
                engine = OpaEngine(f"http://127.0.0.1:{port}", 5.0)
                try:
                    for _ in range(200):  # OPA answers once it has started; bounded wait
                        try:
                            await engine.commit(pack.revision)
                            break
                        except EngineUnavailable as exc:
                            assert exc.kind == "error"
                            await asyncio.sleep(0.05)
                    assert (await engine.evaluate(make_input("save"))).allowed
                finally:
                    await engine.close()

            asyncio.run(check())
        finally:
            proc.terminate()
            proc.wait(10)

    def test_opa_refuses_a_pack_that_does_not_compile(self, pack_copy: Path) -> None:
        """OPA owns compilation: a broken Rego file stops it at start, naming the file."""
        (pack_copy / "rego" / "memgov" / "decision" / "broken.rego").write_text(
            "package memgov.decision\n\ndeny contains x if {\n"
        )
        with pytest.raises(RuntimeError, match="broken.rego"):
            start_opa(pack_copy)


class TestRevision:
    async def test_ready_only_when_opa_serves_the_same_pack(
        self, opa: OpaServers, pack_copy: Path, tmp_path: Path, make_input: MakeInput
    ) -> None:
        """An OPA serving another revision keeps memgov unready and every decision closed, until it matches."""
        other = tmp_path / "other"
        shutil.copytree(pack_copy, other)
        (other / "rego" / "memgov" / "decision" / "extra.rego").write_text("package memgov.decision\n\nx := 1\n")
        url = opa.serve(other)
        runtime = await PolicyRuntime.start(
            policy_settings(pack_copy, reload_interval_s=0.05), engine="opa", opa_url=url
        )
        try:
            ready, detail = await runtime.ready_check()
            assert not ready and detail["opa_revision"] == fingerprint(other) != fingerprint(pack_copy)
            assert (await runtime.decide(make_input("save"))).reasons == [Reason.POLICY_UNAVAILABLE]
            loaded = runtime.next_reload()
            opa.replace(url, pack_copy)
            while not await asyncio.wait_for(loaded, 30):
                loaded = runtime.next_reload()
            ready, detail = await runtime.ready_check()
            assert ready and (detail["revision"], detail["opa_revision"]) == (fingerprint(pack_copy),) * 2
            assert (await runtime.decide(make_input("save"))).allowed
        finally:
            await runtime.close()

    async def test_opa_switching_packs_under_memgov_fails_closed(
        self, opa: OpaServers, pack_copy: Path, tmp_path: Path, make_input: MakeInput
    ) -> None:
        """When OPA starts serving another bundle, its answers are refused and memgov stops being ready."""
        url = opa.serve(pack_copy)
        runtime = await PolicyRuntime.start(policy_settings(pack_copy), engine="opa", opa_url=url)
        try:
            assert _ready(runtime)  # a call, so the check below reads the flag again
            other = tmp_path / "other"
            shutil.copytree(pack_copy, other)
            (other / "data" / "federation.yaml").write_text((other / "data" / "federation.yaml").read_text() + "\n")
            opa.replace(url, other)
            before = _sample("memgov_policy_engine_failures_total", {"engine": "opa", "kind": "revision_mismatch"})
            decision = await runtime.decide(make_input("save"))
            assert decision.reasons == [Reason.POLICY_UNAVAILABLE] and not runtime.ready
            assert (
                _sample("memgov_policy_engine_failures_total", {"engine": "opa", "kind": "revision_mismatch"})
                == before + 1
            )
            assert _sample("memgov_policy_opa_bundle_info", {"revision": fingerprint(other)}) == 1.0
        finally:
            await runtime.close()

    def test_opa_without_a_bundle_is_a_mismatch(self, pack_copy: Path) -> None:
        """An OPA that holds no bundle at all serves no revision: memgov's pack is refused and the engine stale."""
        port = _port()
        proc = subprocess.Popen(
            [tool_binary("opa"), "run", "--server", f"--addr=127.0.0.1:{port}", *RUN_FLAGS],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            async def check() -> tuple[str, bool, str]:
                engine = OpaEngine(f"http://127.0.0.1:{port}", 5.0)
                try:
                    for _ in range(200):  # OPA answers once it has started; bounded wait
                        try:
                            await engine.commit(read_pack(pack_copy).revision)
                        except EngineUnavailable as exc:
                            if exc.kind != "error":
                                return exc.kind, engine.stale, engine.served
                        await asyncio.sleep(0.05)
                    raise AssertionError("OPA never answered")
                finally:
                    await engine.close()

            assert asyncio.run(check()) == ("revision_mismatch", True, "")
        finally:
            proc.terminate()
            proc.wait(10)

    async def test_restarted_opa_answers_again(self, opa: OpaServers, pack_copy: Path, make_input: MakeInput) -> None:
        """While OPA is down decisions fail closed; once it is back with the same bundle they flow again."""
        url = opa.serve(pack_copy)
        runtime = await PolicyRuntime.start(policy_settings(pack_copy), engine="opa", opa_url=url)
        try:
            opa.stop(url)
            assert (await runtime.decide(make_input("save"))).reasons == [Reason.POLICY_UNAVAILABLE]
            opa.replace(url, pack_copy)
            assert (await runtime.decide(make_input("save"))).allowed and runtime.ready
        finally:
            await runtime.close()

    async def test_answer_without_provenance_is_refused(self, aiohttp_server: Any, make_input: MakeInput) -> None:
        """An OPA answer that does not name the expected bundle revision is not a decision."""
        server = await aiohttp_server(_fake_opa({"result": {"allow": True, "reasons": []}}, provenance=False))
        engine = OpaEngine(str(server.make_url("/")), 2.0)
        try:
            await engine.commit(FAKE_REVISION)
            assert not engine.stale
            with pytest.raises(EngineUnavailable) as err:
                await engine.evaluate(make_input("save"))
            assert err.value.kind == "revision_mismatch" and engine.stale
        finally:
            await engine.close()

    async def test_batch_matches_single_queries(self, opa: OpaServers, pack_copy: Path, make_input: MakeInput) -> None:
        """A prefetch fan-out of 8 answers like 8 single queries."""
        engine = OpaEngine(opa.serve(pack_copy), 5.0)
        try:
            await engine.commit(engine.prepare(read_pack(pack_copy)))
            inputs = [make_input("prefetch", {"budget.prefetch_ok": i < 6}) for i in range(8)]
            assert await engine.evaluate_many(inputs) == [await engine.evaluate(i) for i in inputs]
        finally:
            await engine.close()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _ready(runtime: PolicyRuntime) -> bool:
    return runtime.ready
