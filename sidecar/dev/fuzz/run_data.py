"""Run one data-plane case and judge its answer, what the upstreams received, and every sink.

Contracts (docs/enforcement.md, SPEC §2–§7, issue 10): no 5xx but 502/504 carrying the decision
header and a reason code; every error body exactly the reason-code shape; the answer per route
(search → 200 and a JSON array, save/batch → 201 or a 4xx reason, list/delete-all → 403
route_denied, embedding → 200 or a 4xx reason, ungoverned → 403, look-alike, fragment, absolute
and asterisk targets → a clean 4xx that reaches no upstream); what reaches kagent and the provider
is what memgov checked (canonical JSON, one agent name, a storage key, finite non-zero vectors,
limits held, no context header); passthrough bodies arrive byte for byte; no sentinel in any
answer but the legitimate channel, nor in a log line, metric label or audit row; anonymous
refusals store no audit row; a context seen anywhere is spent; erasure evidence never claims an
absence kagent's table contradicts.
"""

from __future__ import annotations

from sidecar.dev.fuzz.cases import Case
from sidecar.dev.fuzz.chaos import Seen
from sidecar.dev.fuzz.data import CONTEXTS
from sidecar.dev.fuzz.forwarded import REFUSED, RELAYED, Forwarded
from sidecar.dev.fuzz.jsondoc import Ph
from sidecar.dev.fuzz.oracle import (
    UPSTREAM_REASONS,
    Outcome,
    decision_of,
    header_agrees,
    reason_body,
    strict_json,
)
from sidecar.dev.fuzz.run import CaseRun
from sidecar.dev.fuzz.stack import AGENT, AGENT2, FuzzStack, Scope
from sidecar.dev.fuzz.wire import Reply

CASE_SCOPE = frozenset({"KEY", "KEY_FORGED", "KEY_STALE", "STORAGE_KEY", *CONTEXTS})
#: Genuine credentials: the keys, and every context but a subject token and a forged one.
GENUINE = frozenset({"KEY", "KEY_NEIGHBOUR", "KEY_OTHER_AGENT", "KEY_STALE", *CONTEXTS}) - {"CTX_SUBJECT", "CTX_FORGED"}
GOVERNED = frozenset({"save", "batch", "search", "list", "delete_all", "embedding", "invoke"})


class DataRun(CaseRun):
    """One data-plane case from setup to verdict."""

    def __init__(self, stack: FuzzStack, case: Case) -> None:
        super().__init__(stack, case)
        self.scope: Scope | None = None

    async def setup(self) -> None:
        stack, setup = self.stack, self.case.setup
        self.begin()
        if (setup.scope and self.names & CASE_SCOPE) or self.case.epilogue:
            self.scope = scope = await stack.new_scope()
            await stack.session_key(scope, new_conversation=setup.new_conversation)
            if setup.regrant or "KEY_STALE" in self.names:
                await stack.grant(scope)
                await stack.session_key(scope, new_conversation=setup.new_conversation)
            for tag in ("seeda", "seedb")[: setup.preseed]:
                await stack.seed(scope, self.plant(tag))
        scope = self.scope or stack.neighbours[AGENT]
        self.env = {**self.keys(scope), **self.contexts(scope)}

    async def run(self) -> Outcome:
        stack, case = self.stack, self.case
        await self.setup()
        reply, seen = await self.send(stack.gw.data_url)
        if reply is not None:
            self.judge(reply, seen)
            self.check_answer(reply, self.allowed_in_answer(reply))
            self.learn_facts(reply)
        Forwarded(self.case, self.stack, self.env, self.fail).check(seen, reply)
        if not self.names & GENUINE and stack.audit_mark() > self.audit_mark:
            self.fail("audit_row_without_credential", f"route {case.route}")
        if case.epilogue and self.scope is not None:
            await self.withdraw_and_compare()
        await stack.chaos.settle()
        # A target the HTTP parser refuses (asterisk or authority form) is answered before any header
        # is read, so there is no context to spend: only requests the application saw are replayed.
        if (
            self.first_context() == Ph("CTX")
            and reply is not None
            and case.route != "odd"
            and self.reached(reply, seen)
        ):
            await self.replay_context()
        self.sweep_sinks()
        return Outcome(case, reply.status if reply is not None else None, self.failures)

    def first_context(self) -> object:
        """The value of the first ``X-Memgov-Context`` header (the one a gateway reads), if any."""
        return next((v for k, v in self.case.request.headers if k.lower() == "x-memgov-context"), None)

    @staticmethod
    def reached(reply: Reply, seen: list[Seen]) -> bool:
        """Whether the gateway's application (not only its HTTP parser) handled the request."""
        return bool(seen) or decision_of(reply) is not None or reason_body(reply) is not None

    # --- the answer -----------------------------------------------------------------------------
    def judge(self, reply: Reply, seen: list[Seen]) -> None:
        family, status = self.case.route, reply.status
        relayed = self.relayed(reply, seen)
        # A HEAD answer has no body: only its status and headers can be judged.
        bodyless = self.case.request.method == "HEAD"
        err = reason_body(reply)
        reason = err["error"] if err is not None else ("" if bodyless else "unshaped")
        if family in GOVERNED and decision_of(reply) is None:
            self.fail("decision_header_missing", f"status {status}")
        if status >= 400 and not relayed and not bodyless:
            if err is None:
                self.fail("error_body_shape", f"status {status}")
            elif decision_of(reply) is not None and not header_agrees(reply, err):
                self.fail("decision_header_disagrees", f"status {status}")
        upstream_failure = status in (502, 504) and (bodyless or reason in UPSTREAM_REASONS)
        if status >= 500 and not relayed and not upstream_failure:
            self.fail("5xx", f"status {status} {reason}".strip())
        if not bodyless:
            self.contract_body(reply)
        self.contract_status(status, relayed, reason, upstream_failure)

    def relayed(self, reply: Reply, seen: list[Seen]) -> bool:
        """An upstream answer passed on unchanged (passthrough, agent replies), not one memgov wrote."""
        if self.case.route not in RELAYED | {"invoke"} or reason_body(reply) is not None:
            return False
        return any(s.upstream == "kagent" and s.status == reply.status for s in seen)

    def contract_body(self, reply: Reply) -> None:
        """The success bodies: search an array, save ``{"id"}``, batch ``{"count"}``, embedding JSON."""
        family, status = self.case.route, reply.status
        value, problem = strict_json(reply.body)
        if family == "search" and status == 200 and (problem or not isinstance(value, list)):
            self.fail("contract_body", "search 200 is not a JSON array")
        elif family in ("save", "batch") and status == 201:
            key, kind = {"save": ("id", str), "batch": ("count", int)}[family]
            if problem or not isinstance(value, dict) or set(value) != {key} or not isinstance(value[key], kind):
                self.fail("contract_body", f"{family} 201 body")
        elif family == "embedding" and status == 200 and problem:
            self.fail("contract_body", "embedding 200 is not JSON")

    def contract_status(self, status: int, relayed: bool, reason: str, upstream_failure: bool) -> None:
        """The status each route family may answer with."""
        family = self.case.route
        refusal = 400 <= status < 500
        if family == "search":
            ok = status == 200 or upstream_failure
        elif family in ("save", "batch"):
            ok = status == 201 or refusal or upstream_failure
        elif family == "embedding":
            ok = status == 200 or refusal or upstream_failure
        elif family in ("list", "delete_all", "ungoverned"):
            ok = status == 403 and reason in ("", "ungoverned_store" if family == "ungoverned" else "route_denied")
        elif family in REFUSED:
            ok = refusal
        else:  # agent invocations and passthrough: the upstream's answer, or memgov's refusal or 502/504
            ok = relayed or refusal or upstream_failure
        if not ok:
            self.fail("contract_status", f"{family} answered {status} {reason}".strip())

    def learn_facts(self, reply: Reply) -> None:
        """A save the gateway accepted puts this case's fact into every scope the request named."""
        if reply.status == 201 and "fact" in self.sentinels:
            for scope in self.named_scopes():
                scope.facts.add(self.sentinels["fact"])

    def named_scopes(self) -> list[Scope]:
        stack = self.stack
        pairs = {
            "KEY": self.scope,
            "KEY_STALE": self.scope,
            "KEY_NEIGHBOUR": stack.neighbours[AGENT],
            "KEY_OTHER_AGENT": stack.neighbours[AGENT2],
        }
        return [s for name, s in pairs.items() if name in self.names and s is not None]

    # --- follow-ups -------------------------------------------------------------------------------
    async def withdraw_and_compare(self) -> None:
        """Withdraw consent; the evidence, then and after late writes landed, must match kagent's table."""
        stack, scope = self.stack, self.scope
        assert scope is not None
        status, body = await stack.control("DELETE", f"/v1/scopes/{scope.scope_id}/consent", scope.principal)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("erasure"), dict):
            self.fail("withdraw_failed", f"status {status} with a healthy upstream")
            return
        await self.check_evidence(body["erasure"])
        status, record = await stack.control("GET", f"/v1/erasures/{body['erasure']['erasure_id']}", scope.principal)
        await self.check_evidence(record)

    async def replay_context(self) -> None:
        """The same context on a real invocation must now be refused as replayed (SPEC §5)."""
        stack = self.stack
        async with stack.http.post(
            f"{stack.gw.data_url}/api/a2a/{AGENT}/",
            headers={"X-Memgov-Context": self.env["CTX"]},
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {"message": {"role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "again"}]}},
            },
        ) as resp:
            await resp.read()
            reason = resp.headers.get("X-Memgov-Decision", "")
        if "reason=context_replayed" not in reason:
            self.fail("context_not_spent", "a context seen on this route was accepted again")

    # --- the legitimate content channel ----------------------------------------------------------
    def allowed_in_answer(self, reply: Reply) -> set[str]:
        family = self.case.route
        if family in RELAYED | {"invoke"} and reason_body(reply) is None:
            return set(self.sentinels.values())  # echoes of the caller's own request and relayed upstream errors
        if family == "search" and reply.status == 200:
            return set().union(*(s.facts for s in self.named_scopes()))
        return set()


async def run_data_case(stack: FuzzStack, case: Case) -> Outcome:
    """Set up, send, follow up and judge one data-plane case."""
    return await DataRun(stack, case).run()
