"""``policies/properties.yaml``: the guarantees a pack makes, as conditions ``memgov policy prove`` proves.

Each property names its actions (action ids, or the schema's action groups), the reason codes
whose rules enforce it (``enforced_by``: a counterexample explains those rules condition by
condition, and a code no property names is reported) and a Cedar condition every request the
pack allows must meet (``allows_only_if``). ``assume`` is what every realistic request meets
besides what prove adds itself. The file is part of the pack's contract: ``memgov policy diff``
lists every change to it, and ``prove --baseline OLD`` holds the new pack to the old file too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sidecar.policy.pack import PackError
from sidecar.policy.tree import load_yaml

PROPERTIES_FILE: Final = "properties.yaml"
NEVER_ERRORS: Final = "never-errors"


class Property(BaseModel):
    """One entry of properties.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=r"^[a-z][a-z0-9-]{1,47}$", description="Kebab-case name, printed in reports.")
    description: str = Field(..., min_length=1, max_length=200, description="What the property guarantees.")
    actions: list[str] = Field(..., min_length=1, description="Action ids or action groups of the schema.")
    enforced_by: list[str] = Field(
        default_factory=list, description="Reason codes whose rules enforce it (explained on a counterexample)."
    )
    allows_only_if: str = Field(..., min_length=1, description="Cedar condition every allowed request meets.")


class Properties(BaseModel):
    """properties.yaml: shared assumptions and the properties."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    assume: str = Field("true", description="Cedar condition every realistic request meets.")
    properties: list[Property] = Field(default_factory=list, description="The properties to prove.")

    def named(self, name: str) -> Property | None:
        """The property called ``name``, if there is one."""
        return next((p for p in self.properties if p.name == name), None)


def parse_properties(text: str, where: str = PROPERTIES_FILE) -> Properties:
    """A properties file's text as Properties; PackError names the file and the fields at fault."""
    try:
        props = Properties.model_validate(load_yaml(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PackError(f"{where}{line}: not YAML", file=PROPERTIES_FILE) from None
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors())
        raise PackError(f"{where}: invalid ({fields})", file=PROPERTIES_FILE) from None
    names = [p.name for p in props.properties]
    if len(set(names)) != len(names) or NEVER_ERRORS in names:
        raise PackError(f"{where}: property names must be unique and not {NEVER_ERRORS}")
    return props


def load_properties(root: Path) -> Properties:
    """The pack's properties.yaml; PackError names the file and the fields at fault."""
    path = Path(root) / PROPERTIES_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PackError(f"{PROPERTIES_FILE}: not found in {root}", file=PROPERTIES_FILE) from None
    return parse_properties(text)


def properties_or_none(root: Path) -> Properties | None:
    """The pack's properties, or None when it has no properties.yaml."""
    return load_properties(root) if (Path(root) / PROPERTIES_FILE).is_file() else None
