"""A rendered pod on local disk: each volume a folder filled the way the kubelet fills it, and the
container paths of a container mapped onto those folders.

Used to run the chart's own commands and arguments (init container, OPA, memgov) as the pod would,
with two substitutions a shared machine needs: the mount root and loopback port numbers.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from tests.chart.helm import Manifest, find

_PORT = re.compile(r"^(?P<head>.*:)(?P<port>\d+)$")


def _kubelet_files(folder: Path, files: Mapping[str, bytes], *, version: int = 1) -> None:
    """Write files the way the kubelet writes a Secret, ConfigMap or projected volume: a new timestamped
    folder, then ``..data`` pointed at it in one rename, then a link for each new top-level name and none
    left for a name that is gone (what a reader sees is always one whole version)."""
    stamp = folder / f"..2025_01_01_00_00_00.{version:09d}"
    for rel, data in files.items():
        (stamp / rel).parent.mkdir(parents=True, exist_ok=True)
        (stamp / rel).write_bytes(data)
    old = os.readlink(folder / "..data") if (folder / "..data").is_symlink() else None
    (folder / "..data_tmp").symlink_to(stamp.name)
    os.replace(folder / "..data_tmp", folder / "..data")
    tops = {rel.split("/", 1)[0] for rel in files}
    for top in tops:
        if not (folder / top).is_symlink():
            (folder / top).symlink_to(f"..data/{top}")
    for entry in folder.iterdir():
        if not entry.name.startswith("..") and entry.name not in tops:
            entry.unlink()
    if old is not None:
        shutil.rmtree(folder / old)


class PodDisk:
    """The volumes of one pod spec as local folders."""

    def __init__(
        self,
        root: Path,
        manifests: list[Manifest],
        spec: dict[str, Any],
        existing: Mapping[str, Mapping[str, bytes]] | None = None,
    ) -> None:
        """``existing``: the data of the Secrets mounted whole (the operator's, not rendered), by name."""
        self.root = root
        self.spec = spec
        self._versions: dict[str, int] = {}
        for volume in spec["volumes"]:
            folder = root / volume["name"]
            folder.mkdir(parents=True)
            if "projected" in volume:
                _kubelet_files(folder, self._projected(manifests, volume["projected"]["sources"]))
            elif "secret" in volume:
                self.edit_secret(volume["name"], (existing or {})[volume["secret"]["secretName"]])

    def edit_secret(self, volume: str, data: Mapping[str, bytes]) -> None:
        """The Secret behind a whole-Secret volume now holds ``data``: the kubelet's update of the volume."""
        self._versions[volume] = version = self._versions.get(volume, 0) + 1
        _kubelet_files(self.root / volume, data, version=version)

    @staticmethod
    def _projected(manifests: list[Manifest], sources: list[dict[str, Any]]) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for source in sources:
            if "configMap" in source:
                data = find(manifests, "ConfigMap", source["configMap"]["name"])["data"]
                files.update({item["path"]: data[item["key"]].encode() for item in source["configMap"]["items"]})
            else:  # a Secret: a fresh random key stands in for the operator's
                files.update({item["path"]: secrets.token_hex(32).encode() for item in source["secret"]["items"]})
        return files

    def container(self, name: str) -> dict[str, Any]:
        """One container or init container of the pod by name."""
        return next(c for c in [*self.spec.get("initContainers", []), *self.spec["containers"]] if c["name"] == name)

    def host(self, container: str, path: str) -> Path:
        """Where a container path lives on local disk (the longest mount that holds it)."""
        target = PurePosixPath(path)
        mounts = [
            m
            for m in self.container(container)["volumeMounts"]
            if target == PurePosixPath(m["mountPath"]) or PurePosixPath(m["mountPath"]) in target.parents
        ]
        assert mounts, f"{path} is not on a volume of {container}"
        mount = max(mounts, key=lambda m: len(m["mountPath"]))
        return self.root / mount["name"] / target.relative_to(mount["mountPath"])

    def rewrite(self, container: str, value: str, ports: Mapping[int, int]) -> str:
        """A command-line or config value with its container paths and loopback ports mapped to this host."""
        if value.startswith("/"):
            return str(self.host(container, value))
        for prefix in ("sqlite:///", "--bundle="):
            if value.startswith(prefix + "/"):
                return prefix + str(self.host(container, value[len(prefix) :]))
        match = _PORT.match(value)
        if match and int(match["port"]) in ports:
            return match["head"].replace("0.0.0.0", "127.0.0.1") + str(ports[int(match["port"])])
        return value

    def rewrite_tree(self, container: str, value: Any, ports: Mapping[int, int]) -> Any:
        """rewrite() over every string of a parsed config file."""
        if isinstance(value, dict):
            return {k: self.rewrite_tree(container, v, ports) for k, v in value.items()}
        if isinstance(value, list):
            return [self.rewrite_tree(container, v, ports) for v in value]
        return self.rewrite(container, value, ports) if isinstance(value, str) else value
