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


ARCHITECTURE = ROOT / "docs" / "architecture.md"
LAYER_LINE = re.compile(r"^ (?P<title>[a-z][a-z ]+?)\s{2,}(?P<modules>[a-z_/│→ ]+?)(?:\s{2,}.*)?$")


def _doc_layers() -> list[set[str]]:
    """The module names of each line of the layer drawing in docs/architecture.md, top first."""
    drawing = next(b for b in FENCED.findall(ARCHITECTURE.read_text()) if "entry points" in b)
    layers = []
    for line in drawing.splitlines()[1:-1]:
        found = LAYER_LINE.match(line)
        assert found is not None, f"unreadable layer line: {line!r}"
        layers.append({m.strip("/ ") for m in re.split(r"[│→]", found["modules"]) if m.strip("/ ")})
    return layers


def _contract_layers() -> list[set[str]]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "layers"]
    return [{m.strip() for m in layer.split("|")} for layer in contract["layers"]]


class TestArchitecture:
    def test_the_layer_drawing_is_the_contract(self) -> None:
        """docs/architecture.md draws exactly the layers import-linter enforces, in order."""
        drawn = [m for layer in _doc_layers() for m in layer]
        enforced = [m for layer in _contract_layers() for m in layer]
        assert sorted(drawn) == sorted(enforced)
        order = {m: i for i, layer in enumerate(_contract_layers()) for m in layer}
        ranks = [min(order[m] for m in layer) for layer in _doc_layers()]
        assert ranks == sorted(ranks), "the drawing lists the layers in another order than the contract"

    def test_the_module_map_lists_every_module_and_nothing_else(self) -> None:
        """Every module or package directly under sidecar/ has a row in the module map, and every row exists."""
        table = re.findall(r"^\| (`[^|]+`) \|", ARCHITECTURE.read_text(), re.MULTILINE)
        named = {n.strip("`/") for cell in table for n in re.findall(r"`([^`]+)`", cell)}
        children = list((ROOT / "sidecar").iterdir())
        present = {p.stem for p in children if p.suffix == ".py"} | {p.name for p in children if p.is_dir()}
        present -= {"__init__", "__main__", "__pycache__"}
        named = {n.removesuffix(".py") for n in named}
        assert named == present

    def test_every_module_path_the_page_names_exists(self) -> None:
        """A `package/module.py` named on the page is a file under sidecar/."""
        paths = set(re.findall(r"`((?:[a-z_]+/)+[a-z_<>]+\.py)`", ARCHITECTURE.read_text()))
        gone = sorted(
            p for p in paths if "<" not in p and not (ROOT / "sidecar" / p).is_file() and not (ROOT / p).is_file()
        )
        assert not gone, f"docs/architecture.md names files that do not exist: {gone}"

    def test_the_pipeline_stages_are_the_code_s(self) -> None:
        """The stages the page names are the fields of a RouteSpec and the runner's answer."""
        from dataclasses import fields

        from sidecar.enforce import pipeline

        line = next(ln for ln in ARCHITECTURE.read_text().splitlines() if ln.startswith("classify →"))
        stages = [s.strip() for s in line.split("→")]
        assert stages == ["classify", "parse", "admit", "decide + record", "forward", "answer"]
        assert {"parse", "admit", "forward"} <= {f.name for f in fields(pipeline.RouteSpec)}
        assert callable(pipeline.answer)


SOURCE_FILE = re.compile(r"(?<![\w/.-])((?:[a-z_]+/)*[a-z_]+\.py)\b")


class TestSourceReferences:
    def test_files_named_in_the_code_exist(self) -> None:
        """A ``something.py`` a module of sidecar/ names (in a comment or docstring) is a file of the repository."""
        files = {
            p.relative_to(ROOT).as_posix()
            for d in ("sidecar", "tests", "scripts", "benchmarks")
            for p in (ROOT / d).rglob("*.py")
        }
        gone = set()
        for path in sorted((ROOT / "sidecar").rglob("*.py")):
            for name in SOURCE_FILE.findall(path.read_text()):
                if not any(f == name or f.endswith("/" + name) for f in files):
                    gone.add(f"{path.relative_to(ROOT)}: {name}")
        assert not gone, sorted(gone)


class TestDocsIndex:
    def test_no_page_is_listed_twice_for_one_reader(self) -> None:
        """Each reader's section of docs/README.md links a page once."""
        sections = re.split(r"^## ", (ROOT / "docs" / "README.md").read_text(), flags=re.MULTILINE)
        doubled = []
        for section in sections:
            links = [t.partition("#")[0] for t in LINK.findall(section)]
            doubled += sorted({t for t in links if links.count(t) > 1})
        assert not doubled, f"listed twice in one section of docs/README.md: {doubled}"


_ERASURE_CLI = (
    "tests/drill/test_scope_cli.py::TestErasureCommands::test_the_runbooks_erasure_commands_list_read_and_retry"
)
_ERASURE_API = "tests/control/test_erasures.py::TestRunbookRequests::test_the_runbooks_requests_answer_as_it_says"
_DOWN = "tests/chart/test_runbook.py::TestMemgovDown::test_the_commands_list_and_describe_memgovs_pod"
_POLICY = "tests/policy/test_cli.py::"
_CONTROL = "--control-url $CONTROL --token-file operator.jwt"
#: Every command docs/runbook.md gives, and the test that runs it: the memgov and kubectl lines and the
#: control API requests as written there (read from the runbook by the test), the others as their
#: section names them.
RUNBOOK_COMMANDS: dict[str, str] = {
    f"memgov erasures {_CONTROL} list --state failed --open": _ERASURE_CLI,
    f"memgov scope {_CONTROL} erasure <erasure id>": _ERASURE_CLI,
    f"memgov erasures {_CONTROL} retry <erasure id>": _ERASURE_CLI,
    "GET /v1/erasures?state=failed&superseded=false": _ERASURE_API,
    "GET /v1/erasures/<id>": _ERASURE_API,
    "POST /v1/erasures/<id>/retry": _ERASURE_API,
    "GET /readyz": (
        "tests/adversarial/test_rotation.py::TestRotation::test_without_a_configured_model_traffic_never_supplies_one"
    ),
    "kubectl -n <namespace> get pods": _DOWN,
    "kubectl -n <namespace> describe pod <pod>": _DOWN,
    "memgov policy check": _POLICY + "TestPolicyCheck::test_reference_pack_is_clean",
    "memgov policy bundle": "tests/chart/test_opa_run.py::test_opa_mode_runs_as_rendered",
    "memgov policy test": _POLICY
    + "TestPolicyTest::test_both_engines_pass_with_coverage_per_rule_and_a_differential_run",
}
_COMMAND = re.compile(r"`((?:memgov|kubectl|helm|curl) [^`]+|(?:GET|POST|PUT|PATCH|DELETE) /[^`]*)`")


def _defined(node_id: str) -> bool:
    """Whether a test node id (path::Class::test or path::test) names a function defined in that file."""
    path, *names = node_id.split("::")
    text = (ROOT / path).read_text()
    if len(names) == 2 and not re.search(rf"^class {names[0]}\b", text, re.MULTILINE):
        return False
    return re.search(rf"^\s*(async )?def {names[-1]}\(", text, re.MULTILINE) is not None


class TestRunbook:
    def test_every_command_in_the_runbook_runs_in_a_named_test(self) -> None:
        """A command added to docs/runbook.md needs a test that runs it; one removed drops out of the table."""
        found = set(_COMMAND.findall((ROOT / "docs" / "runbook.md").read_text()))
        assert found == set(RUNBOOK_COMMANDS)
        assert [node for node in RUNBOOK_COMMANDS.values() if not _defined(node)] == []
