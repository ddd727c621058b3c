"""JSON Schemas of the decision input and output, published under docs/schema/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from pydantic import BaseModel

from sidecar.policy.model import Decision, DecisionInput

SCHEMA_DIR: Final = Path(__file__).resolve().parents[2] / "docs" / "schema"
_MODELS: Final[dict[str, type[BaseModel]]] = {
    "decision-input.schema.json": DecisionInput,
    "decision.schema.json": Decision,
}


def render() -> dict[str, str]:
    """Return ``{file name: JSON Schema text}`` generated from the models."""
    out: dict[str, str] = {}
    for name, model in _MODELS.items():
        schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **model.model_json_schema()}
        out[name] = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return out


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
