"""Reading a policy pack folder (cedar/, rego/, data/) into one immutable, hashed snapshot.

The revision is a content hash over every file of the pack, so the same bytes always report the
same revision in /readyz, metrics and decision logs, whichever engine runs them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sidecar.policy.model import Federation, Limits, PartnerRecord

_PACK_DIRS = ("cedar", "rego", "data")
_PACK_SUFFIXES = (".cedar", ".cedarschema", ".rego", ".yaml")


class PackError(Exception):
    """The pack cannot be used; the message names a file and a problem, never request data."""


@dataclass(frozen=True)
class Pack:
    """One consistent read of a pack folder."""

    root: Path
    revision: str
    files: dict[str, str]
    limits: Limits
    federation: Federation

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
        digest.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return digest.hexdigest()[:16]


def fingerprint(root: Path) -> str:
    """Return the revision the pack on disk would have, without validating it."""
    return _revision(_read(Path(root)))


def _parse(model: type[Limits] | type[Federation], name: str, raw: bytes | None) -> Any:
    if raw is None:
        raise PackError(f"{name}: missing")
    try:
        return model.model_validate(yaml.safe_load(raw.decode("utf-8")))
    except (UnicodeDecodeError, yaml.YAMLError):
        raise PackError(f"{name}: not valid YAML") from None
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) or "top level" for e in exc.errors())
        raise PackError(f"{name}: invalid ({where})") from None


def _limits(raw: bytes | None) -> Limits:
    limits: Limits = _parse(Limits, "limits.yaml", raw)
    if limits.rate_burst > limits.rate_per_minute:
        raise PackError("limits.yaml: rate_burst exceeds rate_per_minute")
    return limits


def _file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PackError(f"{path.name}: cannot read ({exc.strerror})") from None


def load_limits(root: Path) -> Limits:
    """Read and validate ``data/limits.yaml`` of a pack."""
    return _limits(_file(Path(root) / "data" / "limits.yaml"))


def load_federation(root: Path) -> Federation:
    """Read and validate ``data/federation.yaml`` of a pack."""
    federation: Federation = _parse(Federation, "federation.yaml", _file(Path(root) / "data" / "federation.yaml"))
    return federation


def read_pack(root: Path) -> Pack:
    """Read every pack file once and validate the data files; engines compile the rest."""
    root = Path(root)
    if not root.is_dir():
        raise PackError(f"{root.name}: policy folder not found")
    raw = _read(root)
    try:
        files = {rel: data.decode("utf-8") for rel, data in raw.items()}
    except UnicodeDecodeError:
        raise PackError("a pack file is not UTF-8") from None
    limits = _limits(raw.get("data/limits.yaml"))
    federation: Federation = _parse(Federation, "federation.yaml", raw.get("data/federation.yaml"))
    return Pack(root, _revision(raw), files, limits, federation)


#: Fields a partner record must name before it admits anything (R-13).
PARTNER_TEXT_FIELDS = (
    "controller", "processor", "purpose", "classification", "residency", "erasure_owner", "principal_binding",
)


def is_complete(record: PartnerRecord) -> bool:
    """True when a partner record names every field R-13 requires."""
    named = all(isinstance(getattr(record, f), str) and getattr(record, f) != "" for f in PARTNER_TEXT_FIELDS)
    return named and record.retention_days is not None and record.retention_days > 0
