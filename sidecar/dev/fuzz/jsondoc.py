"""JSON documents as the fuzzer builds them: a small tree that can also spell hostile JSON.

Python's ``json`` cannot write duplicate keys, keys that differ only by escapes, unpaired
surrogate escapes, ``NaN``, numbers beyond float range, nesting deeper than the recursion limit or
bytes after the value, yet those
are exactly what a gateway must refuse or re-serialize (SPEC R-18). The tree keeps such spellings
and renders them verbatim. Secrets and sentinels appear as :class:`Ph` placeholders: the bytes
sent hold the real values, the printed reproducer only their names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sidecar.dev.devstack.vectors import embed_text

DIM = 768


@dataclass(frozen=True)
class Ph:
    """A placeholder: a sentinel (``S:<tag>``), a session key, a token; filled in at send time."""

    name: str


@dataclass(frozen=True)
class Str:
    """A JSON string built from literal parts and placeholders, plus ``pad`` repeated ``pad_n`` times."""

    parts: tuple[str | Ph, ...]
    pad: str = ""
    pad_n: int = 0
    escaped: bool = False  # every character as a \\uXXXX escape: the same value, another spelling
    #: Escape sequences written verbatim before the closing quote (``\\ud800``, ``\\/``, ``\\b``…),
    #: including those no value spells, such as an unpaired surrogate.
    escape: str = ""


@dataclass(frozen=True)
class Obj:
    """A JSON object whose members keep their order and may repeat a key."""

    pairs: tuple[tuple[str | Str, Node], ...]


@dataclass(frozen=True)
class Arr:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Lit:
    """Raw text in a value position: ``NaN``, ``Infinity``, ``1e999``, an integer of any size."""

    text: str


@dataclass(frozen=True)
class Deep:
    """``leaf`` wrapped in ``depth`` arrays or single-member objects."""

    depth: int
    kind: Literal["array", "object"]
    leaf: Node = None


VectorRecipe = Literal[
    "valid",
    "zeros",
    "neg_zeros",
    "nan",
    "inf",
    "overflow",
    "short",
    "long",
    "empty",
    "strings",
    "bools",
    "ints",
    "nested",
    "null_item",
    "float32_overflow",
]


@dataclass(frozen=True)
class Vec:
    """A vector described by a recipe, so a case does not carry 768 drawn numbers."""

    recipe: VectorRecipe
    seed: int = 0


Node = None | bool | int | float | str | Ph | Str | Obj | Arr | Lit | Deep | Vec


@dataclass(frozen=True)
class Doc:
    """A whole body: optional bytes before and after the JSON value."""

    value: Node
    prefix: bytes = b""
    suffix: bytes = b""


Env = Mapping[str, str]


def _text(node: Str, env: Env | None) -> str:
    parts = [p if isinstance(p, str) else (env[p.name] if env is not None else f"«{p.name}»") for p in node.parts]
    if env is None and node.pad_n:
        return "".join(parts) + f"«{node.pad!r}×{node.pad_n}»"
    return "".join(parts) + node.pad * node.pad_n


def _string(node: Str | str, env: Env | None) -> str:
    if isinstance(node, str):
        return json.dumps(node, ensure_ascii=False)
    text = _text(node, env)
    if node.escaped:
        spelled = "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else json.dumps(c)[1:-1] for c in text)
    else:
        spelled = json.dumps(text, ensure_ascii=False)[1:-1]
    return '"' + spelled + node.escape + '"'


def _vector(node: Vec, env: Env | None) -> str:
    if env is None:
        return f"«vector:{node.recipe}»"
    base = embed_text(f"fuzz vector {node.seed}", DIM)
    at = node.seed % DIM
    items: list[str] = [repr(x) for x in base]
    recipe = node.recipe
    if recipe in ("zeros", "neg_zeros"):
        items = ["0" if recipe == "zeros" else "-0.0"] * DIM
    elif recipe in ("nan", "inf", "overflow", "float32_overflow", "strings", "bools", "nested", "null_item"):
        items[at] = {
            "nan": "NaN",
            "inf": "Infinity",
            "overflow": "1e999",
            "float32_overflow": "3.5e38",
            "strings": '"0.5"',
            "bools": "true",
            "nested": "[0.5]",
            "null_item": "null",
        }[recipe]
    elif recipe == "ints":
        items = [str((node.seed + i) % 3 - 1) for i in range(DIM)]
    elif recipe in ("short", "long", "empty"):
        items = items[: DIM - 1 - at % 8] if recipe == "short" else items + ["0.1"] * (1 + at % 8)
        items = [] if recipe == "empty" else items
    return "[" + ",".join(items) + "]"


def render(node: Node, env: Env | None) -> str:
    """JSON text of a node; ``env`` None renders the content-free display form instead."""
    if node is None or isinstance(node, bool):
        return json.dumps(node)
    if isinstance(node, int):
        return str(node)
    if isinstance(node, float):
        return json.dumps(node)  # NaN and Infinity spelled the way JavaScript would
    if isinstance(node, (str, Str)):
        return _string(node, env)
    if isinstance(node, Ph):
        return _string(Str((node,)), env)
    if isinstance(node, Obj):
        return "{" + ",".join(f"{_string(k, env)}:{render(v, env)}" for k, v in node.pairs) + "}"
    if isinstance(node, Arr):
        return "[" + ",".join(render(v, env) for v in node.items) + "]"
    if isinstance(node, Lit):
        return node.text
    if isinstance(node, Deep):
        leaf = render(node.leaf, env)
        if env is None:
            return f"«{node.kind} nesting ×{node.depth} around {leaf}»"
        if node.kind == "array":
            return "[" * node.depth + leaf + "]" * node.depth
        return '{"a":' * node.depth + leaf + "}" * node.depth
    return _vector(node, env)


def to_bytes(doc: Doc, env: Env) -> bytes:
    """The exact bytes of a body."""
    return doc.prefix + render(doc.value, env).encode("utf-8", "surrogatepass") + doc.suffix


def display(doc: Doc) -> str:
    """A content-free, readable spelling of a body for reproducers."""
    text = render(doc.value, None)
    if doc.prefix:
        text = f"«bytes {doc.prefix!r}»" + text
    if doc.suffix:
        text += f"«bytes {doc.suffix!r}»"
    return text


def placeholders(node: Node) -> set[str]:
    """Names of every placeholder a node holds."""
    if isinstance(node, Ph):
        return {node.name}
    if isinstance(node, Str):
        return {p.name for p in node.parts if isinstance(p, Ph)}
    if isinstance(node, Obj):
        out: set[str] = set()
        for k, v in node.pairs:
            out |= placeholders(k) if isinstance(k, Str) else set()
            out |= placeholders(v)
        return out
    if isinstance(node, Arr):
        return set().union(*(placeholders(v) for v in node.items)) if node.items else set()
    if isinstance(node, Deep):
        return placeholders(node.leaf)
    return set()
