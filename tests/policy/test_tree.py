"""Path edits share what they do not change and never touch the document they start from."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.policy.tree import load_yaml, with_set


def test_an_edit_copies_its_path_and_leaves_the_original_alone() -> None:
    doc: dict[str, Any] = {"request": {"item_count": 1, "ttl": {"days": 3}}, "deployment": {"limits": {"max_days": 7}}}
    out = with_set(doc, "request.ttl.days", 9)
    assert out["request"]["ttl"]["days"] == 9
    assert doc["request"]["ttl"]["days"] == 3
    assert out["deployment"] is doc["deployment"]  # off the path: shared, not copied
    assert out["request"] is not doc["request"]


def test_missing_steps_are_made_only_when_asked() -> None:
    assert with_set({}, "a.b", 1, create=True) == {"a": {"b": 1}}
    assert with_set({"a": 5}, "a.b", 1, create=True) == {"a": {"b": 1}}
    with pytest.raises(KeyError):
        with_set({}, "a.b", 1)
    with pytest.raises(KeyError):
        with_set({"a": 5}, "a.b", 1)


def test_yaml_is_read_with_the_safe_subset() -> None:
    assert load_yaml("a: [1, x]\n") == {"a": [1, "x"]}
    with pytest.raises(Exception, match="python/object"):
        load_yaml("!!python/object:os.system {}\n")
