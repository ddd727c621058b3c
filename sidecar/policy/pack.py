"""Reading a policy pack folder (cedar/, rego/, data/) into one immutable, hashed snapshot.

The revision is a content hash over every file of the pack except Rego unit tests
(``*_test.rego``), so the same rules always report the same revision in /readyz, metrics and
decision logs, whichever engine runs them, and editing a test never reloads the gateway.

Data files: ``limits.yaml`` and ``federation.yaml`` (required), ``reasons.yaml`` (reason codes
the pack declares for its own rules) and ``org.yaml`` (named lists both engines read).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sidecar.identity import IdentityError
from sidecar.identity.appname import parse_agent_ref
from sidecar.policy.model import DeclaredReason, Federation, Limits, PartnerRecord
from sidecar.settings import PACKAGED_POLICY_DIR

_PACK_DIRS = ("cedar", "rego", "data")
_PACK_SUFFIXES = (".cedar", ".cedarschema", ".rego", ".yaml")
_TEST_SUFFIX = "_test.rego"
_ORG_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
#: Bounds of data/org.yaml, so a pasted export cannot bloat every decision input.
ORG_MAX_LISTS, ORG_MAX_ITEMS, ORG_MAX_CHARS = 32, 1000, 255


class PackError(Exception):
    """The pack cannot be used; the message names a file and a problem, never request data.

    ``file`` is the pack-relative file at fault (when one is) and ``step`` the stage that refused
    it (``read``, ``data``, ``cedar``, ``rego``, ``rules``, ``engine``), for logs and /readyz.
    """

    def __init__(self, message: str, *, file: str | None = None, step: str = "read") -> None:
        super().__init__(message)
        self.file = file
        self.step = step


@dataclass(frozen=True)
class Pack:
    """One consistent read of a pack folder."""

    root: Path
    revision: str
    files: dict[str, str]
    limits: Limits
    federation: Federation
    reasons: tuple[DeclaredReason, ...]
    org: dict[str, list[str]]

    def select(self, folder: str, suffix: str, *, tests: bool = False) -> dict[str, str]:
        """Return ``{relative path: text}`` of one kind of file, test files only when asked."""
        out: dict[str, str] = {}
        for rel, text in self.files.items():
            if not rel.startswith(folder + "/") or not rel.endswith(suffix):
                continue
            if rel.endswith("_test" + suffix) != tests:
                continue
            out[rel] = text
        return out


def _pack_paths(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder in _PACK_DIRS:
        base = root / folder
        if base.is_dir():
            found.extend(p for p in base.rglob("*") if p.is_file() and p.suffix in _PACK_SUFFIXES)
    return sorted(found)


def _read(root: Path) -> dict[str, bytes]:
    try:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in _pack_paths(root)}
    except OSError as exc:
        raise PackError(f"cannot read the pack ({exc.strerror})") from None


def _revision(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(files):
        if rel.endswith(_TEST_SUFFIX):
            continue
        digest.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return digest.hexdigest()[:16]


def fingerprint(root: Path) -> str:
    """Return the revision the pack on disk would have, without validating it."""
    return _revision(_read(Path(root)))


def _yaml(name: str, raw: bytes) -> Any:
    try:
        return yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PackError(f"data/{name}{line}: not valid YAML", file=f"data/{name}", step="data") from None


def _invalid(name: str, exc: ValidationError) -> PackError:
    errors = exc.errors()
    # A model's own check (e.g. a looser agent limit) has a message written for the operator; say it.
    own = [str(e["ctx"]["error"]) for e in errors if e["type"] == "value_error" and "ctx" in e]
    if own:
        return PackError(f"data/{name}: {'; '.join(own)}", file=f"data/{name}", step="data")
    where = ", ".join(".".join(str(p) for p in e["loc"]) or "top level" for e in errors)
    return PackError(f"data/{name}: invalid ({where})", file=f"data/{name}", step="data")


def _parse(model: type[Limits] | type[Federation], name: str, raw: bytes | None) -> Any:
    if raw is None:
        raise PackError(f"data/{name}: missing", file=f"data/{name}", step="data")
    try:
        return model.model_validate(_yaml(name, raw))
    except ValidationError as exc:
        raise _invalid(name, exc) from None


def _limits(raw: bytes | None) -> Limits:
    limits: Limits = _parse(Limits, "limits.yaml", raw)
    if limits.rate_burst > limits.rate_per_minute:
        raise PackError("data/limits.yaml: rate_burst exceeds rate_per_minute", file="data/limits.yaml", step="data")
    return limits


def _reasons(raw: bytes | None) -> tuple[DeclaredReason, ...]:
    """data/reasons.yaml: ``declare: [{code, after, description}]`` (optional file)."""
    if raw is None:
        return ()
    doc = _yaml("reasons.yaml", raw) or {}
    if not isinstance(doc, dict) or set(doc) - {"declare"} or not isinstance(doc.get("declare", []), list):
        raise PackError(
            "data/reasons.yaml: expected a mapping with one key, declare: [...]", file="data/reasons.yaml", step="data"
        )
    try:
        declared = tuple(DeclaredReason.model_validate(item) for item in doc.get("declare") or [])
    except ValidationError as exc:
        raise _invalid("reasons.yaml", exc) from None
    codes = [d.code for d in declared]
    if len(set(codes)) != len(codes):
        raise PackError("data/reasons.yaml: a code is declared twice", file="data/reasons.yaml", step="data")
    return declared


def _org(raw: bytes | None) -> dict[str, list[str]]:
    """data/org.yaml: ``name: [identifier, ...]`` lists (optional file), bounded in size."""
    if raw is None:
        return {}
    doc = _yaml("org.yaml", raw) or {}
    bad = (
        not isinstance(doc, dict)
        or len(doc) > ORG_MAX_LISTS
        or any(
            not isinstance(k, str)
            or not _ORG_NAME.fullmatch(k)
            or not isinstance(v, list)
            or len(v) > ORG_MAX_ITEMS
            or not all(isinstance(x, str) and 0 < len(x) <= ORG_MAX_CHARS for x in v)
            for k, v in doc.items()
        )
    )
    if bad:
        raise PackError(
            f"data/org.yaml: expected at most {ORG_MAX_LISTS} lists, name: [strings] "
            f"(names lower_snake_case, at most {ORG_MAX_ITEMS} strings of 1-{ORG_MAX_CHARS} characters each)",
            file="data/org.yaml",
            step="data",
        )
    return {k: list(v) for k, v in doc.items()}


def _file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PackError(f"data/{path.name}: cannot read ({exc.strerror})", file=f"data/{path.name}") from None


def load_limits(root: Path) -> Limits:
    """Read and validate ``data/limits.yaml`` of a pack."""
    return _limits(_file(Path(root) / "data" / "limits.yaml"))


def load_federation(root: Path) -> Federation:
    """Read and validate ``data/federation.yaml`` of a pack."""
    federation: Federation = _parse(Federation, "federation.yaml", _file(Path(root) / "data" / "federation.yaml"))
    return federation


#: The pack's data files; limits and federation are required, reasons and org optional.
DATA_FILES = ("data/limits.yaml", "data/federation.yaml", "data/reasons.yaml", "data/org.yaml")


def reference_data(rel: str) -> bytes | None:
    """The shipped pack's version of a data file (None for an optional one: absent)."""
    if rel in ("data/reasons.yaml", "data/org.yaml"):
        return None
    return (PACKAGED_POLICY_DIR / rel).read_bytes()


def read_pack(root: Path, replace: dict[str, bytes | None] | None = None) -> Pack:
    """Read every pack file once and validate the data files; engines compile the rest.

    ``replace`` stands in for some files (None: absent), for checks that go on past a broken one.
    """
    root = Path(root)
    if not root.is_dir():
        raise PackError(f"{root.name}: policy folder not found")
    raw = _read(root)
    for rel, data in (replace or {}).items():
        if data is None:
            raw.pop(rel, None)
        else:
            raw[rel] = data
    files: dict[str, str] = {}
    for rel, data in raw.items():
        try:
            files[rel] = data.decode("utf-8")
        except UnicodeDecodeError:
            raise PackError(f"{rel}: not UTF-8", file=rel) from None
    limits = _limits(raw.get("data/limits.yaml"))
    federation: Federation = _parse(Federation, "federation.yaml", raw.get("data/federation.yaml"))
    reasons = _reasons(raw.get("data/reasons.yaml"))
    org = _org(raw.get("data/org.yaml"))
    _agent_lists(limits, org)
    return Pack(root, _revision(raw), files, limits, federation, reasons, org)


def _agent_lists(limits: Limits, org: dict[str, list[str]]) -> None:
    """Every agent an agent limit names is a reference namespace/name, and every list one of data/org.yaml's
    (a name without its namespace, or a misspelt list, would limit no one)."""
    for index, entry in enumerate(limits.agent_limits):
        for ref in entry.agents:
            try:
                parse_agent_ref(ref)
            except IdentityError:
                # SECURITY: a reference that is not namespace/name matches no agent: refused, never applied.
                raise PackError(
                    f"data/limits.yaml: agent_limits[{index}] names {ref!r}, which is not an agent reference"
                    " namespace/name (it would limit no agent)",
                    file="data/limits.yaml",
                    step="data",
                ) from None
        for name in entry.lists:
            if name not in org:
                raise PackError(
                    f"data/limits.yaml: agent_limits[{index}] names the list {name!r},"
                    " which data/org.yaml does not define",
                    file="data/limits.yaml",
                    step="data",
                )


#: Fields a partner record must name before it admits anything (R-13).
PARTNER_TEXT_FIELDS = (
    "controller",
    "processor",
    "purpose",
    "classification",
    "residency",
    "erasure_owner",
    "principal_binding",
)


def is_complete(record: PartnerRecord) -> bool:
    """True when a partner record names every field R-13 requires."""
    named = all(isinstance(getattr(record, f), str) and getattr(record, f) != "" for f in PARTNER_TEXT_FIELDS)
    return named and record.retention_days is not None and record.retention_days > 0
