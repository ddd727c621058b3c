"""Data-plane cases: the governed routes' valid shapes, hostile mutations of them, odd targets, headers.

Bodies start from the shapes kagent's runtime sends (save, batch, search, embedding, A2A) and
are then bent the ways an attacker would: duplicate keys, keys that collide case-insensitively
or by escapes with a field the upstream reads, bytes after the value, deep nesting, integers
beyond int64, NaN/Infinity, all-zero, non-finite or wrong-length vectors, wrong types, other
encodings. Targets are the canonical spellings and their look-alikes, fragments, absolute and
asterisk forms. Each case names the contract family its answer is judged by (see checks).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sidecar.fuzz.cases import Case, Encoding, Request, Setup, Value
from sidecar.fuzz.chaos import Fault
from sidecar.fuzz.jsondoc import Arr, Deep, Doc, Lit, Node, Obj, Ph, Str, Vec
from sidecar.fuzz.stack import AGENT, AGENT2, PLAIN_AGENT, canonical_app

APP = canonical_app(AGENT)
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
PASSTHROUGH = ("/version", "/health", "/api/me", "/api/sessions", f"/api/agents/{AGENT}", "/api/feedback",
               "/api/toolservers", "/mcp/tools", "/api/modelconfigs", "/nowhere/at/all")
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "PROPFIND")
#: Session-key placeholders (see checks.env): genuine ones carry a valid MAC.
GENUINE_KEYS = ("KEY", "KEY_NEIGHBOUR", "KEY_OTHER_AGENT", "KEY_STALE")
CONTEXTS = ("CTX", "CTX_EXPIRED", "CTX_OTHER_ROOM", "CTX_OTHER_AGENT", "CTX_MEMBERS", "CTX_UNTYPED",
            "CTX_SUBJECT", "CTX_FORGED")


def weighted(*pairs: tuple[int, Any]) -> S[Any]:
    """Pick among values with integer weights."""
    return st.sampled_from([v for w, v in pairs for _ in range(w)])


def sentinel(tag: str) -> Str:
    return Str((Ph(f"S:{tag}"),))


user_ids: S[Node] = weighted(
    (12, Ph("KEY")), (1, Ph("KEY_NEIGHBOUR")), (1, Ph("KEY_OTHER_AGENT")), (1, Ph("KEY_FORGED")),
    (1, Ph("KEY_STALE")), (1, Ph("STORAGE_KEY")), (1, sentinel("ident")), (1, ""), (1, "admin@kagent.dev"),
    (1, "@fz1:fuzz.example"), (1, None), (1, 7),
)
agent_names: S[Node] = weighted(
    (12, APP), (2, "kagent__NS__k8s-agent"), (1, "KAGENT__NS__K8S_AGENT"), (1, "kagent__ns__k8s_agent"),
    (1, AGENT), (1, "k8s-agent"), (1, canonical_app(AGENT2)), (1, APP + " "), (1, APP + "\u0000"),
    (1, "kagent__NS__k8s\u2010agent"), (1, sentinel("ident")), (1, None),
)
big_ints: S[Node] = st.sampled_from([2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30,
                                     -1, 0, Lit("1" + "0" * 400), Lit("-0"), Lit("1e3"), Lit("7.0")])
odd_floats: S[Node] = st.sampled_from([0.0, 0.25, -1.0, 1e308, float("nan"), float("inf"), float("-inf"), 5e-324,
                                       Lit("1e999"), Lit("-0"), Lit("NaN"), Lit("Infinity")])
vectors: S[Node] = st.builds(
    Vec, weighted((16, "valid"), (1, "zeros"), (1, "neg_zeros"), (1, "nan"), (1, "inf"), (1, "overflow"),
                  (1, "short"), (1, "long"), (1, "empty"), (1, "strings"), (1, "bools"), (1, "ints"), (1, "nested"),
                  (1, "null_item"), (1, "float32_overflow")),
    st.integers(0, 10_000))
pads = st.sampled_from(["x", "ü", "😀", "\u0000", "\\"])
pad_counts = st.sampled_from([0, 0, 0, 1, 40, 243, 244, 245, 487, 488, 489, 490, 600, 4000])


def text_with(tag: str) -> S[Str]:
    """Text holding a sentinel, padded towards (and past) the byte limits."""
    return st.builds(lambda pad, n, lead: Str(((lead,) if lead else ()) + (Ph(f"S:{tag}"),), pad, n),
                     pads, pad_counts, st.sampled_from(["", "user said ", "remember: "]))


deep: S[Node] = st.builds(Deep, st.sampled_from([2, 64, 900, 1000, 3000, 20_000, 200_000]),
                          st.sampled_from(["array", "object"]), st.sampled_from([None, 1, sentinel("extra")]))
wrong_types: S[Node] = st.sampled_from([None, True, False, 0, 1.5, "", "0", Arr(()), Obj(()), Arr((None,)),
                                        Obj((("a", 1),))])
hostile: S[Node] = st.one_of(wrong_types, big_ints, odd_floats, deep, user_ids, agent_names, vectors,
                             text_with("extra"))


#: The values a well-behaved runtime sends: most cases stay clean so they reach the deep paths.
clean_users: S[Node] = weighted((10, Ph("KEY")), (1, Ph("KEY_NEIGHBOUR")), (1, Ph("KEY_STALE")))
clean_texts: S[Str] = st.builds(lambda pad, n: Str(("user said ", Ph("S:fact")), pad, n),
                                st.sampled_from(["x", "ü"]), st.sampled_from([0, 0, 1, 40, 200]))
clean_ttls: S[Node] = st.one_of(st.none(), st.integers(1, 7))
cleanliness: S[bool] = weighted((2, True), (3, False))


def fact(clean: bool, ttl: bool = True) -> S[Obj]:
    """One save body / batch item."""
    if clean:
        users, agents, texts, vecs = clean_users, st.just(APP), clean_texts, st.builds(Vec, st.just("valid"),
                                                                                       st.integers(0, 10_000))
        ttls: S[Node] = clean_ttls if ttl else st.none()
        extras: S[Node] = st.none()
    else:
        users, agents, texts, vecs = user_ids, agent_names, st.one_of(text_with("fact"), wrong_types), vectors
        ttls = st.one_of(st.none(), st.integers(-3, 30), big_ints, odd_floats) if ttl else st.none()
        extras = st.sampled_from([None, None, None, Obj((("source", sentinel("extra")),)), sentinel("extra")])

    def build(user: Node, agent: Node, content: Node, vector: Node, ttl_days: Node, metadata: Node) -> Obj:
        pairs: list[tuple[str | Str, Node]] = [("agent_name", agent), ("user_id", user), ("content", content),
                                               ("vector", vector)]
        if ttl_days is not None:
            pairs.append(("ttl_days", ttl_days))
        if metadata is not None:
            pairs.append(("metadata", metadata))
        return Obj(tuple(pairs))

    return st.builds(build, users, agents, texts, vecs, ttls, extras)


def mutate(obj: Obj, keys: tuple[str, ...]) -> S[Obj]:
    """Apply up to three hostile edits to an object: duplicates, collisions, drops, retypes, extras."""
    edit = st.tuples(st.sampled_from(["dup", "dup_first", "case", "escaped", "drop", "retype", "extra", "deep"]),
                     st.sampled_from(keys), hostile,
                     st.sampled_from(["extra", "metadata", "__proto__", "INPUT", "Items", "User_Id", "VECTOR",
                                      "Agent_Name", "", "user_id\u0000"]))

    def apply(edits: list[tuple[str, str, Node, str]]) -> Obj:
        pairs = list(obj.pairs)
        for kind, key, value, extra in edits:
            if kind == "dup":
                pairs.append((key, value))
            elif kind == "dup_first":
                pairs.insert(0, (key, value))
            elif kind == "case":
                pairs.append((key.upper() if key.islower() else key.lower(), value))
            elif kind == "escaped":
                pairs.append((Str((key,), escaped=True), value))
            elif kind == "drop":
                pairs = [p for p in pairs if p[0] != key]
            elif kind == "retype":
                pairs = [(k, value if k == key else v) for k, v in pairs]
            elif kind == "extra":
                pairs.append((extra, value))
            else:
                pairs = [(k, Deep(3000, "array", v) if k == key else v) for k, v in pairs]
        return Obj(tuple(pairs))

    return st.lists(edit, min_size=1, max_size=3).map(apply)


def document(clean: bool, value: S[Node], keys: tuple[str, ...]) -> S[Doc | bytes]:
    """A body: a clean value as JSON, or a mutated one, sometimes framed by stray bytes or not JSON at all."""
    if clean:
        return value.map(Doc)
    framed = st.builds(Doc, value.flatmap(lambda o: mutate(o, keys) if isinstance(o, Obj) else st.just(o)),
                       weighted((12, b""), (1, b"\xef\xbb\xbf"), (1, b" \n")),
                       weighted((12, b""), (1, b" "), (1, b"x"), (1, b"{}"), (1, b"\x00"), (1, b"]"),
                                (1, b'{"user_id":"admin"}'), (1, b"\xff")))
    broken = st.sampled_from([b"", b"null", b"[]", b'"x"', b"{", b'{"a":1,}', b"\xff\xfe{}", b"[" * 5000,
                              b"{" + b'"a":{' * 100_000])
    return weighted((30, "framed"), (1, "broken")).flatmap(lambda k: framed if k == "framed" else broken)


def save_body() -> S[Doc | bytes]:
    keys = ("agent_name", "user_id", "content", "vector", "ttl_days")
    return cleanliness.flatmap(lambda clean: document(clean, fact(clean), keys))


def batch_body() -> S[Doc | bytes]:
    def body(clean: bool) -> S[Doc | bytes]:
        items = st.lists(fact(clean, ttl=False), min_size=1, max_size=4 if clean else 12)
        return document(clean, items.map(lambda xs: Obj((("items", Arr(tuple(xs))),))), ("items",))

    return cleanliness.flatmap(body)


def search_body() -> S[Doc | bytes]:
    def build(user: Node, agent: Node, vector: Node, limit: Node, score: Node) -> Obj:
        pairs: list[tuple[str | Str, Node]] = [("agent_name", agent), ("user_id", user), ("vector", vector)]
        if limit is not None:
            pairs.append(("limit", limit))
        pairs.append(("min_score", score))
        return Obj(tuple(pairs))

    def body(clean: bool) -> S[Doc | bytes]:
        if clean:
            obj = st.builds(build, clean_users, st.just(APP), st.just(Vec("valid", 1)),
                            st.one_of(st.none(), st.integers(1, 10)), st.just(0.0))
        else:
            obj = st.builds(build, user_ids, agent_names, vectors,
                            st.one_of(st.integers(-2, 40), big_ints, odd_floats, st.none()),
                            st.one_of(st.just(0.0), odd_floats))
        return document(clean, obj, ("agent_name", "user_id", "vector", "limit", "min_score"))

    return cleanliness.flatmap(body)


def embedding_body() -> S[Doc | bytes]:
    many = Arr(tuple(Str((Ph("S:query"),), "x", 4000) for _ in range(40)))

    def build(inp: Node, fmt: Node, extra: str) -> Obj:
        pairs: list[tuple[str | Str, Node]] = [("model", "text-embedding-3-small"), ("input", inp),
                                               ("dimensions", 768), ("encoding_format", fmt)]
        if extra:
            pairs.append((extra, many))  # the attack: a second spelling carrying forty big items
        return Obj(tuple(pairs))

    def body(clean: bool) -> S[Doc | bytes]:
        if clean:
            one = st.builds(lambda n: Str(("what did I say ", Ph("S:query")), "x", n), st.sampled_from([0, 40]))
            obj = st.builds(build, st.one_of(one, st.lists(one, min_size=1, max_size=3).map(
                lambda xs: Arr(tuple(xs)))), st.just("float"), st.just(""))
        else:
            inputs = st.one_of(
                text_with("query"),
                st.lists(text_with("query"), min_size=1, max_size=13).map(lambda xs: Arr(tuple(xs))),
                st.sampled_from([Arr(()), Arr((1, 2)), None, Arr((sentinel("query"), 5))]),
            )
            obj = st.builds(build, inputs, st.sampled_from(["float", "base64", 7]),
                            weighted((4, ""), (1, "INPUT"), (1, "Input"), (1, "input")))
        return document(clean, obj, ("input", "model", "dimensions", "encoding_format"))

    return cleanliness.flatmap(body)


def invoke_body() -> S[Doc | bytes]:
    def build(method: Node, text: Node, context: bool) -> Obj:
        message: list[tuple[str | Str, Node]] = [
            ("role", "user"), ("messageId", "m1"), ("parts", Arr((Obj((("kind", "text"), ("text", text))),)))]
        if context:
            message.append(("contextId", "c1"))
        return Obj((("jsonrpc", "2.0"), ("id", 1), ("method", method),
                    ("params", Obj((("message", Obj(tuple(message))),)))))

    def body(clean: bool) -> S[Doc | bytes]:
        methods = st.sampled_from(["message/send", "message/stream"]) if clean else weighted(
            (6, "message/send"), (2, "message/stream"), (1, "tasks/get"), (1, sentinel("extra")))
        obj = st.builds(build, methods, text_with("msg"), st.booleans())
        return document(clean, obj, ("method", "params", "jsonrpc"))

    return cleanliness.flatmap(body)


def passthrough_body() -> S[Doc | bytes | None]:
    return st.one_of(st.none(), st.builds(lambda t: Doc(Obj((("note", t),))), text_with("body")),
                     st.sampled_from([b"\x00\x01binary", b"a=1&b=2"]))


# --- targets -------------------------------------------------------------------------------------

def _pct(path: str, index: int, lower: bool) -> str:
    letters = [i for i, c in enumerate(path) if c.isalpha()]
    at = letters[index % len(letters)]
    code = f"%{ord(path[at]):02x}" if lower else f"%{ord(path[at]):02X}"
    return path[:at] + code + path[at + 1 :]


LOOKALIKES = ("upper", "title", "pct", "pct_lower", "slash2f", "double", "trailing", "dot", "dotdot", "param",
              "nul", "dot_pct")


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
        return weighted((2, "none"), (3, "identity")).flatmap(lambda k: st.just(()) if k == "none" else st.builds(
            lambda u, a: ("?agent_name=", a, "&user_id=", u), user, st.sampled_from([APP, "kagent__NS__k8s-agent"])))
    return weighted((8, ()), (1, ("?user_id=", Ph("KEY"))), (1, ("?x=", Str((Ph("S:path"),)))))


# --- headers -------------------------------------------------------------------------------------

def headers(family: str) -> S[tuple[tuple[tuple[str, Value], ...], Encoding]]:
    """Identity carriers, contexts, content type and encoding, and noise an attacker adds."""
    user = weighted((6, None), (3, Ph("KEY")), (1, Ph("KEY_NEIGHBOUR")), (1, Str((Ph("S:hdr"),))), (1, "admin"))
    agent = weighted((5, APP), (3, None), (1, "kagent__NS__k8s-agent"), (1, Str((Ph("S:hdr"),))))
    context = weighted((12, None), *((1, Ph(n)) for n in CONTEXTS), (1, Str((Ph("S:hdr"),))))
    ctype = weighted((10, "application/json"), (1, None), (1, "text/plain"), (1, "application/json; charset=utf-16"))
    encoding = weighted((24, ("identity", None)), (2, ("gzip", "gzip")), (1, ("deflate", "deflate")),
                        (1, ("identity", "gzip")), (1, ("identity", "identity")), (1, ("gzip", "x-unknown")))
    noise = st.lists(st.sampled_from([
        ("Authorization", Str(("Bearer ", Ph("S:hdr")))), ("Cookie", Str(("s=", Ph("S:hdr")))),
        ("X-User-Id", Ph("KEY_NEIGHBOUR")), ("X-Agent-Name", "kagent__NS__helper"), ("X-Forwarded-For", "10.0.0.1"),
        ("X-Memgov-Context", Ph("CTX")), ("Accept-Encoding", "gzip"),
    ] + ([("X-Devstack-Status", "500"), ("X-Devstack-Error", Str((Ph("S:fault"),)))]
         if family == "passthrough" else [])), max_size=2)

    def build(u: Value | None, a: Value | None, c: Value | None, t: str | None, enc: tuple[Encoding, str | None],
              extra: list[tuple[str, Value]]) -> tuple[tuple[tuple[str, Value], ...], Encoding]:
        out = [(k, v) for k, v in (("X-User-Id", u), ("X-Agent-Name", a), ("X-Memgov-Context", c),
                                   ("Content-Type", t), ("Content-Encoding", enc[1])) if v is not None]
        return tuple(out + extra), enc[0]

    return st.builds(build, user, agent, context, ctype, encoding, noise)


# --- faults and whole cases ----------------------------------------------------------------------

def faults(family: str) -> S[Fault | None]:
    """Upstream misbehaviour while the case runs (its error texts carry the ``fault`` sentinel)."""
    upstream = "embedding" if family == "embedding" else "kagent"
    statuses = st.sampled_from([400, 404, 409, 422, 429, 500, 502, 503, 504])
    fault = st.builds(lambda kind, status: Fault(upstream, kind, "/", status, ""),
                      weighted((8, "status"), (2, "garbage"), (1, "drop"), (1, "delay")), statuses)
    return weighted((7, "none"), (1, "fault")).flatmap(lambda k: st.none() if k == "none" else fault)


BODIES = {"save": save_body, "batch": batch_body, "search": search_body, "embedding": embedding_body,
          "invoke": invoke_body}


def _governed(family: str, method: str, path: str) -> S[Case]:
    body = BODIES[family]() if family in BODIES else st.just(None)
    return st.builds(_assemble, st.just(family), st.just(method), st.just(path), queries(family), body,
                     headers(family), faults(family), st.booleans(), st.sampled_from([0, 0, 1, 2]), st.booleans(),
                     weighted((6, False), (1, True)), weighted((12, "none"), (1, "method"), (2, "lookalike"),
                                                                (1, "fragment"), (1, "absolute"), (1, "odd")),
                     st.sampled_from(LOOKALIKES), st.integers(0, 64), st.sampled_from(METHODS),
                     weighted((5, False), (1, True)))


def _assemble(family: str, method: str, path: str, query: tuple[Value, ...], body: Doc | bytes | None,
              hdrs: tuple[tuple[tuple[str, Value], ...], Encoding], fault: Fault | None, new_conv: bool,
              preseed: int, regrant: bool, epilogue: bool, twist: str, how: str, index: int, other: str,
              chunked: bool) -> Case:
    target: tuple[Value, ...] = (path, *query)
    if twist == "method" and other != method:
        # kagent's A2A prefix and the ungoverned stores answer every method; the memory routes only theirs.
        keep = family in ("invoke", "a2a_other", "card", "ungoverned")
        family, method = family if keep else CANONICAL.get((other, path), "lookalike"), other
    elif twist == "lookalike":
        # Behind an A2A prefix kagent hands any rest to the agent, so only the prefix is respelled.
        base, rest = _a2a_split(path) if family in ("invoke", "a2a_other", "card") else (path, "")
        family, target = "lookalike", (lookalike(base, how, index) + rest, *query)
    elif twist == "fragment":
        family, target = "fragment", (path, "#", *(query or ("frag",)))
    elif twist == "absolute":
        family, target = "absolute", (("http://127.0.0.1", "http://kagent.kagent:8083", "HTTP://x")[index % 3] + path,
                                      *query)
    elif twist == "odd":
        family, method, target = "odd", ("OPTIONS", "GET", "CONNECT")[index % 3], (("*", "*", "127.0.0.1:8083")[
            index % 3],)
    request = Request(method, target, hdrs[0], body if method not in ("GET", "HEAD") or family != "list" else None,
                      hdrs[1], chunked and body is not None)
    setup = Setup(scope=True, new_conversation=new_conv, preseed=preseed, regrant=regrant)
    return Case("data", family, request, setup, fault, epilogue and family in ("save", "batch"))


def _a2a_split(path: str) -> tuple[str, str]:
    """``/api/a2a/{ns}/{name}`` and the rest of an A2A path."""
    parts = path.split("/")
    return "/".join(parts[:5]), "/" + "/".join(parts[5:]) if len(parts) > 5 else ""


def _invoke_targets() -> S[Case]:
    paths = weighted((6, (f"/api/a2a/{AGENT}/", "invoke")), (1, (f"/api/a2a/{AGENT}", "invoke")),
                     (1, (f"/api/a2a/{PLAIN_AGENT}/", "a2a_other")), (1, (f"/api/a2a-sandboxes/{AGENT}/", "a2a_other")),
                     (1, (f"/api/a2a/{AGENT}/.well-known/agent-card.json", "card")))
    return paths.flatmap(lambda p: _governed(p[1], "GET" if p[1] == "card" else "POST", p[0]))


def _passthrough() -> S[Case]:
    def build(path: str, method: str, body: Doc | bytes | None, hdrs: tuple[tuple[tuple[str, Value], ...], Encoding],
              twist: str) -> Case:
        family = "passthrough"
        target: tuple[Value, ...] = (path,)
        if twist == "fragment":
            family, target = "fragment", (path, "#frag")
        has_body = method in ("POST", "PUT", "PATCH") and body is not None
        request = Request(method, target, hdrs[0], body if has_body else None, hdrs[1] if has_body else "identity")
        return Case("data", family, request, Setup(scope=False))

    return st.builds(build, st.sampled_from(PASSTHROUGH), st.sampled_from(METHODS[:5]), passthrough_body(),
                     headers("passthrough"), weighted((8, "none"), (1, "fragment")))


def data_cases() -> S[Case]:
    """Every data-plane case family, weighted towards the governed memory routes."""
    routes = {route: kv for kv, route in CANONICAL.items()}
    governed = weighted((4, "save"), (3, "batch"), (4, "search"), (1, "list"), (1, "delete_all"),
                        (4, "embedding")).flatmap(lambda family: _governed(family, *routes[family]) if family != (
                            "embedding") else st.sampled_from(EMBEDDING_PATHS).flatmap(
                            lambda p: _governed("embedding", "POST", p)))
    ungoverned = st.sampled_from(UNGOVERNED).flatmap(lambda p: _governed("ungoverned", "POST", p))
    return weighted((10, "governed"), (2, "invoke"), (1, "ungoverned"), (2, "passthrough")).flatmap(
        lambda k: {"governed": governed, "invoke": _invoke_targets(), "ungoverned": ungoverned,
                   "passthrough": _passthrough()}[k])
