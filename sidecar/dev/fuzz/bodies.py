"""Request bodies: the shapes kagent's runtime sends, and hostile spellings of them.

Most bodies are clean, so cases reach the deep paths (a consented scope, a valid key, a valid
vector); the rest are bent the ways an attacker would: duplicate keys, keys that collide
case-insensitively or through escapes with a field the upstream reads, bytes after the value,
deep nesting, integers beyond int64, NaN/Infinity, all-zero, non-finite or wrong-length vectors,
wrong types, oversized texts, every escape form in strings and keys (unpaired surrogates included).
Free text only ever holds sentinels, padding and escapes.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sidecar.dev.fuzz.jsondoc import Arr, Deep, Doc, Lit, Node, Obj, Ph, Str, Vec
from sidecar.dev.fuzz.stack import AGENT, AGENT2, canonical_app

APP = canonical_app(AGENT)
S = st.SearchStrategy


def weighted(*pairs: tuple[int, Any]) -> S[Any]:
    """Pick among values with integer weights."""
    return st.sampled_from([v for w, v in pairs for _ in range(w)])


def sentinel(tag: str) -> Str:
    return Str((Ph(f"S:{tag}"),))


user_ids: S[Node] = weighted(
    (12, Ph("KEY")),
    (1, Ph("KEY_NEIGHBOUR")),
    (1, Ph("KEY_OTHER_AGENT")),
    (1, Ph("KEY_FORGED")),
    (1, Ph("KEY_STALE")),
    (1, Ph("STORAGE_KEY")),
    (1, sentinel("ident")),
    (1, ""),
    (1, "admin@kagent.dev"),
    (1, "@fz1:fuzz.example"),
    (1, None),
    (1, 7),
)
agent_names: S[Node] = weighted(
    (12, APP),
    (2, "kagent__NS__k8s-agent"),
    (1, "KAGENT__NS__K8S_AGENT"),
    (1, "kagent__ns__k8s_agent"),
    (1, AGENT),
    (1, "k8s-agent"),
    (1, canonical_app(AGENT2)),
    (1, APP + " "),
    (1, APP + "\u0000"),
    (1, "kagent__NS__k8s\u2010agent"),
    (1, sentinel("ident")),
    (1, None),
)
big_ints: S[Node] = st.sampled_from(
    [
        2**31 - 1,
        2**31,
        2**53 + 1,
        2**63 - 1,
        2**63,
        2**64,
        -(2**63) - 1,
        10**30,
        -1,
        0,
        Lit("1" + "0" * 400),
        Lit("-0"),
        Lit("1e3"),
        Lit("7.0"),
    ]
)
odd_floats: S[Node] = st.sampled_from(
    [
        0.0,
        0.25,
        -1.0,
        1e308,
        float("nan"),
        float("inf"),
        float("-inf"),
        5e-324,
        Lit("1e999"),
        Lit("-0"),
        Lit("NaN"),
        Lit("Infinity"),
    ]
)
vectors: S[Node] = st.builds(
    Vec,
    weighted(
        (16, "valid"),
        (1, "zeros"),
        (1, "neg_zeros"),
        (1, "nan"),
        (1, "inf"),
        (1, "overflow"),
        (1, "short"),
        (1, "long"),
        (1, "empty"),
        (1, "strings"),
        (1, "bools"),
        (1, "ints"),
        (1, "nested"),
        (1, "null_item"),
        (1, "float32_overflow"),
    ),
    st.integers(0, 10_000),
)
pads = st.sampled_from(["x", "ü", "😀", "\u0000", "\\"])
#: Escapes written at the end of a hostile string: the short forms, code units, a surrogate pair,
#: and unpaired, reversed or half-paired surrogates (orjson refuses those, the stdlib decoder reads them).
escapes = weighted(
    (8, ""),
    (1, "\\ud800"),
    (1, "\\udfff"),
    (1, "\\uDBFF"),
    (1, "\\udc00\\ud800"),
    (1, "\\ud800\\u0041"),
    (1, "\\ud83d\\ude00"),
    (1, '\\/\\b\\f\\n\\r\\t\\"\\\\'),
    (1, "\\u0000\\u001f"),
    (1, "\\u00fc\\uFFFF"),
)
pad_counts = st.sampled_from([0, 0, 0, 1, 40, 243, 244, 245, 487, 488, 489, 490, 600, 4000])


def text_with(tag: str) -> S[Str]:
    """Text holding a sentinel, padded towards (and past) the byte limits, sometimes ending in escapes."""
    return st.builds(
        lambda pad, n, lead, esc: Str(((lead,) if lead else ()) + (Ph(f"S:{tag}"),), pad, n, escape=esc),
        pads,
        pad_counts,
        st.sampled_from(["", "user said ", "remember: "]),
        escapes,
    )


deep: S[Node] = st.builds(
    Deep,
    st.sampled_from([2, 64, 900, 1000, 3000, 20_000, 200_000]),
    st.sampled_from(["array", "object"]),
    st.sampled_from([None, 1, sentinel("extra")]),
)
wrong_types: S[Node] = st.sampled_from(
    [None, True, False, 0, 1.5, "", "0", Arr(()), Obj(()), Arr((None,)), Obj((("a", 1),))]
)
hostile: S[Node] = st.one_of(
    wrong_types, big_ints, odd_floats, deep, user_ids, agent_names, vectors, text_with("extra")
)


#: The values a well-behaved runtime sends: most cases stay clean so they reach the deep paths.
clean_users: S[Node] = weighted((10, Ph("KEY")), (1, Ph("KEY_NEIGHBOUR")), (1, Ph("KEY_STALE")))
#: kagent's Go runtime and its Python runtime may spell the app name with '-' or '_'; both are accepted.
clean_agents: S[Node] = weighted((3, APP), (1, "kagent__NS__k8s-agent"))
clean_texts: S[Str] = st.builds(
    lambda pad, n: Str(("user said ", Ph("S:fact")), pad, n),
    st.sampled_from(["x", "ü"]),
    st.sampled_from([0, 0, 1, 40, 200]),
)
clean_ttls: S[Node] = st.one_of(st.none(), st.integers(1, 7))
cleanliness: S[bool] = weighted((2, True), (3, False))


def fact(clean: bool, ttl: bool = True) -> S[Obj]:
    """One save body / batch item."""
    vecs: S[Node]
    if clean:
        users, agents, texts, vecs = (
            clean_users,
            clean_agents,
            clean_texts,
            st.builds(Vec, st.just("valid"), st.integers(0, 10_000)),
        )
        ttls: S[Node] = clean_ttls if ttl else st.none()
        extras: S[Node] = st.none()
    else:
        users, agents, texts, vecs = user_ids, agent_names, st.one_of(text_with("fact"), wrong_types), vectors
        ttls = st.one_of(st.none(), st.integers(-3, 30), big_ints, odd_floats) if ttl else st.none()
        extras = st.sampled_from([None, None, None, Obj((("source", sentinel("extra")),)), sentinel("extra")])

    def build(user: Node, agent: Node, content: Node, vector: Node, ttl_days: Node, metadata: Node) -> Obj:
        pairs: list[tuple[str | Str, Node]] = [
            ("agent_name", agent),
            ("user_id", user),
            ("content", content),
            ("vector", vector),
        ]
        if ttl_days is not None:
            pairs.append(("ttl_days", ttl_days))
        if metadata is not None:
            pairs.append(("metadata", metadata))
        return Obj(tuple(pairs))

    return st.builds(build, users, agents, texts, vecs, ttls, extras)


def mutate(obj: Obj, keys: tuple[str, ...]) -> S[Obj]:
    """Apply up to three hostile edits to an object: duplicates, collisions, drops, retypes, extras."""
    edit = st.tuples(
        st.sampled_from(["dup", "dup_first", "case", "escaped", "surrogate", "drop", "retype", "extra", "deep"]),
        st.sampled_from(keys),
        hostile,
        st.sampled_from(
            ["extra", "metadata", "__proto__", "INPUT", "Items", "User_Id", "VECTOR", "Agent_Name", "", "user_id\u0000"]
        ),
    )

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
            elif kind == "surrogate":
                pairs.append((Str((key,), escape="\\udc00"), value))  # a key no serializer can write
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
    framed = st.builds(
        Doc,
        value.flatmap(lambda o: mutate(o, keys) if isinstance(o, Obj) else st.just(o)),
        weighted((12, b""), (1, b"\xef\xbb\xbf"), (1, b" \n")),
        weighted(
            (12, b""),
            (1, b" "),
            (1, b"x"),
            (1, b"{}"),
            (1, b"\x00"),
            (1, b"]"),
            (1, b'{"user_id":"admin"}'),
            (1, b"\xff"),
        ),
    )
    broken = st.sampled_from(
        [b"", b"null", b"[]", b'"x"', b"{", b'{"a":1,}', b"\xff\xfe{}", b"[" * 5000, b"{" + b'"a":{' * 100_000]
    )
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
            obj = st.builds(
                build,
                clean_users,
                clean_agents,
                st.just(Vec("valid", 1)),
                st.one_of(st.none(), st.integers(1, 10)),
                st.just(0.0),
            )
        else:
            obj = st.builds(
                build,
                user_ids,
                agent_names,
                vectors,
                st.one_of(st.integers(-2, 40), big_ints, odd_floats, st.none()),
                st.one_of(st.just(0.0), odd_floats),
            )
        return document(clean, obj, ("agent_name", "user_id", "vector", "limit", "min_score"))

    return cleanliness.flatmap(body)


def embedding_body() -> S[Doc | bytes]:
    many = Arr(tuple(Str((Ph("S:query"),), "x", 4000) for _ in range(40)))

    def build(inp: Node, fmt: Node, extra: str, model: Node = "text-embedding-3-small") -> Obj:
        pairs: list[tuple[str | Str, Node]] = [
            ("model", model),
            ("input", inp),
            ("dimensions", 768),
            ("encoding_format", fmt),
        ]
        if extra:
            pairs.append((extra, many))  # the attack: a second spelling carrying forty big items
        return Obj(tuple(pairs))

    def body(clean: bool) -> S[Doc | bytes]:
        if clean:
            one = st.builds(lambda n: Str(("what did I say ", Ph("S:query")), "x", n), st.sampled_from([0, 40]))
            obj = st.builds(
                build,
                st.one_of(one, st.lists(one, min_size=1, max_size=3).map(lambda xs: Arr(tuple(xs)))),
                st.just("float"),
                st.just(""),
            )
        else:
            inputs = st.one_of(
                text_with("query"),
                st.lists(text_with("query"), min_size=1, max_size=13).map(lambda xs: Arr(tuple(xs))),
                st.sampled_from([Arr(()), Arr((1, 2)), None, Arr((sentinel("query"), 5))]),
            )
            obj = st.builds(
                build,
                inputs,
                st.sampled_from(["float", "base64", 7]),
                weighted((4, ""), (1, "INPUT"), (1, "Input"), (1, "input")),
                escapes.map(lambda esc: Str(("text-embedding-3-small",), escape=esc)),
            )
        return document(clean, obj, ("input", "model", "dimensions", "encoding_format"))

    return cleanliness.flatmap(body)


def invoke_body() -> S[Doc | bytes]:
    def build(method: Node, text: Node, context: bool) -> Obj:
        message: list[tuple[str | Str, Node]] = [
            ("role", "user"),
            ("messageId", "m1"),
            ("parts", Arr((Obj((("kind", "text"), ("text", text))),))),
        ]
        if context:
            message.append(("contextId", "c1"))
        return Obj(
            (("jsonrpc", "2.0"), ("id", 1), ("method", method), ("params", Obj((("message", Obj(tuple(message))),))))
        )

    def body(clean: bool) -> S[Doc | bytes]:
        methods = (
            st.sampled_from(["message/send", "message/stream"])
            if clean
            else weighted((6, "message/send"), (2, "message/stream"), (1, "tasks/get"), (1, sentinel("extra")))
        )
        obj = st.builds(build, methods, text_with("msg"), st.booleans())
        return document(clean, obj, ("method", "params", "jsonrpc"))

    return cleanliness.flatmap(body)


def passthrough_body() -> S[Doc | bytes | None]:
    return st.one_of(
        st.none(),
        st.builds(lambda t: Doc(Obj((("note", t),))), text_with("body")),
        st.sampled_from([b"\x00\x01binary", b"a=1&b=2"]),
    )
