"""Data-plane cases: governed routes and their look-alike, fragment, absolute and asterisk targets,
identity carriers and contexts, encodings, upstream faults (bodies: :mod:`sidecar.dev.fuzz.bodies`).

Each case names the contract family its answer is judged by (see :mod:`sidecar.dev.fuzz.run_data`).
"""

from __future__ import annotations

from typing import Literal

from hypothesis import strategies as st

from sidecar.dev.fuzz.bodies import (
    APP,
    batch_body,
    embedding_body,
    invoke_body,
    passthrough_body,
    save_body,
    search_body,
    weighted,
)
from sidecar.dev.fuzz.cases import Case, Encoding, Request, Setup, Value
from sidecar.dev.fuzz.chaos import Fault
from sidecar.dev.fuzz.jsondoc import Doc, Ph, Str
from sidecar.dev.fuzz.stack import AGENT, AGENT2, PLAIN_AGENT

S = st.SearchStrategy

#: (method, path) of each governed route and the family that judges its answer.
CANONICAL: dict[tuple[str, str], str] = {
    ("POST", "/api/memories/sessions"): "save",
    ("POST", "/api/memories/sessions/batch"): "batch",
    ("POST", "/api/memories/search"): "search",
    ("GET", "/api/memories"): "list",
    ("DELETE", "/api/memories"): "delete_all",
    ("POST", f"/embeddings/{AGENT}/v1/embeddings"): "embedding",
    ("POST", f"/embeddings/{AGENT2}/v1/embeddings"): "embedding",
    ("POST", f"/embeddings/{PLAIN_AGENT}/v1/embeddings"): "embedding",
}
EMBEDDING_PATHS = tuple(p for (_, p), f in CANONICAL.items() if f == "embedding")
UNGOVERNED = ("/api/crewai/memory", "/api/crewai/flows/state", "/api/langgraph/checkpoints")
PASSTHROUGH = (
    "/version",
    "/health",
    "/api/me",
    "/api/sessions",
    f"/api/sessions/agent/{AGENT}",
    "/api/feedback",
    "/api/tools",
    "/mcp/tools",
    "/api/modelproviderconfigs/models",
    "/nowhere/at/all",
)
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "PROPFIND")
#: Context placeholders: a valid one, and each way one can be wrong (see :meth:`CaseRun.contexts`).
CONTEXTS = (
    "CTX",
    "CTX_EXPIRED",
    "CTX_OTHER_ROOM",
    "CTX_OTHER_AGENT",
    "CTX_MEMBERS",
    "CTX_UNTYPED",
    "CTX_SUBJECT",
    "CTX_FORGED",
)


# --- targets -------------------------------------------------------------------------------------


def _pct(path: str, index: int, lower: bool) -> str:
    letters = [i for i, c in enumerate(path) if c.isalpha()]
    at = letters[index % len(letters)]
    code = f"%{ord(path[at]):02x}" if lower else f"%{ord(path[at]):02X}"
    return path[:at] + code + path[at + 1 :]


LOOKALIKES = (
    "upper",
    "title",
    "pct",
    "pct_lower",
    "slash2f",
    "double",
    "trailing",
    "dot",
    "dotdot",
    "param",
    "nul",
    "dot_pct",
)


def lookalike(path: str, how: str, index: int) -> str:
    """Another spelling of ``path`` that a lenient router may still map to the same handler."""
    slashes = [i for i, c in enumerate(path) if c == "/"][1:] or [0]
    cut = slashes[index % len(slashes)]
    return {
        "upper": path.upper(),
        "title": path.title(),
        "pct": _pct(path, index, False),
        "pct_lower": _pct(path, index, True),
        "slash2f": path[:cut] + "%2F" + path[cut + 1 :],
        "double": path[:cut] + "/" + path[cut:],
        "trailing": path + "/",
        "dot": path[:cut] + "/." + path[cut:],
        "dotdot": path[:cut] + "/x/.." + path[cut:],
        "param": path + ";a=b",
        "nul": path + "%00",
        "dot_pct": path[:cut] + "/%2e" + path[cut:],
    }[how]


def queries(family: str) -> S[tuple[Value, ...]]:
    """Query strings: identity parameters kagent reads, and noise."""
    user = st.sampled_from([Ph("KEY"), Ph("KEY_NEIGHBOUR"), Ph("STORAGE_KEY"), Str((Ph("S:ident"),)), "admin"])
    if family in ("list", "delete_all", "invoke"):
        return weighted((2, "none"), (3, "identity")).flatmap(
            lambda k: (
                st.just(())
                if k == "none"
                else st.builds(
                    lambda u, a: ("?agent_name=", a, "&user_id=", u),
                    user,
                    st.sampled_from([APP, "kagent__NS__k8s-agent"]),
                )
            )
        )
    return weighted((8, ()), (1, ("?user_id=", Ph("KEY"))), (1, ("?x=", Str((Ph("S:path"),)))))


# --- headers -------------------------------------------------------------------------------------


def headers(family: str) -> S[tuple[tuple[tuple[str, Value], ...], Encoding]]:
    """Identity carriers, contexts, content type and encoding, and noise an attacker adds."""
    user = weighted((6, None), (3, Ph("KEY")), (1, Ph("KEY_NEIGHBOUR")), (1, Str((Ph("S:hdr"),))), (1, "admin"))
    agent = weighted((5, APP), (3, None), (1, "kagent__NS__k8s-agent"), (1, Str((Ph("S:hdr"),))))
    context = weighted((12, None), *((1, Ph(n)) for n in CONTEXTS), (1, Str((Ph("S:hdr"),))))
    ctype = weighted((10, "application/json"), (1, None), (1, "text/plain"), (1, "application/json; charset=utf-16"))
    encoding = weighted(
        (24, ("identity", None)),
        (2, ("gzip", "gzip")),
        (1, ("deflate", "deflate")),
        (1, ("identity", "gzip")),
        (1, ("identity", "identity")),
        (1, ("gzip", "x-unknown")),
    )
    noise = st.lists(
        st.sampled_from(
            [
                ("Authorization", Str(("Bearer ", Ph("S:hdr")))),
                ("Cookie", Str(("s=", Ph("S:hdr")))),
                ("X-User-Id", Ph("KEY_NEIGHBOUR")),
                ("X-Agent-Name", "kagent__NS__helper"),
                ("X-Forwarded-For", "10.0.0.1"),
                ("X-Memgov-Context", Ph("CTX")),
                ("Accept-Encoding", "gzip"),
            ]
            + (
                [("X-Devstack-Status", "500"), ("X-Devstack-Error", Str((Ph("S:fault"),)))]
                if family == "passthrough"
                else []
            )
        ),
        max_size=2,
    )

    def build(
        u: Value | None,
        a: Value | None,
        c: Value | None,
        t: str | None,
        enc: tuple[Encoding, str | None],
        extra: list[tuple[str, Value]],
    ) -> tuple[tuple[tuple[str, Value], ...], Encoding]:
        out = [
            (k, v)
            for k, v in (
                ("X-User-Id", u),
                ("X-Agent-Name", a),
                ("X-Memgov-Context", c),
                ("Content-Type", t),
                ("Content-Encoding", enc[1]),
            )
            if v is not None
        ]
        return tuple(out + extra), enc[0]

    return st.builds(build, user, agent, context, ctype, encoding, noise)


# --- faults and whole cases ----------------------------------------------------------------------


def faults(family: str) -> S[Fault | None]:
    """Upstream misbehaviour while the case runs (its error texts carry the ``fault`` sentinel)."""
    upstream: Literal["kagent", "embedding"] = "embedding" if family == "embedding" else "kagent"
    statuses = st.sampled_from([400, 404, 409, 422, 429, 500, 502, 503, 504])
    # A provider's 200 is relayed to the agent that asked, whatever it holds; kagent's is parsed by memgov.
    kinds = weighted((8, "status"), (1, "drop"), (1, "delay"), *(() if upstream == "embedding" else ((2, "garbage"),)))
    fault = st.builds(lambda kind, status: Fault(upstream, kind, "/", status, ""), kinds, statuses)
    return weighted((7, "none"), (1, "fault")).flatmap(lambda k: st.none() if k == "none" else fault)


BODIES = {
    "save": save_body,
    "batch": batch_body,
    "search": search_body,
    "embedding": embedding_body,
    "invoke": invoke_body,
}


def _governed(family: str, method: str, path: str) -> S[Case]:
    body = BODIES[family]() if family in BODIES else st.just(None)
    return st.builds(
        _assemble,
        st.just(family),
        st.just(method),
        st.just(path),
        queries(family),
        body,
        headers(family),
        faults(family),
        st.booleans(),
        st.sampled_from([0, 0, 1, 2]),
        st.booleans(),
        weighted((2, False), (1, True)),
        weighted((12, "none"), (1, "method"), (2, "lookalike"), (1, "fragment"), (1, "absolute"), (1, "odd")),
        st.sampled_from(LOOKALIKES),
        st.integers(0, 64),
        st.sampled_from(METHODS),
        weighted((5, False), (1, True)),
    )


def _assemble(
    family: str,
    method: str,
    path: str,
    query: tuple[Value, ...],
    body: Doc | bytes | None,
    hdrs: tuple[tuple[tuple[str, Value], ...], Encoding],
    fault: Fault | None,
    new_conv: bool,
    preseed: int,
    regrant: bool,
    epilogue: bool,
    twist: str,
    how: str,
    index: int,
    other: str,
    chunked: bool,
) -> Case:
    target: tuple[Value, ...] = (path, *query)
    if twist == "method" and other != method:
        # kagent's A2A prefix and the ungoverned stores answer every method; the memory routes only theirs.
        keep = family in ("invoke", "a2a_other", "card", "ungoverned")
        family, method = family if keep else CANONICAL.get((other, path), "lookalike"), other
    elif twist == "lookalike":
        # Behind an A2A prefix kagent hands any rest to the agent, so only the prefix is respelled. A
        # ";param" or "%00" suffix is no spelling of the route to kagent's router: relayed or refused,
        # both are fine (that no memory handler is reached is checked on every case).
        a2a = family in ("invoke", "a2a_other", "card")
        base, rest = _a2a_split(path) if a2a else (path, "")
        how = "double" if a2a and how == "trailing" else how  # /api/a2a/ns/name/ is the canonical spelling
        family = "passthrough" if how in ("param", "nul") else "lookalike"
        target = (lookalike(base, how, index) + rest, *query)
    elif twist == "fragment":
        family, target = "fragment", (path, "#", *(query or ("frag",)))
    elif twist == "absolute":
        family, target = (
            "absolute",
            (("http://127.0.0.1", "http://kagent.kagent:8083", "HTTP://x")[index % 3] + path, *query),
        )
    elif twist == "odd":
        family, method, target = (
            "odd",
            ("OPTIONS", "GET", "CONNECT")[index % 3],
            (("*", "*", "127.0.0.1:8083")[index % 3],),
        )
    request = Request(method, target, hdrs[0], body, hdrs[1], chunked and body is not None)
    setup = Setup(scope=True, new_conversation=new_conv, preseed=preseed, regrant=regrant)
    # A write whose outcome memgov never learned (delay) is what erasure evidence must not lie about.
    epilogue = (epilogue or (fault is not None and fault.kind == "delay")) and family in ("save", "batch")
    return Case("data", family, request, setup, fault, epilogue)


def _a2a_split(path: str) -> tuple[str, str]:
    """``/api/a2a/{ns}/{name}`` and the rest of an A2A path."""
    parts = path.split("/")
    return "/".join(parts[:5]), "/" + "/".join(parts[5:]) if len(parts) > 5 else ""


def _invoke_targets() -> S[Case]:
    paths = weighted(
        (6, (f"/api/a2a/{AGENT}/", "invoke")),
        (1, (f"/api/a2a/{AGENT}", "invoke")),
        (1, (f"/api/a2a/{PLAIN_AGENT}/", "a2a_other")),
        (1, (f"/api/a2a-sandboxes/{AGENT}/", "a2a_other")),
        (1, (f"/api/a2a/{AGENT}/.well-known/agent-card.json", "card")),
    )
    return paths.flatmap(lambda p: _governed(p[1], "GET" if p[1] == "card" else "POST", p[0]))


def _passthrough() -> S[Case]:
    def build(
        path: str,
        method: str,
        body: Doc | bytes | None,
        hdrs: tuple[tuple[tuple[str, Value], ...], Encoding],
        twist: str,
    ) -> Case:
        family = "passthrough"
        target: tuple[Value, ...] = (path,)
        if twist == "fragment":
            family, target = "fragment", (path, "#frag")
        has_body = method in ("POST", "PUT", "PATCH") and body is not None
        request = Request(method, target, hdrs[0], body if has_body else None, hdrs[1] if has_body else "identity")
        return Case("data", family, request, Setup(scope=False))

    return st.builds(
        build,
        st.sampled_from(PASSTHROUGH),
        st.sampled_from(METHODS[:5]),
        passthrough_body(),
        headers("passthrough"),
        weighted((8, "none"), (1, "fragment")),
    )


def data_cases() -> S[Case]:
    """Every data-plane case family, weighted towards the governed memory routes."""
    routes = {route: kv for kv, route in CANONICAL.items()}
    governed = weighted(
        (4, "save"), (3, "batch"), (4, "search"), (1, "list"), (1, "delete_all"), (4, "embedding")
    ).flatmap(
        lambda family: (
            _governed(family, *routes[family])
            if family != ("embedding")
            else st.sampled_from(EMBEDDING_PATHS).flatmap(lambda p: _governed("embedding", "POST", p))
        )
    )
    ungoverned = st.sampled_from(UNGOVERNED).flatmap(lambda p: _governed("ungoverned", "POST", p))
    return weighted((10, "governed"), (2, "invoke"), (1, "ungoverned"), (2, "passthrough")).flatmap(
        lambda k: {
            "governed": governed,
            "invoke": _invoke_targets(),
            "ungoverned": ungoverned,
            "passthrough": _passthrough(),
        }[k]
    )
