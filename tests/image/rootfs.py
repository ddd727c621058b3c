"""An OCI image archive unpacked to a root filesystem, and memgov started from it the way a container
runtime would: the image's user, environment and working directory, a read-only root, a fresh /tmp,
and the chart's mounts. Needs root (mount namespace, chroot).
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DEVICES = ("null", "zero", "random", "urandom")
# Runs on the host, inside a private mount namespace with the mounts in place: enter the image's root
# and become its user, then exec the image's program. Arguments: a JSON list [root, workdir, uid,
# gid, env, argv].
_LAUNCH = """
import json, os, sys
root, workdir, uid, gid, env, argv = json.loads(sys.argv[1])
os.chroot(root)
os.chdir(workdir)
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
os.execvpe(argv[0], argv, env)
"""


@dataclass(frozen=True)
class Image:
    """An unpacked image: its root filesystem and its config."""

    root: Path
    config: dict[str, Any]
    layer_bytes: int

    @property
    def user(self) -> tuple[int, int]:
        uid, _, gid = self.config["User"].partition(":")
        return int(uid), int(gid or uid)

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config.get("Env", []))


def _blob(layout: Path, digest: str) -> Path:
    algorithm, value = digest.split(":", 1)
    return layout / "blobs" / algorithm / value


def _apply_layer(root: Path, layer: Path) -> None:
    with tarfile.open(layer) as tar:
        members = []
        for member in tar.getmembers():
            path = Path(member.name.lstrip("/"))
            if path.name == ".wh..wh..opq":  # opaque folder: lower layers' contents are hidden
                target = root / path.parent
                for child in target.iterdir() if target.is_dir() else ():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
            elif path.name.startswith(".wh."):  # a file deleted by this layer
                gone = root / path.parent / path.name.removeprefix(".wh.")
                if gone.is_dir() and not gone.is_symlink():
                    shutil.rmtree(gone)
                elif gone.exists() or gone.is_symlink():
                    gone.unlink()
            else:
                members.append(member)
        tar.extractall(root, members=members, filter="tar")


def unpack(archive: Path, dest: Path) -> Image:
    """Unpack an OCI archive (one image) into dest/rootfs, layer by layer."""
    layout = dest / "layout"
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(_blob(layout, index["manifests"][0]["digest"]).read_text())
    config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())["config"]
    root = dest / "rootfs"
    root.mkdir()
    for layer in manifest["layers"]:
        _apply_layer(root, _blob(layout, layer["digest"]))
    return Image(root, config, sum(int(layer["size"]) for layer in manifest["layers"]))


def launch_argv(image: Image, argv: list[str], mounts: dict[str, tuple[Path, bool]], python: str) -> list[str]:
    """The host command that runs argv from the image: private mounts, read-only root, then chroot.

    mounts maps container paths to (host folder, writable); /tmp is a fresh tmpfs, as an emptyDir is.
    """
    root = image.root
    points = [*mounts, "/tmp", *(f"/dev/{d}" for d in _DEVICES)]
    for point in points:  # a runtime creates missing mount points; the image stays read-only after
        target = root / point.lstrip("/")
        if point.startswith("/dev/"):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch(exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
    steps = [
        f"mount --bind {root} {root}",
        f"mount -o remount,bind,ro {root}",
        f"mount -t tmpfs -o size=64m,mode=1777 tmpfs {root}/tmp",
    ]
    for device in _DEVICES:
        steps.append(f"mount --bind /dev/{device} {root}/dev/{device}")
    for point, (host, writable) in mounts.items():
        steps.append(f"mount --bind {host} {root}{point}")
        if not writable:
            steps.append(f"mount -o remount,bind,ro {root}{point}")
    uid, gid = image.user
    payload = json.dumps([str(root), image.config.get("WorkingDir") or "/", uid, gid, image.env, argv])
    script = " && ".join(steps) + ' && exec "$0" -c "$1" "$2"'
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--fork",
        "--",
        "sh",
        "-c",
        script,
        python,
        _LAUNCH,
        payload,
    ]


def executables(root: Path) -> set[str]:
    """Names of every executable file in the image's bin folders (followed through symlinks)."""
    found: set[str] = set()
    for folder in ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin", "opt/memgov/bin"):
        base = root / folder
        if not base.is_dir() or base.is_symlink():
            continue
        for entry in base.iterdir():
            target = entry
            if entry.is_symlink():
                link = os.readlink(entry)
                target = root / link.lstrip("/") if link.startswith("/") else entry.parent / link
            if target.is_file() and os.access(target, os.X_OK):
                found.add(entry.name)
    return found
