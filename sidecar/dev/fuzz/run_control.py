"""Run one control-API case and judge it against the OpenAPI document and the control contracts.

Document conformance: the status is one the operation documents, success bodies validate
against their schema, errors are exactly ``ErrorOut``, every answer says ``no-store``, 401 carries
a challenge, no 5xx but a documented erasure or upstream failure while kagent misbehaves.
Contracts (docs/control-api.md, SPEC §5, issue 10): every credential that is not a valid typed
subject or operator token gets 401 and leaves no audit row; nobody but the exact subject acts on a
scope; offboarding is the operator's only; a first forget-all/off call, ``{}`` included, issues a
token; inspect needs a valid context; erasure evidence never claims an absence kagent contradicts;
no sentinel in any answer but the subject's own inspect page, nor in any sink.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

import jwt
from jsonschema import Draft202012Validator

from sidecar.dev.fuzz.cases import Case
from sidecar.dev.fuzz.control import VALID_CALLERS
from sidecar.dev.fuzz.jsondoc import Doc, Ph, Str
from sidecar.dev.fuzz.oracle import UPSTREAM_REASONS, Outcome, reason_body
from sidecar.dev.fuzz.run import CaseRun
from sidecar.dev.fuzz.schema import response_schema
from sidecar.dev.fuzz.stack import TYP, FuzzStack, Scope, SetupFailed
from sidecar.dev.fuzz.wire import Reply

ERASURE_REASONS = frozenset({"erasure_failed", "verification_failed"})
_EMPTY_BODIES = (None, b"", b" \n", b"{}")


class ControlRun(CaseRun):
    """One control-API case from setup to verdict."""

    def __init__(self, stack: FuzzStack, case: Case, doc: Mapping[str, Any]) -> None:
        super().__init__(stack, case)
        self.doc = doc
        self.op = next(op for ops in doc["paths"].values() for op in ops.values() if op["operationId"] == case.route)
        self.scope: Scope = stack.stranger()
        self.other: Scope | None = None

    # --- setup ----------------------------------------------------------------------------------
    async def setup(self) -> None:
        stack, setup = self.stack, self.case.setup
        self.begin()
        if setup.scope:
            self.scope = await stack.new_scope(consent=setup.consent)
        scope = self.scope
        erasure_id = "e" + secrets.token_hex(12)
        if setup.erasure:
            erasure_id = await self.confirmed(scope, "forget-all")
        entries = []
        if setup.preseed:
            await stack.session_key(scope)
            entries = [await stack.seed(scope, self.plant(tag)) for tag in ("seeda", "seedb")[: setup.preseed]]
        confirm = secrets.token_hex(32)
        if setup.confirm:
            _, first = await stack.control(
                "POST", f"/v1/scopes/{scope.scope_id}/{setup.confirm.replace('_', '-')}", scope.principal
            )
            confirm = str(first.get("confirm_token", confirm)) if isinstance(first, dict) else confirm
        if self.names & {"OTHER_PRINCIPAL", "OTHER_ROOM", "OTHER_SCOPE_ID"} or self.case.caller == "other_subject":
            self.other = await stack.new_scope()
        other = self.other or stack.stranger()
        self.env = {
            "PRINCIPAL": scope.principal,
            "ROOM": scope.room,
            "SCOPE_ID": scope.scope_id,
            "OTHER_PRINCIPAL": other.principal,
            "OTHER_ROOM": other.room,
            "OTHER_SCOPE_ID": other.scope_id,
            "ENTRY_ID": entries[0] if entries else "e" + secrets.token_hex(12),
            "ERASURE_ID": erasure_id,
            "CONFIRM": confirm,
            "OTHER_CONFIRM": secrets.token_hex(32),
            **self.keys(scope),
            **self.contexts(scope),
        }
        if self.case.caller != "none":
            self.env["AUTH"] = self.authorization(other)

    async def confirmed(self, scope: Scope, action: str) -> str:
        """Run a confirmed whole-scope erasure; its id."""
        path = f"/v1/scopes/{scope.scope_id}/{action}"
        status, first = await self.stack.control("POST", path, scope.principal)
        if status != 202:
            raise SetupFailed(f"first {action} call answered {status}")
        status, record = await self.stack.control("POST", path, scope.principal, {"confirm": first["confirm_token"]})
        if status != 200:
            raise SetupFailed(f"confirmed {action} answered {status}")
        return str(record["erasure_id"])

    def authorization(self, other: Scope) -> str:
        """The Authorization header of the case's caller class."""
        stack, caller, now = self.stack, self.case.caller, self.stack.now()
        claims = stack.subject_claims(self.scope.principal)
        if caller == "garbage":
            return "Bearer " + self.plant("hdr").encode("ascii", "ignore").decode()
        if caller == "basic":
            return "Basic Zm9vOmJhcg=="
        if caller == "alg_none":
            return "Bearer " + jwt.encode(claims, "", algorithm="none")
        token = {
            "subject": lambda: stack.token("subject", claims),
            "other_subject": lambda: stack.token("subject", stack.subject_claims(other.principal)),
            "operator": lambda: stack.token("operator", stack.operator_claims()),
            "forged": lambda: stack.token("subject", claims, key=secrets.token_hex(32).encode()),
            "expired": lambda: stack.token("subject", {**claims, "iat": now - 200, "exp": now - 100}),
            "untyped": lambda: stack.token("subject", claims, headers={"typ": None}),
            "context": lambda: stack.token("context", stack.context_claims(self.scope)),
            "wrong_kind": lambda: stack.token("subject", claims, headers={"typ": TYP["operator"]}),
        }[caller]()
        return "Bearer " + token

    # --- the run --------------------------------------------------------------------------------
    async def run(self) -> Outcome:
        stack, case = self.stack, self.case
        await self.setup()
        reply, _ = await self.send(stack.gw.control_url)
        if reply is not None:
            self.conformance(reply)
            self.contracts(reply)
            allowed = self.scope.facts if case.route == "inspectEntries" and reply.status == 200 else set()
            self.check_answer(reply, allowed)
            if 200 <= reply.status < 300:
                for record in await self.erasure_records(reply):
                    await self.check_evidence(record)
        if case.caller not in VALID_CALLERS and stack.audit_mark() > self.audit_mark:
            self.fail("audit_row_without_credential", case.caller)
        await stack.chaos.settle()
        self.sweep_sinks()
        return Outcome(case, reply.status if reply is not None else None, self.failures)

    def conformance(self, reply: Reply) -> None:
        """What the OpenAPI document promises about this operation's answers."""
        status, err = reply.status, reason_body(reply)
        reason = err["error"] if err is not None else "unshaped"
        schema = response_schema(self.doc, self.op, status)
        if schema is None and not self.unrouted(status):
            self.fail("undocumented_status", f"{status} {reason if status >= 400 else ''}".strip())
        if status >= 400 and (err is None or "status" in err):
            self.fail("error_body_shape", str(status))
        if status >= 500:
            armed = self.case.fault is not None
            documented = (status == 500 and reason in ERASURE_REASONS and reply.header("Location")) or (
                status == 502 and reason in UPSTREAM_REASONS
            )
            if not (armed and documented):
                self.fail("5xx", f"{status} {reason}")
        if 200 <= status < 300 and schema is not None:
            body, error = _json(reply.body), None
            if body is _INVALID:
                error = "not JSON"
            elif schema:
                found = next(
                    iter(Draft202012Validator({**schema, "components": self.doc["components"]}).iter_errors(body)), None
                )
                error = "/".join(str(p) for p in found.absolute_path) or found.validator if found else None
            if error:
                self.fail("response_schema", f"{status} at {error}")
        if reply.header("Cache-Control") != "no-store":
            self.fail("cache_control_missing", str(status))
        if status == 401 and not reply.header("WWW-Authenticate"):
            self.fail("www_authenticate_missing")

    def contracts(self, reply: Reply) -> None:
        """Who may do what (docs/control-api.md, SPEC §5 token types, issue 10 §2 and §7)."""
        case, status, err = self.case, reply.status, reason_body(reply)
        caller, op = case.caller, case.route
        if op == "getOpenApi":
            return
        if caller not in VALID_CALLERS:
            if status != 401 and not self.unrouted(status):
                self.fail("invalid_credential_accepted", f"{caller} answered {status}")
            return
        success = 200 <= status < 300
        sub = {"subject": self.scope.principal, "other_subject": self.env["OTHER_PRINCIPAL"]}.get(caller)
        if (
            op == "offboardPrincipal"
            and caller != "operator"
            and not self.unrouted(status)
            and not (status == 403 and err is not None and err["error"] == "route_denied")
        ):
            self.fail("offboard_without_operator", f"{caller} answered {status}")
        if success and op not in ("offboardPrincipal", "getErasure") and (sub is None or sub != self.owner()):
            self.fail("foreign_caller_allowed", f"{caller} answered {status}")
        if success and op == "getErasure" and caller == "other_subject":
            self.fail("foreign_caller_allowed", f"{caller} read another subject's evidence")
        if op in ("forgetAll", "turnOff") and self.first_call() and status != 202:
            self.fail("first_call_refused", f"answered {status} {err['error'] if err else ''}".strip())
        if op == "inspectEntries" and status == 200 and ("X-Memgov-Context", Ph("CTX")) not in case.request.headers:
            self.fail("inspect_without_valid_context")

    def owner(self) -> str | None:
        """The principal of the scope the request names (for create: the body's principal)."""
        if self.case.route == "createScope":
            body = _json(self.case.request.plain_body(self.env))
            principal = body.get("principal") if isinstance(body, dict) else None
            return principal.get("mxid") if isinstance(principal, dict) else None
        target = self.case.request.target
        if Ph("SCOPE_ID") in target:
            return self.scope.principal
        if Ph("OTHER_SCOPE_ID") in target:
            return self.env["OTHER_PRINCIPAL"]
        return None

    def first_call(self) -> bool:
        """A subject's first forget-all/off call on its own consented scope, with no confirmation yet."""
        request, setup = self.case.request, self.case.setup
        body = request.body
        empty = body in _EMPTY_BODIES or (
            isinstance(body, Doc) and body.value is not None and request.plain_body(self.env).strip() == b"{}"
        )
        return (
            self.case.caller == "subject"
            and setup.scope
            and setup.consent
            and empty
            and Ph("SCOPE_ID") in request.target
            and self.case.fault is None
        )

    def unrouted(self, status: int) -> bool:
        """A hostile path segment (empty, an encoded slash, a dot segment) made a path no operation has: the
        router's 404/405 is then the right answer, before any handler or credential check runs."""
        odd = any(
            isinstance(p, Str) or (isinstance(p, str) and (p == "" or "%" in p or ".." in p or len(p) > 200))
            for p in self.case.request.target
        )
        return odd and status in (404, 405)

    async def erasure_records(self, reply: Reply) -> list[Any]:
        """Every erasure record a successful answer carries (offboarding: fetched by id)."""
        body = _json(reply.body)
        if not isinstance(body, dict):
            return []
        records = [body] if "verification" in body else []
        if isinstance(body.get("erasure"), dict):
            records.append(body["erasure"])
        for item in body.get("scopes", []) if self.case.route == "offboardPrincipal" else []:
            token = self.stack.token("operator", self.stack.operator_claims())
            async with self.stack.http.get(
                f"{self.stack.gw.control_url}/v1/erasures/{item.get('erasure_id')}",
                headers={"Authorization": "Bearer " + token},
            ) as resp:
                records.append(await resp.json(content_type=None))
        return records


_INVALID = object()


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return _INVALID


async def run_control_case(stack: FuzzStack, case: Case, doc: Mapping[str, Any]) -> Outcome:
    """Set up, send and judge one control-API case."""
    return await ControlRun(stack, case, doc).run()
