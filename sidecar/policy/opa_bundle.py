"""A policy pack as an OPA bundle: the pack's files plus a ``.manifest`` carrying its revision.

OPA owns the Rego in OPA mode: it loads this bundle (``opa run --bundle DIR`` or a bundle server)
and reports the manifest revision with every answer, so memgov can tell which pack OPA decided
with. The revision is memgov's content hash of the pack, so both engines name the same bytes
the same way. The manifest's root is ``memgov``: OPA refuses a bundle whose files leave it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Final

from sidecar.policy.pack import Pack, PackError

ROOT: Final = "memgov"
MANIFEST: Final = ".manifest"


def check_layout(files: dict[str, str]) -> None:
    """Refuse Rego files whose package lies outside the bundle root, or a pack with no policy file."""
    if not files:
        raise PackError("rego/: no .rego policy files")
    for rel in sorted(files):
        package = next((line.split()[1:] for line in files[rel].splitlines() if line.startswith("package ")), None)
        if not package or not (package[0] == ROOT or package[0].startswith(ROOT + ".")):
            raise PackError(f"{rel}: every policy file must be in a package under {ROOT}")


def manifest(pack: Pack) -> bytes:
    """The bundle manifest naming the pack's revision."""
    return json.dumps({"revision": pack.revision, "roots": [ROOT]}, sort_keys=True).encode() + b"\n"


def _members(pack: Pack) -> dict[str, bytes]:
    check_layout(pack.select("rego", ".rego"))
    return {**{rel: text.encode() for rel, text in pack.files.items()}, MANIFEST: manifest(pack)}


def write_folder(pack: Pack, out: Path) -> None:
    """Write the bundle as a folder (OPA's ``--bundle DIR``); memgov itself can load it as a pack.

    The folder is built beside ``out`` and renamed into place, so a reader never sees half a pack.
    An earlier bundle at ``out`` is replaced (an init container that runs again); any other
    non-empty folder is refused rather than overwritten.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise PackError(f"{out.name}: not a bundle folder; give an empty or absent folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bundle-", dir=out.parent))
    for rel, data in _members(pack).items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_bytes(data)
    for folder, _, names in os.walk(staging):
        os.chmod(folder, 0o755)
        for name in names:
            os.chmod(Path(folder) / name, 0o644)
    old = out.with_name(f".{out.name}.old")
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def write_tarball(pack: Pack, out: Path) -> None:
    """Write the bundle as a ``.tar.gz`` for a bundle server (what ``opa build`` would produce)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for rel, data in sorted(_members(pack).items()):
            info = tarfile.TarInfo("/" + rel)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    Path(out).write_bytes(buffer.getvalue())
