"""Control-API cases generated from the OpenAPI document: every operation, valid and hostile inputs.

Path and query parameters, bodies and credentials are drawn from the document's schemas and then
bent: parameters outside their patterns, bodies with the data plane's hostile mutations, and
every kind of credential an attacker holds (none, garbage, forged, expired, untyped, another
subject's, an operator's, a delegation context presented as a bearer token).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from sidecar.dev.fuzz.bodies import document as body_document
from sidecar.dev.fuzz.bodies import weighted
from sidecar.dev.fuzz.cases import Case, Request, Setup, Value
from sidecar.dev.fuzz.chaos import Fault
from sidecar.dev.fuzz.jsondoc import Doc, Node, Ph, Str
from sidecar.dev.fuzz.schema import operations, strategy
from sidecar.dev.fuzz.stack import AGENT, AGENT2, PLAIN_AGENT

S = st.SearchStrategy
#: Credential classes; only the first three are valid, every other one must get 401.
CALLERS = (
    "subject",
    "other_subject",
    "operator",
    "none",
    "garbage",
    "basic",
    "forged",
    "expired",
    "untyped",
    "context",
    "wrong_kind",
    "alg_none",
)
VALID_CALLERS = frozenset(CALLERS[:3])
_HOSTILE_SEGMENTS: S[Value] = st.sampled_from(
    [
        Str((Ph("S:path"),)),
        "..",
        "%2e%2e",
        "s" + "0" * 24 + "%2Fx",
        "%00",
        "x" * 300,
        "s" + "A" * 24,
        Str(("@", Ph("S:path"), ":fuzz.example")),
    ]
)
_PARAMS: dict[str, S[Value]] = {
    "scope_id": weighted((8, Ph("SCOPE_ID")), (1, Ph("OTHER_SCOPE_ID")), (1, "s" + "0" * 24)),
    "entry_id": weighted((6, Ph("ENTRY_ID")), (1, "e" + "0" * 24), (1, Ph("OTHER_SCOPE_ID"))),
    "erasure_id": weighted((6, Ph("ERASURE_ID")), (1, "e" + "1" * 24)),
    "mxid": weighted(
        (4, Ph("PRINCIPAL")), (1, Ph("OTHER_PRINCIPAL")), (1, "@nobody:fuzz.example"), (1, "@x:elsewhere.example")
    ),
}
_LIMITS: S[Value] = st.sampled_from(
    [quote(v, safe="") for v in ("0", "51", "-1", "1e3", "9" * 30, " 5", "5 ", "", "٣")] + [Str((Ph("S:path"),))]
)
_HINTS: dict[str, S[Node]] = {
    "mxid": weighted((4, Ph("PRINCIPAL")), (1, Ph("OTHER_PRINCIPAL"))),
    "agent": st.sampled_from([AGENT, AGENT, AGENT2, PLAIN_AGENT]),
    "room_id": weighted((4, Ph("ROOM")), (1, Ph("OTHER_ROOM"))),
    "confirm": weighted((4, Ph("CONFIRM")), (1, Ph("OTHER_CONFIRM"))),
    "origin": weighted((4, "native"), (1, "remote")),
    "kind": weighted((4, "control_room"), (1, "cross_room")),
    "purpose": st.sampled_from(["remember my preferences", "p"]),
    "policy_version": st.sampled_from(["v1", "v2"]),
}


def _param(doc: Mapping[str, Any], param: Mapping[str, Any]) -> S[Value]:
    name = param["name"]
    # A drawn value is data, so it travels percent-encoded; the hostile segments are spelled raw on purpose.
    schema_value = strategy(doc, param.get("schema", {})).map(
        lambda v: quote(v if isinstance(v, str) else str(v), safe="")
    )
    hinted = _PARAMS.get(name, schema_value)
    return weighted((6, "hint"), (2, "schema"), (1, "hostile")).flatmap(
        lambda k: {"hint": hinted, "schema": schema_value, "hostile": _HOSTILE_SEGMENTS}[k]
    )


def _query_value(doc: Mapping[str, Any], param: Mapping[str, Any]) -> S[Value]:
    if param["name"] == "cursor":
        valid: S[Value] = weighted((2, Ph("ENTRY_ID")), (1, "e" + "2" * 24))
    else:
        valid = strategy(doc, param.get("schema", {})).map(lambda v: quote(str(v), safe=""))
    hostile = _LIMITS if param["name"] == "limit" else _HOSTILE_SEGMENTS
    return weighted((3, True), (1, False)).flatmap(lambda ok: valid if ok else hostile)


def _query(doc: Mapping[str, Any], params: list[Mapping[str, Any]]) -> S[tuple[Value, ...]]:
    """``?cursor=…&limit=…`` from the query parameters, each present or not, valid or hostile."""

    def join(pairs: tuple[tuple[str, Value] | None, ...]) -> tuple[Value, ...]:
        out: list[Value] = []
        for name, value in (p for p in pairs if p is not None):
            out += ["&" if out else "?", f"{name}=", value]
        return tuple(out)

    def named(name: str) -> Callable[[Value], tuple[str, Value]]:
        return lambda value: (name, value)

    parts = [st.one_of(st.none(), _query_value(doc, p).map(named(p["name"]))) for p in params]
    return st.tuples(*parts).map(join)


def _body(doc: Mapping[str, Any], op: Mapping[str, Any]) -> S[Doc | bytes | None]:
    ref = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if ref is None:
        return weighted((8, None), (1, b'{"x":1}'))
    valid = strategy(doc, ref, _HINTS)
    keys = tuple(doc["components"]["schemas"][ref["$ref"].rsplit("/", 1)[1]].get("properties", {}))
    optional = not op["requestBody"].get("required", True)
    empty = [None, b"", b" \n", b"{}"] if optional else [None]
    return weighted((5, "valid"), (3, "hostile"), (2 if optional else 1, "empty")).flatmap(
        lambda k: (
            valid.map(Doc)
            if k == "valid"
            else body_document(False, valid, keys)
            if k == "hostile"
            else st.sampled_from(empty)
        )
    )


def _operation(doc: Mapping[str, Any], method: str, path: str, op: Mapping[str, Any]) -> S[Case]:
    params = op.get("parameters", [])
    path_params = {p["name"]: _param(doc, p) for p in params if p["in"] == "path"}
    query = _query(doc, [p for p in params if p["in"] == "query"])
    context = weighted(
        (6, Ph("CTX")),
        (1, Ph("CTX_EXPIRED")),
        (1, Ph("CTX_MEMBERS")),
        (1, Ph("CTX_OTHER_ROOM")),
        (1, Ph("CTX_SUBJECT")),
        (1, None),
        (1, Str((Ph("S:hdr"),))),
    )
    wants_context = any(p["name"] == "X-Memgov-Context" for p in params)

    def build(
        values: dict[str, Value],
        q: tuple[Value, ...],
        body: Doc | bytes | None,
        caller: str,
        ctx: Value | None,
        ctx_elsewhere: bool,
        setup: Setup,
        fault: Fault | None,
    ) -> Case:
        target: list[Value] = []
        for piece in path.split("/")[1:]:
            target.append("/")
            target.append(values[piece[1:-1]] if piece.startswith("{") else piece)
        headers: list[tuple[str, Value]] = []
        if caller != "none":
            headers.append(("Authorization", Ph("AUTH")))
        if ctx is not None and (wants_context or ctx_elsewhere):
            headers.append(("X-Memgov-Context", ctx))
        if body is not None:
            headers.append(("Content-Type", "application/json"))
        request = Request(method, (*target, *q), tuple(headers), body)
        return Case("control", op["operationId"], request, setup, fault, caller=caller)

    setups = st.builds(
        lambda scope, consent, preseed, confirm, erasure: Setup(
            scope=scope,
            consent=consent,
            preseed=preseed if scope and consent else 0,
            confirm=confirm if scope else "",
            erasure=erasure and scope and consent,
        ),
        weighted((8, True), (1, False)),
        weighted((4, True), (1, False)),
        st.sampled_from([0, 1, 1, 2]),
        weighted((3, ""), (2, "forget_all" if path.endswith("forget-all") else "off"), (1, "forget_all")),
        weighted((4, False), (1, True)),
    )
    faults = weighted((12, None), (1, "fault")).flatmap(
        lambda k: (
            st.none()
            if k is None
            else st.builds(
                lambda kind, status: Fault("kagent", kind, "/api/memories", status),
                weighted((4, "status"), (1, "drop"), (1, "delay"), (1, "garbage")),
                st.sampled_from([500, 400, 404, 503]),
            )
        )
    )
    callers = weighted((12, "subject"), *((1, c) for c in CALLERS[1:]))
    return st.builds(
        build,
        st.fixed_dictionaries(path_params),
        query,
        _body(doc, op),
        callers,
        context,
        weighted((6, False), (1, True)),
        setups,
        faults,
    )


def control_cases(doc: Mapping[str, Any]) -> S[Case]:
    """Cases for every operation of the document, equally likely."""
    return st.one_of([_operation(doc, m, p, op) for m, p, op in operations(doc)])
