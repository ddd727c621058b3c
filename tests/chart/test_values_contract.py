"""values.yaml and values.schema.json agree, refuse unknown keys everywhere, and document every value."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart import cases
from tests.chart.helm import CHART, previous_chart_file, render_error, run_helm

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
VALUES_TEXT = (CHART / "values.yaml").read_text()
# Kubernetes API types taken verbatim; they are documented where the value holding them is.
K8S_TYPES = {"#/definitions/labelSelector", "#/definitions/peers", "#/definitions/ports"}
#: Keys the schema requires although values.yaml sets them: the pod's non-root and seccomp settings, so
#: that a `null` (which deletes a key in Helm) cannot take them out of the pod. Both are in every release.
SECURITY_REQUIRED = {"podSecurityContext.runAsNonRoot", "podSecurityContext.seccompProfile"}
ADDED: dict[str, list[str]] = yaml.safe_load((CHART / "files" / "added-values.yaml").read_text())


def _resolve(node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Follow $ref and single-allOf wrappers; report whether a Kubernetes API type was reached."""
    k8s = False
    while True:
        if "$ref" in node:
            k8s = k8s or node["$ref"] in K8S_TYPES
            node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
        elif list(node.get("allOf") or [])[:1] and len(node["allOf"]) == 1:
            node = node["allOf"][0]
        else:
            return node, k8s


def _schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    node, _ = _resolve(node)
    yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from _schema_nodes(child, f"{path}.{key}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _schema_nodes(node["additionalProperties"], f"{path}.*")
    if isinstance(node.get("items"), dict):
        yield from _schema_nodes(node["items"], f"{path}[]")


def _documented_keys(node: yaml.Node, schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, int]]:
    """Yield (dotted key, line) for every chart value, stopping at free-form maps and Kubernetes types."""
    schema, k8s = _resolve(schema)
    if k8s or not isinstance(node, yaml.MappingNode) or "properties" not in schema:
        return
    for key_node, value_node in node.value:
        key = key_node.value
        yield f"{path}.{key}".lstrip("."), key_node.start_mark.line
        yield from _documented_keys(value_node, schema["properties"][key], f"{path}.{key}")


def _comment_block_above(line: int) -> list[str]:
    lines = VALUES_TEXT.splitlines()
    block: list[str] = []
    i = line - 1
    while i >= 0 and lines[i].lstrip().startswith("#"):
        block.insert(0, lines[i].strip())
        i -= 1
    return block


class TestSchema:
    def test_schema_is_valid_draft_7(self) -> None:
        """values.schema.json is itself a valid JSON Schema that the default values satisfy."""
        jsonschema.Draft7Validator.check_schema(SCHEMA)
        jsonschema.Draft7Validator(SCHEMA).validate(yaml.safe_load(VALUES_TEXT))

    def test_unknown_keys_are_refused_at_every_level(self) -> None:
        """Every object in the schema refuses keys it does not define, or types the entries of a map."""
        loose = [
            path or "<root>"
            for path, node in _schema_nodes(SCHEMA)
            if node.get("type") == "object"
            and not (
                node.get("additionalProperties") is False
                or ("properties" not in node and isinstance(node.get("additionalProperties"), dict))
            )
        ]
        assert loose == []

    def test_every_schema_property_is_described(self) -> None:
        """Every property in the schema carries a description."""
        undescribed = [
            f"{path}.{key}"
            for path, node in _schema_nodes(SCHEMA)
            for key, child in (node.get("properties") or {}).items()
            if not child.get("description") and not _resolve(child)[0].get("description")
        ]
        assert undescribed == []


class TestHelmLint:
    @pytest.mark.parametrize(("name", "values"), list(cases.MATRIX.items()), ids=list(cases.MATRIX))
    def test_lint_passes_for_every_values_set(self, name: str, values: dict[str, Any]) -> None:
        """helm lint --strict passes for every values set the other chart tests render."""
        assert "0 chart(s) failed" in run_helm("lint", values)


class TestValuesFile:
    def test_values_and_schema_agree_on_keys(self) -> None:
        """Every key in values.yaml is in the schema, and every key the schema requires has a default there."""

        def walk(values: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
            schema, k8s = _resolve(schema)
            if k8s or "properties" not in schema:
                return
            extra = set(values) - set(schema["properties"])
            missing = set(schema.get("required") or []) - set(values)
            if extra or missing:
                yield f"{path or '<root>'}: not in schema {sorted(extra)}, no default {sorted(missing)}"
            for key in set(values) & set(schema["properties"]):
                yield from walk(values[key], schema["properties"][key], f"{path}.{key}")

        assert list(walk(yaml.safe_load(VALUES_TEXT), SCHEMA, "")) == []

    def test_only_keys_without_a_default_are_required(self) -> None:
        """`helm upgrade --reuse-values` keeps an older chart's values: the schema requires no key values.yaml
        sets (it would refuse that upgrade before the chart can say why), only keys of what users write
        themselves (list items, map entries), and the two pod security keys a `null` must not remove."""

        def walk(values: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
            schema, k8s = _resolve(schema)
            if k8s or "properties" not in schema or not isinstance(values, dict):
                return
            for key in set(schema.get("required") or []) & set(values):
                yield f"{path}.{key}".lstrip(".")
            for key in set(values) & set(schema["properties"]):
                yield from walk(values[key], schema["properties"][key], f"{path}.{key}")

        assert set(walk(yaml.safe_load(VALUES_TEXT), SCHEMA, "")) == SECURITY_REQUIRED

    def test_every_value_new_since_the_last_release_is_listed_as_added(self) -> None:
        """files/added-values.yaml names each value the last released chart did not have (the topmost new key),
        so that `--reuse-values` from that chart is refused by name instead of rendering without them."""

        def paths(values: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
            schema, k8s = _resolve(schema)
            if k8s or "properties" not in schema or not isinstance(values, dict):
                return
            for key, value in values.items():
                yield f"{path}.{key}".lstrip(".")
                if key in schema["properties"]:  # a value the last release had and this chart no longer has
                    yield from paths(value, schema["properties"][key], f"{path}.{key}")

        previous = set(paths(yaml.safe_load(previous_chart_file("values.yaml")), SCHEMA))
        new = {p for p in paths(yaml.safe_load(VALUES_TEXT), SCHEMA) if p not in previous}
        topmost = {p for p in new if p.rpartition(".")[0] in previous or "." not in p}
        listed = {p for version in ADDED.values() for p in version}
        assert topmost <= listed, sorted(topmost - listed)
        assert listed <= set(paths(yaml.safe_load(VALUES_TEXT), SCHEMA)), "a listed value that this chart lacks"

    @pytest.mark.parametrize("added", sorted({p for version in ADDED.values() for p in version}))
    def test_values_of_an_older_chart_are_refused_naming_what_is_missing(self, added: str) -> None:
        """Values without one this chart added (what --reuse-values from the older chart hands it) are refused with
        a message naming the value and --reset-then-reuse-values."""
        head, _, last = added.rpartition(".")
        nulled: dict[str, Any] = {last: None}
        for key in reversed(head.split(".") if head else []):
            nulled = {key: nulled}
        message = render_error(nulled)
        assert added in message and "--reset-then-reuse-values" in message

    def test_every_value_is_documented_starting_with_its_name(self) -> None:
        """Each value in values.yaml has a comment right above it whose first words are the value's name."""
        keys = list(_documented_keys(yaml.compose(VALUES_TEXT), SCHEMA))
        assert len(keys) > 50
        undocumented = [
            path
            for path, line in keys
            if not (block := _comment_block_above(line)) or not block[0].startswith(f"# {path.rsplit('.', 1)[-1]} ")
        ]
        assert undocumented == []
