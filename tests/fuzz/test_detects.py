"""The fuzzer against a live stack: quiet on correct answers, loud on every planted breakage.

Breakage is planted by swapping one handler of the running data plane for a misbehaving one, so
these tests hold whatever the gateway's own handlers do.
"""

from __future__ import annotations

from aiohttp import web

from sidecar.dev.fuzz.cases import Case, Request, Setup
from sidecar.dev.fuzz.chaos import Fault
from sidecar.dev.fuzz.cli import fuzz, summary
from sidecar.dev.fuzz.jsondoc import Arr, Doc, Obj, Ph, Str, Vec
from sidecar.dev.fuzz.run import CaseRun
from sidecar.dev.fuzz.run_data import run_data_case
from sidecar.dev.fuzz.stack import FuzzStack
from sidecar.logs import get_logger
from sidecar.proxy import HANDLERS
from sidecar.routes import Operation, RouteClass, RouteMatch

SEARCH = Doc(
    Obj(
        (
            ("agent_name", "kagent__NS__k8s_agent"),
            ("user_id", Ph("KEY")),
            ("vector", Vec("valid")),
            ("note", Str((Ph("S:query"),))),
        )
    )
)


MESSAGE = Obj(
    (
        ("role", "user"),
        ("messageId", "m1"),
        ("parts", Arr((Obj((("kind", "text"), ("text", Str((Ph("S:msg"),))))),))),
        ("contextId", "c1"),
    )
)
INVOKE = Request(
    "POST",
    ("/api/a2a/kagent/k8s-agent/",),
    (("X-Agent-Name", "kagent__NS__k8s_agent"), ("X-Memgov-Context", Ph("CTX")), ("Content-Type", "application/json")),
    Doc(Obj((("jsonrpc", "2.0"), ("id", 1), ("method", "message/send"), ("params", Obj((("message", MESSAGE),)))))),
)
SILENT_KAGENT = Fault("kagent", "delay", "/", 400, Ph("S:fault"))


def kinds(outcome) -> set[str]:
    return {f.kind for f in outcome.failures}


def swap(stack: FuzzStack, cls: RouteClass, handler) -> None:
    stack.gw.runners[0].app[HANDLERS][cls] = handler


class TestQuietOnCorrectAnswers:
    async def test_passthrough_relayed(self, stack: FuzzStack) -> None:
        """A plain passthrough call, relayed byte for byte, breaks no contract."""
        case = Case(
            "data",
            "passthrough",
            Request(
                "POST",
                ("/api/feedback",),
                (("Content-Type", "application/json"),),
                Doc(Obj((("note", Str((Ph("S:body"),))),))),
            ),
        )
        outcome = await run_data_case(stack, case)
        assert outcome.status == 200 and outcome.failures == []

    async def test_relayed_upstream_error_on_passthrough(self, stack: FuzzStack) -> None:
        """kagent's own error text may come back on a passthrough route: it is the caller's channel."""
        case = Case(
            "data",
            "passthrough",
            Request("GET", ("/api/sessions",)),
            fault=Fault("kagent", "status", "/api/sessions", 500),
        )
        outcome = await run_data_case(stack, case)
        assert outcome.status == 500 and outcome.failures == []

    async def test_forwarded_invoke_whose_agent_stays_silent(self, stack: FuzzStack) -> None:
        """An allowed invocation whose agent outlives the read timeout: 504 with the failure (deny,
        upstream_unavailable) in the header, judged by where the request went, not as a policy denial."""
        case = Case("data", "invoke", INVOKE, Setup(scope=True, new_conversation=False, preseed=1), fault=SILENT_KAGENT)
        outcome = await run_data_case(stack, case)
        assert outcome.status == 504 and outcome.failures == []


class TestLoudOnBreakage:
    async def test_unrewritten_invoke_behind_an_upstream_failure(self, stack: FuzzStack) -> None:
        """An invocation relayed with the caller's identity, answered as an upstream failure, is still caught."""

        governed = stack.gw.runners[0].app[HANDLERS][Operation.A2A_INVOKE]

        async def raw(request: web.Request, match: RouteMatch) -> web.StreamResponse:
            if "X-Agent-Name" not in request.headers:  # the setup's own invocation (it obtains the key)
                return await governed(request, match)
            async with stack.http.post(
                stack.dev.kagent_url + request.rel_url.path, data=await request.read(), headers={"X-User-Id": "admin"}
            ) as resp:
                await resp.read()
            decision = "deny; reason=upstream_unavailable; id=d_0123456789abcdef"
            return web.json_response(
                {"error": "upstream_unavailable", "decision_id": "d_0123456789abcdef"},
                status=504,
                headers={"X-Memgov-Decision": decision},
            )

        swap(stack, Operation.A2A_INVOKE, raw)
        case = Case("data", "invoke", INVOKE, Setup(scope=True, new_conversation=False))
        assert "invoke_identity_not_rewritten" in kinds(await run_data_case(stack, case))

    async def test_leaky_search(self, stack: FuzzStack) -> None:
        """A search that answers 500 with the request in it and logs a piece of it fails six ways."""

        async def leaky(request: web.Request, match: RouteMatch) -> web.StreamResponse:
            body = await request.read()
            core = "SNTL" + body.decode().split("SNTL", 1)[1][:17]  # tag and hex: passes the log allow-list
            get_logger("leak").info("leak", scope_id=core)
            return web.Response(status=500, body=body)

        swap(stack, Operation.MEMORY_SEARCH, leaky)
        case = Case("data", "search", Request("POST", ("/api/memories/search",), (), SEARCH), Setup(scope=True))
        assert {
            "5xx",
            "error_body_shape",
            "decision_header_missing",
            "contract_status",
            "sentinel_in_answer",
            "sentinel_in_logs",
        } <= kinds(await run_data_case(stack, case))

    async def test_raw_forwarding(self, stack: FuzzStack) -> None:
        """Forwarding what was not checked (a second spelling of input, the context header) is caught."""

        async def raw(request: web.Request, match: RouteMatch) -> web.StreamResponse:
            body = await request.read()
            async with stack.http.post(
                stack.dev.embedding_url + "/embeddings",
                data=body,
                headers={"X-Memgov-Context": request.headers.get("X-Memgov-Context", "")},
            ) as resp:
                return web.Response(
                    status=resp.status,
                    body=await resp.read(),
                    headers={"X-Memgov-Decision": "forward; reason=allowed; id=d_0123456789abcdef"},
                )

        swap(stack, Operation.EMBEDDING, raw)
        body = Doc(Obj((("input", Str((Ph("S:query"),))), ("INPUT", Str((Ph("S:query"),), "x", 600)))))
        case = Case(
            "data",
            "embedding",
            Request("POST", ("/embeddings/kagent/k8s-agent/v1/embeddings",), (("X-Memgov-Context", Ph("CTX")),), body),
            Setup(scope=True),
        )
        assert {"context_forwarded", "forwarded_noncanonical"} <= kinds(await run_data_case(stack, case))

    async def test_evidence_that_lies(self, stack: FuzzStack) -> None:
        """A record claiming physical absence while the scope's old rows remain in kagent is caught."""
        scope = await stack.new_scope()
        await stack.session_key(scope)
        await stack.seed(scope, "fact")
        await stack.grant(scope)  # a new generation: the seeded row now belongs to a fenced one
        run = CaseRun(stack, Case("control", "getErasure", Request("GET", ("/",))))
        await run.check_evidence(
            {
                "scope_id": scope.scope_id,
                "kind": "withdraw",
                "physical_deletion": "complete",
                "verification": {"physically_absent": True},
            }
        )
        assert [f.kind for f in run.failures] == ["evidence_claims_absent"]


class TestSummary:
    async def test_counts_every_case(self) -> None:
        """A seeded run counts every case per route and prints the tables."""
        report, _ = await fuzz(12, 7, "all", shrink=False, progress=lambda _: None)
        text = summary(report, {}, 7)
        assert report.total == 12 and "cases per route" in text and "failures by kind" in text
