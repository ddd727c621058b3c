"""JSON Schemas of the decision input and output, published under docs/schema/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

from sidecar.policy.model import Decision, DecisionInput

SCHEMA_DIR: Final = Path(__file__).resolve().parents[2] / "docs" / "schema"
_MODELS: Final[dict[str, type[BaseModel]]] = {
    "decision-input.schema.json": DecisionInput,
    "decision.schema.json": Decision,
}


#: The input schema ``opa check --schema`` types the Rego pack with (see :func:`_not_null`).
TYPECHECK_SCHEMA: Final = "decision-input.typecheck.schema.json"


def _not_null(node: Any) -> Any:
    """The schema with every nullable object typed as the object alone.

    OPA's type checker gives up on a value that may be an object or null, so a misspelt field
    under principal, agent, scope, room or audience passed ``opa check``. A rule that reads such a
    field needs the object anyway, so typing it as the object loses no valid rule.
    """
    if isinstance(node, list):
        return [_not_null(x) for x in node]
    if not isinstance(node, dict):
        return node
    options = node.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        (other,) = [x for x in options if x != {"type": "null"}]
        if "$ref" in other:
            return {**{k: v for k, v in node.items() if k not in ("anyOf", "default")}, **other}
    return {k: _not_null(v) for k, v in node.items()}


def render() -> dict[str, str]:
    """Return ``{file name: JSON Schema text}`` generated from the models."""
    docs: dict[str, Any] = {}
    for name, model in _MODELS.items():
        docs[name] = {"$schema": "https://json-schema.org/draft/2020-12/schema", **model.model_json_schema()}
    docs[TYPECHECK_SCHEMA] = _not_null(docs["decision-input.schema.json"])
    return {name: json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n" for name, doc in docs.items()}


def stale(folder: Path = SCHEMA_DIR) -> list[str]:
    """Names of the published schema files that differ from the models (missing ones included)."""
    found = []
    for name, text in render().items():
        path = folder / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            found.append(name)
    return found


def write(folder: Path = SCHEMA_DIR) -> list[Path]:
    """Write the schema files and return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in render().items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
