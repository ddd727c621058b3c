"""Hypothesis strategies drawn from the control API's OpenAPI document (the one the gateway serves,
which a test keeps identical to docs/openapi.json).

Covers the JSON Schema subset that document uses (objects, strings with length and pattern,
integers with bounds, booleans, enums, consts, ``anyOf``, ``$ref``, arrays, null) and produces
:mod:`sidecar.dev.fuzz.jsondoc` nodes, so the same hostile mutations as on the data plane apply.
``hints`` adds meaningful values per property name (the case's own scope id, principal, room),
without which nearly every generated request would stop at the first lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

from sidecar.dev.fuzz.jsondoc import Arr, Node, Obj

S = st.SearchStrategy
#: Generated strings never contain this, so every sentinel the fuzzer finds is one it planted.
_MARK = "SNTL"


def resolve(doc: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow a local ``$ref``."""
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return resolve(doc, node)


def _string(schema: Mapping[str, Any]) -> S[str]:
    lo, hi = int(schema.get("minLength", 0)), int(schema.get("maxLength", 64))
    if "pattern" in schema:
        base: S[str] = st.from_regex(schema["pattern"], fullmatch=True)
    else:
        base = st.text(max_size=min(hi, 64))
    return base.filter(lambda s: lo <= len(s) <= hi and _MARK not in s)


def strategy(
    doc: Mapping[str, Any], schema: Mapping[str, Any], hints: Mapping[str, S[Node]] | None = None, name: str = ""
) -> S[Node]:
    """Values valid for ``schema`` (``hints`` offer meaningful values for properties by name)."""
    schema = resolve(doc, schema)
    own = st.deferred(lambda: _valid(doc, schema, hints or {}))
    if hints and name in hints:
        return st.one_of(hints[name], hints[name], own)
    return own


def _valid(doc: Mapping[str, Any], schema: Mapping[str, Any], hints: Mapping[str, S[Node]]) -> S[Node]:
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    if "anyOf" in schema:
        return st.one_of([strategy(doc, s, hints) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object":
        return _object(doc, schema, hints)
    if kind == "array":
        return st.lists(strategy(doc, schema.get("items", {}), hints), max_size=3).map(lambda xs: Arr(tuple(xs)))
    if kind == "string":
        return _string(schema)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return st.none()


def _object(doc: Mapping[str, Any], schema: Mapping[str, Any], hints: Mapping[str, S[Node]]) -> S[Node]:
    props: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    names = list(props)
    values = {n: strategy(doc, props[n], hints, n) for n in names}
    optional = [n for n in names if n not in required]

    def build(present: list[str], drawn: dict[str, Node]) -> Obj:
        return Obj(tuple((n, drawn[n]) for n in names if n in required or n in present))

    return st.builds(
        build,
        st.lists(st.sampled_from(optional), unique=True) if optional else st.just([]),
        st.fixed_dictionaries(values),
    )


def operations(doc: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(METHOD, path template, operation object) for every operation, in document order."""
    return [(method.upper(), path, op) for path, ops in doc["paths"].items() for method, op in ops.items()]


def response_schema(doc: Mapping[str, Any], op: Mapping[str, Any], status: int) -> Mapping[str, Any] | None:
    """The JSON schema of one documented response, or None when the status is undocumented."""
    response = op.get("responses", {}).get(str(status))
    if response is None:
        return None
    content = response.get("content", {}).get("application/json", {})
    schema: Mapping[str, Any] = content.get("schema", {})
    return schema
