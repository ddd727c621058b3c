"""The request set of shared/kagent-v0.9.11-observed.md (sections A-H), as data both kagents replay.

Each step is a request (compared by status, Content-Type and normalised body), a SQL statement
run on both ``memory`` tables (setup the transcript did by hand), a prune, or a query whose rows
must be the same on both. Step names are the transcript's (B6, D13, ...). Both releases replay
sections A-H (E11 is where they differ: v0.10's search also matches the ``_`` spelling); v0.10
adds section S, its sessions, share links and owned tasks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

DIM = 768


def one_hot(*indexes: int) -> list[float]:
    vec = [0.0] * DIM
    for i in indexes:
        vec[i] = 1.0
    return vec


E0, E1, E2, E01, ZERO = one_hot(0), one_hot(1), one_hot(2), one_hot(0, 1), one_hot()
V3 = [0.1, 0.2, 0.3]
V769 = [0.1] * (DIM + 1)
NS = "ns__NS__agent"


@dataclass(frozen=True)
class Req:
    """One HTTP request; ``compare`` says how much of the answer must match."""

    name: str
    method: str
    path: str
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    compare: Literal["exact", "count"] = "exact"
    #: Keep the answer's ``data.token`` under this name: later paths and headers say ``{name}``.
    capture: str | None = None

    def payload(self) -> bytes | None:
        if self.raw is not None:
            return self.raw
        return None if self.body is None else json.dumps(self.body).encode()


@dataclass(frozen=True)
class Sql:
    """A statement run on both databases (the transcript's manual setup)."""

    name: str
    sql: str


@dataclass(frozen=True)
class Rows:
    """A query whose result must be the same on both databases (ids and exact times left out)."""

    name: str
    sql: str


@dataclass(frozen=True)
class Prune:
    """Run PruneExpiredMemories now."""

    name: str = "F1"


Step = Req | Sql | Rows | Prune


def save(name: str, user: str, content: str | None, vector: list[float], agent: str = NS, **extra: Any) -> Req:
    body: dict[str, Any] = {"agent_name": agent, "user_id": user, "vector": vector, **extra}
    if content is not None:
        body["content"] = content
    return Req(name, "POST", "/api/memories/sessions", body)


def search(
    name: str,
    user: str | None,
    vector: Any,
    agent: str = NS,
    compare: Literal["exact", "count"] = "exact",
    **extra: Any,
) -> Req:
    body: dict[str, Any] = {"agent_name": agent, "vector": vector, **extra}
    if user is not None:
        body["user_id"] = user
    return Req(name, "POST", "/api/memories/search", body, compare=compare)


def item(user: str | None, content: str, vector: list[float], agent: str = NS, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"agent_name": agent, "content": content, "vector": vector, **extra}
    if user is not None:
        body["user_id"] = user
    return body


def batch(name: str, items: list[dict[str, Any]]) -> Req:
    return Req(name, "POST", "/api/memories/sessions/batch", {"items": items})


def rows_of(name: str, *users: str) -> Rows:
    names = ", ".join(f"'{u}'" for u in users)
    return Rows(
        name,
        f"""
        SELECT agent_name, user_id, content, metadata, access_count,
               round(extract(epoch FROM (expires_at - created_at)) / 86400.0, 2) AS ttl_days,
               expires_at < now() AS expired, expires_at IS NULL AS no_expiry,
               array_length(embedding::real[], 1) AS dims
        FROM memory WHERE user_id IN ({names}) ORDER BY user_id, agent_name, content, access_count""",
    )


def rows_summed(name: str, user: str) -> Rows:
    """A user's rows taken together: where several rows tie on score, which of them a search returns
    (and so counts an access for) is the index's choice, so only the totals are the same."""
    return Rows(
        name,
        f"""
        SELECT agent_name, user_id, count(*) AS n, sum(access_count) AS accessed,
               min(round(extract(epoch FROM (expires_at - created_at)) / 86400.0, 2)) AS ttl_days_min,
               max(round(extract(epoch FROM (expires_at - created_at)) / 86400.0, 2)) AS ttl_days_max,
               bool_or(expires_at < now()) AS expired, bool_or(expires_at IS NULL) AS no_expiry,
               min(array_length(embedding::real[], 1)) AS dims_min, max(array_length(embedding::real[], 1)) AS dims_max
        FROM memory WHERE user_id = '{user}' GROUP BY agent_name, user_id ORDER BY agent_name""",
    )


def _raw(obj_text: str, vector: list[float]) -> bytes:
    return obj_text.replace("@V@", json.dumps(vector)).encode()


SECTION_A: list[Step] = [Req("A1", "GET", "/health"), Req("A2", "GET", "/version")]

SECTION_B: list[Step] = [
    save("B1", "u1", "hello SENTINEL-7f3a9c-secret-content", E0),
    rows_of("B1 rows", "u1"),
    save("B2", "u-meta", "m1", E0, ttl_days=1, metadata={"source": "test", "n": 1}),
    Req(
        "B2 spacing",
        "POST",
        "/api/memories/sessions",
        raw=_raw(
            '{"agent_name":"ns__NS__agent","user_id":"u-meta","content":"m1-raw","vector":@V@,'
            '"metadata":{"source": "test",   "n": 1}}',
            E0,
        ),
    ),
    save("B3", "u-ttl", "t0", E0, ttl_days=0),
    save("B4", "u-ttl", "t-3", E0, ttl_days=-3),
    save("B5", "u-ttl", "t36500", E0, ttl_days=36500),
    save("B6", "u-ttl", "t200000", E0, ttl_days=200000),
    save("B7", "u-ttl", "x", E0, ttl_days=1.5),
    save("B8", "u-ttl", "x", E0, ttl_days="5"),
    save("B9", "u-meta", "m-null", E1, metadata=None),
    save("B10", "u-meta", "m-str", E2, metadata="just text"),
    save("B11", "u-misc", None, E0),
    save("B12", "u-misc", "x", E0, id="my-own-id", foo=1),
    Req(
        "B13",
        "POST",
        "/api/memories/sessions",
        raw=_raw(
            '{"agent_name":"ns__NS__agent","user_id":"u-misc","content":"trailing","vector":@V@} this is not json', E0
        ),
    ),
    Req(
        "B14",
        "POST",
        "/api/memories/sessions",
        {"agent_name": NS, "user_id": "u-misc", "content": "ctype", "vector": E0},
        headers={"Content-Type": "text/plain"},
    ),
    Req(
        "B15",
        "POST",
        "/api/memories/sessions",
        {"agent_name": NS, "user_id": "u-hdr", "content": "hdr", "vector": E0},
        headers={"X-User-Id": "mallory", "X-Agent-Name": "other__NS__agent"},
    ),
    Req(
        "B16",
        "POST",
        "/api/memories/sessions",
        raw=_raw(
            '{"agent_name":"ns__NS__agent","user_id":"u-dup-first","user_id":"u-dup-last","content":"dup",'
            '"vector":@V@}',
            E0,
        ),
    ),
    save("B17", "u-misc", "x" * 200_000, E0),
    save("B18", " ", "ws", E0, agent=" "),
    save("B19", "u-zero", "zero vector", ZERO),
    Req("B20", "POST", "/api/memories/sessions", {"user_id": "u1", "content": "x", "vector": E0}),
    save("B21", "", "x", E0),
    Req("B22", "POST", "/api/memories/sessions", {"agent_name": NS, "user_id": "u1", "content": "x"}),
    save("B23", "u1", "x", []),
    save("B24", "u1", "x", V3),
    save("B25", "u1", "x", V769),
    Req(
        "B26",
        "POST",
        "/api/memories/sessions",
        {"agent_name": NS, "user_id": "u1", "content": "x", "vector": ["a", "b"]},
    ),
    Req(
        "B27",
        "POST",
        "/api/memories/sessions",
        raw=_raw(
            '{"agent_name":"ns__NS__agent","user_id":"u1","content":"x","vector":@V@}', [1e40] + [0.0] * (DIM - 1)
        ),
    ),
    Req("B28", "POST", "/api/memories/sessions", raw=b'{"agent_name":'),
    Req("B29", "POST", "/api/memories/sessions", raw=b""),
    Req("B30", "POST", "/api/memories/sessions", raw=b"null"),
    Req("B31", "POST", "/api/memories/sessions", raw=b"[]"),
    Req("B32", "POST", "/api/memories/sessions", {"agent_name": 7, "user_id": "u1", "content": "x", "vector": E0}),
    rows_of("B rows", "u1", "u-meta", "u-ttl", "u-misc", "u-hdr", "u-dup-first", "u-dup-last", " ", "u-zero"),
]

SECTION_C: list[Step] = [
    batch(
        "C1",
        [
            item("u-batch", "b1", E0),
            item("u-batch", "b2", E1, agent="other__NS__agent", ttl_days=2, metadata={"k": "v"}),
        ],
    ),
    batch("C2", []),
    Req("C3", "POST", "/api/memories/sessions/batch", {}),
    batch("C4", [item("u-batch50", "b", E2)] * 50),
    batch("C5", [item("u-batch50", "b", E2)] * 51),
    batch("C6", [item("u-batchbad", "good", E0), item(None, "bad", E0)]),
    batch("C7", [item("u-batchbad", "good", E0), item("u-batchbad", "bad", V3)]),
    Req("C8", "POST", "/api/memories/sessions/batch", [item("u-batchbad", "x", E0)]),
    Req("C9", "POST", "/api/memories/sessions/batch", raw=b'{"items":[{'),
    rows_of("C rows", "u-batch", "u-batch50", "u-batchbad"),
]

SECTION_D: list[Step] = [
    save("D0a", "u-search", "alpha", E0, metadata={"tag": "a"}),
    save("D0b", "u-search", "beta", E1),
    save("D0c", "u-search", "alpha-beta", E01),
    search("D1", "u-search", E0),
    rows_of("D1 rows", "u-search"),
    search("D2", "u-search", E0, min_score=0.5),
    rows_of("D2 rows", "u-search"),
    search("D3", "u-search", E1, limit=1),
    *(save(f"D4 setup {i}", "u-limit", f"l{i}", E0) for i in range(1, 8)),
    # Seven equal scores: which five come back is the index's choice, so only the count is compared.
    search("D4", "u-limit", E0, compare="count"),
    search("D5", "u-limit", E0, limit=-1, compare="count"),
    search("D6", "u-limit", E0, limit=1000, compare="count"),
    search("D7", "nobody", E0),
    search("D9", None, E0),
    search("D10", "u-search", V3),
    search("D11", "u-search", E0, min_score="0.5"),
    Req("D12", "POST", "/api/memories/search", raw=b'{"agent_name":'),
    search("D13", "u-search", ZERO),
    rows_of("D13 rows", "u-search"),
    search("D14", "u-zero", E0),
    rows_of("D14 rows", "u-zero"),
    search("D15", "u-meta", E1, limit=10),
    Sql("D16 setup", "UPDATE memory SET expires_at = now() - interval '1 day' WHERE content = 'beta'"),
    search("D16", "u-search", E1, limit=1),
    Req("D17", "POST", "/api/memories/search", {"agent_name": NS, "vector": E0}, headers={"X-User-Id": "u-search"}),
    rows_of("D rows", "u-search", "u-zero", "u-meta"),
    # The seven tied rows: D4-D6 returned (and counted) the index's choice of them.
    rows_summed("D rows u-limit", "u-limit"),
]

SECTION_E: list[Step] = [
    Req("E1", "GET", "/api/memories?agent_name=ns__NS__agent&user_id=u-search"),
    Sql("E2 setup", "UPDATE memory SET access_count = 9 WHERE content = 'alpha-beta'"),
    Req("E2", "GET", "/api/memories?agent_name=ns__NS__agent&user_id=u-search"),
    Sql("E3 setup", "UPDATE memory SET expires_at = NULL WHERE content = 'alpha'"),
    Req("E3", "GET", "/api/memories?agent_name=ns__NS__agent&user_id=u-search"),
    Req("E4", "GET", "/api/memories?agent_name=ns__NS__agent"),
    Req("E5", "GET", "/api/memories?user_id=u1"),
    Req("E6", "GET", "/api/memories?agent_name=ns__NS__agent", headers={"X-User-Id": "u1"}),
    Req("E7", "GET", "/api/memories?agent_name=ns__NS__agent&user_id=nobody"),
    save("E8 setup underscore", "u-norm", "stored-underscore", E0, agent="ns__NS__my_agent"),
    save("E8 setup hyphen", "u-norm", "stored-hyphen", E0, agent="ns__NS__my-agent"),
    Req("E8", "GET", "/api/memories?agent_name=ns__NS__my-agent&user_id=u-norm"),
    Req("E9", "GET", "/api/memories?agent_name=ns__NS__my_agent&user_id=u-norm"),
    search("E10", "u-norm", E0, agent="ns__NS__my_agent"),
    search("E11", "u-norm", E0, agent="ns__NS__my-agent"),
]

SECTION_F: list[Step] = [
    save("F setup popular", "u-prune", "p-popular", E0),
    save("F setup unpopular", "u-prune", "p-unpopular", E0),
    save("F setup live", "u-prune", "p-live", E0),
    save("F setup noexpiry", "u-prune", "p-noexpiry", E0),
    Sql(
        "F setup expire",
        "UPDATE memory SET expires_at = now() - interval '1 day', access_count = "
        "CASE content WHEN 'p-popular' THEN 10 ELSE 9 END "
        "WHERE content IN ('p-popular', 'p-unpopular')",
    ),
    Sql("F setup null", "UPDATE memory SET expires_at = NULL WHERE content = 'p-noexpiry'"),
    rows_of("F before", "u-prune", "u-ttl", "u-search"),
    Prune(),
    rows_of("F after", "u-prune", "u-ttl", "u-search"),
]

SECTION_G: list[Step] = [
    Req("G1", "DELETE", "/api/memories?agent_name=ns__NS__agent"),
    Req("G2", "DELETE", "/api/memories?user_id=u1"),
    Req("G3", "DELETE", "/api/memories", {"agent_name": NS, "user_id": "u1"}),
    Req("G4", "DELETE", "/api/memories?agent_name=ns__NS__agent&user_id=u-search"),
    Rows("G4 rows", "SELECT user_id, count(*) FROM memory GROUP BY user_id ORDER BY user_id"),
    Req("G5", "DELETE", "/api/memories?agent_name=ns__NS__agent&user_id=u-search"),
    Req("G6", "DELETE", "/api/memories?agent_name=ns__NS__my-agent&user_id=u-norm"),
    rows_of("G6 rows", "u-norm"),
    Req("G7", "GET", "/api/memories?agent_name=ns__NS__agent&user_id=u-search"),
]

SECTION_H: list[Step] = [
    Req("H1", "POST", "/api/memories", {}),
    Req("H2", "GET", "/api/memories/search"),
    Req("H3", "GET", "/api/memories/?agent_name=ns__NS__agent&user_id=u1"),
    Req("H4", "GET", "/api/memories/abc"),
    Req("H5", "OPTIONS", "/api/memories"),
]

TRANSCRIPT: list[Step] = [
    *SECTION_A,
    *SECTION_B,
    *SECTION_C,
    *SECTION_D,
    *SECTION_E,
    *SECTION_F,
    *SECTION_G,
    *SECTION_H,
]

ALICE = {"X-User-Id": "alice"}
BOB = {"X-User-Id": "bob"}
AGENT = "team/helper"
AS_AGENT = {"X-Agent-Name": AGENT}


def as_bob(token: str) -> dict[str, str]:
    """bob carrying the share captured as ``token``."""
    return {**BOB, "X-Share-Token": "{" + token + "}"}


def rpc(name: str, method: str, params: dict[str, Any], headers: dict[str, str]) -> Req:
    """A JSON-RPC call on AGENT's A2A route (kagent answers these before the agent is asked)."""
    return Req(
        name,
        "POST",
        f"/api/a2a/{AGENT}/",
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers=headers,
    )


def send(name: str, context: str, headers: dict[str, str]) -> Req:
    message = {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "hi"}]}
    return rpc(name, "message/send", {"message": {**message, "contextId": context}}, headers)


TASK = {"id": "t1", "contextId": "ctx-1", "kind": "task", "status": {"state": "completed"}}

#: Section S (v0.10 only): sessions keyed by owner, share links and X-Share-Token, tasks owned by users.
SECTION_S: list[Step] = [
    Req("S1", "POST", "/api/sessions", {"agent_ref": AGENT, "name": "chat", "id": "ctx-1"}, headers=ALICE),
    Req("S2", "POST", "/api/sessions", {"agent_ref": "team/nothere", "name": "chat"}, headers=ALICE),
    Req("S3", "POST", "/api/sessions", {"name": "chat"}, headers=ALICE),
    Req("S4", "GET", "/api/sessions/ctx-1", headers=ALICE),
    Req("S5", "GET", "/api/sessions/ctx-1", headers=BOB),
    Req("S6", "POST", "/api/sessions/ctx-1/shares", headers=ALICE, capture="ro"),
    Req("S7", "POST", "/api/sessions/ctx-1/shares", {"read_only": False}, headers=ALICE, capture="rw"),
    Req("S8", "POST", "/api/sessions/ctx-1/shares", headers=BOB),
    Req("S9", "POST", "/api/sessions/ctx-1/shares", {"read_only": "yes"}, headers=ALICE),
    Req("S10", "POST", "/api/sessions/ctx-2/shares", headers=ALICE),
    Req("S11", "GET", "/api/sessions/ctx-1/shares", headers=ALICE),
    Req("S12", "GET", "/api/sessions/ctx-1/shares", headers=BOB),
    Req("S13", "GET", "/api/sessions/ctx-1", headers=as_bob("ro")),
    Req("S14", "GET", "/api/sessions/ctx-1", headers={**BOB, "X-Share-Token": "not-a-share"}),
    Req("S15", "GET", "/health", headers={"X-Share-Token": "not-a-share"}),
    Req("S16", "GET", "/version", headers={"X-Share-Token": "{ro}"}),
    Req("S17", "PUT", "/api/sessions/ctx-1", {"name": "x"}, headers=as_bob("ro")),
    Req("S18", "PATCH", "/api/sessions/ctx-1", {"name": "renamed"}, headers=ALICE),
    Req("S19", "PATCH", "/api/sessions/ctx-1", {}, headers=ALICE),
    Req("S20", "PATCH", "/api/sessions/ctx-1", {"name": "mine"}, headers=as_bob("rw")),
    Req("S21", "POST", "/api/sessions/ctx-1/events", {"id": "e1", "data": "{}"}, headers={**ALICE, **AS_AGENT}),
    Req("S22", "POST", "/api/sessions/ctx-1/events", {"id": "e2", "data": "{}"}, headers={**as_bob("rw"), **AS_AGENT}),
    Req(
        "S23",
        "POST",
        "/api/sessions/ctx-1/events",
        {"id": "e3", "data": "{}"},
        headers={**ALICE, "X-Agent-Name": "team/other"},
    ),
    Req("S24", "GET", "/api/sessions/ctx-1?order=asc", headers=as_bob("rw")),
    Req("S25", "POST", "/api/tasks", TASK, headers=ALICE),
    Req("S26", "GET", "/api/tasks/t1", headers=ALICE),
    Req("S27", "GET", "/api/tasks/t1", headers=BOB),
    Req("S28", "POST", "/api/tasks", TASK, headers=BOB),
    Req("S29", "DELETE", "/api/tasks/t1", headers=BOB),
    Req("S30", "GET", "/api/sessions/ctx-1/tasks", headers=as_bob("ro")),
    Req("S31", "GET", "/api/sessions/ctx-1/tasks", headers=BOB),
    send("S32", "ctx-1", as_bob("ro")),
    send("S33", "other", as_bob("rw")),
    rpc("S34", "tasks/list", {"contextId": "ctx-1"}, as_bob("ro")),
    rpc("S35", "tasks/list", {}, BOB),
    rpc("S36", "tasks/list", {"contextId": "nope"}, ALICE),
    rpc("S37", "tasks/list", {"pageSize": 1}, ALICE),
    Req("S38", "GET", "/api/sessions", headers=BOB),
    Req("S39", "GET", "/api/sessions", headers=ALICE),
    Req("S40", "GET", f"/api/sessions/agent/{AGENT}", headers=BOB),
    Req("S41", "GET", "/api/sessions/agent/team/nothere", headers=BOB),
    search("S42", "u1", E0, agent="x"),
    Req(
        "S43",
        "POST",
        "/api/memories/search",
        {"agent_name": NS, "user_id": "u1", "vector": E0},
        headers={"X-Share-Token": "not-a-share"},
    ),
    Req("S44", "DELETE", "/api/sessions/ctx-1/shares/{rw}", headers=BOB),
    Req("S45", "DELETE", "/api/sessions/ctx-1/shares/{rw}", headers=ALICE),
    Req("S46", "DELETE", "/api/sessions/ctx-1/shares/not-a-share", headers=ALICE),
    Req("S47", "GET", "/api/sessions/ctx-1", headers=as_bob("rw")),
    Req("S48", "DELETE", "/api/sessions/ctx-1", headers=BOB),
    Req("S49", "GET", "/api/sessions/ctx-1", headers=ALICE),
    Req("S50", "DELETE", "/api/tasks/t1", headers=ALICE),
    Req("S51", "GET", "/api/tasks/t1", headers=ALICE),
    Req("S52", "POST", "/api/tasks", TASK, headers=ALICE),
    Req("S53", "DELETE", "/api/sessions/ctx-1", headers=ALICE),
    Req("S54", "GET", "/api/sessions/ctx-1", headers=ALICE),
    Req("S55", "GET", "/api/sandbox/ssh"),
]

#: Section K: every memory route with --database-vector-enabled=false (no memory table at all).
NO_VECTOR: list[Step] = [
    save("K1", "u1", "x", E0),
    batch("K2", [item("u1", "x", E0)]),
    search("K3", "u1", E0),
    Req("K4", "GET", "/api/memories?agent_name=ns__NS__agent&user_id=u1"),
    Req("K5", "DELETE", "/api/memories?agent_name=ns__NS__agent&user_id=u1"),
    save("K6", "u1", "x", V3),
]
