"""What running a case means on either plane: fresh sentinels, tokens, sending with a fault armed,
and the checks every case ends with (the answer's sentinels, every sink, erasure evidence)."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from sidecar.dev.fuzz.cases import Case
from sidecar.dev.fuzz.chaos import Seen
from sidecar.dev.fuzz.oracle import Failure, foreign_markers, leaked, reply_text
from sidecar.dev.fuzz.stack import AGENT, AGENT2, SERVER, FuzzStack, Scope
from sidecar.dev.fuzz.wire import Reply, WireError, send
from sidecar.drill.sentinels import make_sentinel


class CaseRun:
    """State of one case while it runs; subclasses add the plane's setup and contracts."""

    def __init__(self, stack: FuzzStack, case: Case) -> None:
        self.stack, self.case = stack, case
        self.names = case.request.names()
        self.sentinels: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self.failures: list[Failure] = []
        self.audit_mark = 0

    def fail(self, kind: str, detail: str = "") -> None:
        self.failures.append(Failure(kind, self.case.route, detail))

    def begin(self) -> None:
        """Fresh hourly windows and rate buckets, an empty wire record, this case's sentinels."""
        self.stack.clock.advance(3601)
        self.stack.learn_storage_keys()
        self.stack.chaos.forget()
        tags = {n[2:] for n in self.names if n.startswith("S:")} | ({"fault"} if self.case.fault else set())
        self.sentinels = {tag: make_sentinel(tag) for tag in sorted(tags)}

    def plant(self, tag: str) -> str:
        """One more sentinel (a fact saved during setup)."""
        self.sentinels[tag] = make_sentinel(tag)
        return self.sentinels[tag]

    def keys(self, scope: Scope) -> dict[str, str]:
        """Session keys: the scope's (the neighbour's when it has none), others', and forgeries of it."""
        stack = self.stack
        key_of = scope if scope.key else stack.neighbours[AGENT]
        _, sid, gen, mac = key_of.key.split(".")
        return {
            "KEY": key_of.key,
            "KEY_NEIGHBOUR": stack.neighbours[AGENT].key,
            "KEY_OTHER_AGENT": stack.neighbours[AGENT2].key,
            "KEY_FORGED": f"mg1.{sid}.{gen}.{mac[:-4]}{'BBBB' if mac.endswith('AAAA') else 'AAAA'}",
            "KEY_STALE": key_of.keys[0],
            "STORAGE_KEY": f"mgs1.{sid}.{gen}",
        }

    def contexts(self, scope: Scope) -> dict[str, str]:
        """A valid delegation context for the scope and the ways one can be wrong."""
        stack, now = self.stack, self.stack.now()
        claims = stack.context_claims
        members = claims(scope)
        members["room"]["members"] = [*members["room"]["members"], "@eve:evil.example"]
        return {
            "CTX": stack.token("context", claims(scope)),
            "CTX_EXPIRED": stack.token("context", claims(scope, iat=now - 100, exp=now - 10)),
            "CTX_OTHER_ROOM": stack.token(
                "context", claims(scope, scope={"kind": "control_room", "room_id": f"!elsewhere:{SERVER}"})
            ),
            "CTX_OTHER_AGENT": stack.token("context", claims(scope, agent=AGENT2)),
            "CTX_MEMBERS": stack.token("context", members),
            "CTX_UNTYPED": stack.token("context", claims(scope), headers={"typ": None}),
            "CTX_SUBJECT": stack.token("subject", stack.subject_claims(scope.principal)),
            "CTX_FORGED": stack.token("context", claims(scope), key=secrets.token_hex(32).encode()),
        }

    async def send(self, base_url: str) -> tuple[Reply | None, list[Seen]]:
        """Write the request with the case's fault armed; what the upstreams received meanwhile."""
        stack, case = self.stack, self.case
        self.env.update({f"S:{tag}": value for tag, value in self.sentinels.items()})
        target, headers, body = case.request.wire(self.env)
        self.audit_mark = stack.audit_mark()
        mark = len(stack.chaos.seen)
        if case.fault is not None:
            stack.chaos.fault = dataclasses.replace(case.fault, text=self.sentinels["fault"])
        try:
            reply: Reply | None = await send(base_url, case.request.method, target, headers, body)
        except WireError as exc:
            reply = None
            self.fail("no_answer", str(exc))
        finally:
            stack.chaos.fault = None
        return reply, stack.chaos.since(mark)

    def check_answer(self, reply: Reply, allowed: set[str]) -> None:
        """No sentinel in the answer but the ``allowed`` values (the legitimate content channel)."""
        text = reply_text(reply)
        forbidden = {t: v for t, v in self.sentinels.items() if v not in allowed}
        tags = leaked(forbidden, [text]) + foreign_markers(text, allowed)
        if tags:
            self.fail("sentinel_in_answer", ",".join(sorted(set(tags))))

    def sweep_sinks(self) -> None:
        """No sentinel, of this case or any other, in a log line, a metric label or an audit row."""
        stack = self.stack
        audit = "\n".join(stack.audit_since(self.audit_mark))
        for sink, text in (
            ("logs", stack.logs.take()),
            ("metrics", "\n".join(stack.new_metric_labels())),
            ("audit", audit),
        ):
            tags = leaked(self.sentinels, [text]) + foreign_markers(text, set())
            if tags:
                self.fail(f"sentinel_in_{sink}", ",".join(sorted(set(tags))))

    async def check_evidence(self, record: Any) -> None:
        """An erasure record may claim rows are physically gone only if kagent's table agrees (SPEC D4).

        Whole-scope erasures fence every generation before the scope's current one; rows of the
        current generation may be newer than the erasure (forget-all keeps consent) and are not
        part of the claim.
        """
        if not isinstance(record, dict):
            return
        scope = self.stack.scopes.get(str(record.get("scope_id")))
        if scope is None:
            return
        await self.stack.chaos.settle()  # writes whose outcome the gateway never learned land first
        status, body = await self.stack.control("GET", f"/v1/scopes/{scope.scope_id}", scope.principal)
        current = body.get("generation") if status == 200 and isinstance(body, dict) else None
        rows = await self.stack.kagent_rows(scope)
        if record.get("kind") == "forget_one":
            gone = {
                e.get("entry_id")
                for e in record.get("entries", [])
                if isinstance(e, dict)
                and (e.get("physically_deleted_at") or record.get("physical_deletion") == "complete")
            }
            if any(r.id in gone for r in rows):
                self.fail("evidence_claims_absent", "forget_one: a row said deleted is still in kagent")
        elif (
            claims_absent(record)
            and isinstance(current, int)
            and any(_generation(r.user_id or "") < current for r in rows)
        ):
            self.fail("evidence_claims_absent", f"{record.get('kind')}: rows of a fenced generation remain")


def _generation(storage_key: str) -> int:
    """The generation a storage key ``mgs1.<scope>.<generation>[.…]`` names."""
    part = storage_key.split(".")[2] if storage_key.count(".") >= 2 else ""
    return int(part) if part.isdigit() else -1


def claims_absent(record: dict[str, Any]) -> bool:
    """Whether an erasure record claims every erased row is physically gone."""
    verification = record.get("verification")
    absent = isinstance(verification, dict) and verification.get("physically_absent") is True
    return absent or record.get("physical_deletion") == "complete"
