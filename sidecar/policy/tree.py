"""Dotted-path edits of decision-input documents (plain dicts and lists read from YAML or JSON).

An edit copies only the dicts on its path and shares everything else with the document it started
from, so the thousands of variants the authoring tools derive from one base cost a few small dicts
each, not a deep copy. Nothing edits a document in place: every change goes through :func:`with_set`.
"""

from __future__ import annotations

from typing import Any

import yaml

#: libyaml's parser where PyYAML was built with it (the same safe subset, several times faster).
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """Parse trusted tool input (case tables, properties) as YAML's safe subset."""
    return yaml.load(text, Loader=_LOADER)


def with_set(doc: dict[str, Any], path: str, value: Any, *, create: bool = False) -> dict[str, Any]:
    """``doc`` with ``path`` (``a.b.c``) set to ``value``; a missing or non-dict step is made a dict
    when ``create``, and is a ``KeyError`` otherwise."""
    keys = path.split(".")
    out = dict(doc)
    node = out
    for key in keys[:-1]:
        child = node.get(key) if create else node[key]
        if not isinstance(child, dict):
            if not create:
                raise KeyError(key)
            child = {}
        node[key] = node = dict(child)
    node[keys[-1]] = value
    return out
