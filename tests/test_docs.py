"""The newcomer's documents stay true: ids resolve, links resolve, the README stays short and complete."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.reasons import BUILT_IN

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
REQUIREMENTS = ROOT / "docs" / "requirements.md"
README_MAX_LINES = 250

#: Where the code, the packs and the documents cite requirement and design ids.
CITING = ("sidecar", "tests", "docs", "charts", "policies", "policy-tests", "conformance", "benchmarks", "scripts")
TEXT_SUFFIXES = frozenset({".py", ".md", ".rego", ".cedar", ".cedarschema", ".yaml", ".yml", ".json", ".sql", ".tpl"})
#: The differential transcript names its steps with a letter and a number: step names, not design decisions.
D_STEP_NAMES = ROOT / "tests" / "conformance" / "transcript.py"

REQUIREMENT_ID = re.compile(r"\bR-\d+\b")
DESIGN_ID = re.compile(r"\bD\d+\b")
DEFINITION = re.compile(r"^(?:### (D\d+)|\*\*(R-\d+)) — ", re.MULTILINE)
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`((?:sidecar|tests|policies|policy-tests|docs|charts)/[^`\s*{}…]*)`")


def defined_ids() -> list[str]:
    return [design or requirement for design, requirement in DEFINITION.findall(REQUIREMENTS.read_text())]


def cited_ids() -> Iterator[tuple[str, str]]:
    """Every (id, file) the repository cites, outside the page that defines them."""
    files = [README] + [p for d in CITING for p in sorted((ROOT / d).rglob("*")) if p.suffix in TEXT_SUFFIXES]
    for path in files:
        if path == REQUIREMENTS or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        name = str(path.relative_to(ROOT))
        for cited in REQUIREMENT_ID.findall(text):
            yield cited, name
        if path != D_STEP_NAMES:
            for cited in DESIGN_ID.findall(text):
                yield cited, name


def slug(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (lower case, punctuation dropped, spaces as -)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCED.sub("", path.read_text())
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


MARKDOWN = [README, *sorted((ROOT / "docs").glob("*.md"))]


class TestRequirementIds:
    def test_every_cited_id_is_defined(self) -> None:
        """A reader can resolve every R-/D- id the code, tests, packs or documents cite."""
        defined = set(defined_ids())
        missing = sorted({f"{cited} ({where})" for cited, where in cited_ids() if cited not in defined})
        assert not missing, f"cited but not defined in docs/requirements.md: {missing}"

    def test_each_id_is_defined_once_and_all_are_there(self) -> None:
        """Requirements R-1 to R-18 and design decisions D1 to D7 each have exactly one definition."""
        ids = defined_ids()
        expected = [f"D{n}" for n in range(1, 8)] + [f"R-{n}" for n in range(1, 19)]
        assert sorted(ids) == sorted(expected)

    def test_named_modules_and_tests_exist(self) -> None:
        """Every path the requirements page names as enforcing or testing an id is in the repository."""
        named = set(CODE_PATH.findall(REQUIREMENTS.read_text()))
        assert named, "the requirements page names no paths"
        gone = sorted(p for p in named if not (ROOT / p.split("::")[0]).exists())
        assert not gone, f"docs/requirements.md names paths that do not exist: {gone}"


class TestReadme:
    def test_readme_is_short(self) -> None:
        """The README stays a newcomer's page; details belong in docs/."""
        lines = len(README.read_text().splitlines())
        assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"

    def test_readme_lists_every_built_in_reason_code(self) -> None:
        """A newcomer finds every reason code memgov can answer with in the README."""
        listed = set(re.findall(r"`([a-z_]+)`", README.read_text()))
        assert not BUILT_IN - listed, f"reason codes missing from README.md: {sorted(BUILT_IN - listed)}"


class TestLinks:
    @pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
    def test_relative_links_resolve(self, page: Path) -> None:
        """Every relative link (and its #anchor) in the README and docs/*.md points at something that exists."""
        broken: list[str] = []
        for target in LINK.findall(FENCED.sub("", page.read_text())):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: — not ours to check offline
            file_part, _, fragment = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists() or (fragment and dest.suffix == ".md" and fragment not in anchors(dest)):
                broken.append(target)
        assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"

    def test_docs_index_lists_every_document(self) -> None:
        """docs/README.md links every page in docs/, so no document is buried."""
        index = ROOT / "docs" / "README.md"
        linked = {(index.parent / t.partition("#")[0]).resolve() for t in LINK.findall(index.read_text())}
        unlisted = sorted(p.name for p in index.parent.glob("*.md") if p != index and p.resolve() not in linked)
        assert not unlisted, f"docs/README.md does not list: {unlisted}"
