"""The policy pack the chart ships and mounts is exactly the repository's policies/."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.policy.pack import read_pack
from tests.chart import cases
from tests.chart.helm import CHART, REPO, RELEASE, find, pod_spec, render

POLICIES = REPO / "policies"
CHART_COPY = CHART / "files" / "policies"
SYNC = REPO / "scripts" / "sync-chart-policies.sh"
OPA = REPO / ".tools" / "bin" / "opa"
HINT = "the chart's policy pack differs from policies/: run scripts/sync-chart-policies.sh"


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def _mounted_pack(values: dict[str, Any]) -> dict[str, str]:
    """Return path -> content of the pack as the pod sees it under /etc/memgov/policies."""
    manifests = render(values)
    data = find(manifests, "ConfigMap", f"{RELEASE}-policies")["data"]
    config = next(v for v in pod_spec(manifests)["volumes"] if v["name"] == "memgov-config")
    sources = [s["configMap"] for s in config["projected"]["sources"]]
    source = next(s for s in sources if s["name"] == f"{RELEASE}-policies")
    return {item["path"].removeprefix("policies/"): data[item["key"]] for item in source["items"]}


def _kubelet_volume(root: Path, files: dict[str, str]) -> Path:
    """Lay files out the way the kubelet writes a projected volume: a timestamped folder behind ..data."""
    stamp = root / "..2025_01_01_00_00_00.000000001"
    for rel, text in files.items():
        (stamp / rel).parent.mkdir(parents=True, exist_ok=True)
        (stamp / rel).write_text(text)
    (root / "..data").symlink_to(stamp.name)
    for top in {rel.split("/", 1)[0] for rel in files}:
        (root / top).symlink_to(f"..data/{top}")
    return root


class TestPackedCopy:
    def test_chart_copy_matches_policies_byte_for_byte(self) -> None:
        """charts/memgov/files/policies holds the same files with the same bytes as policies/."""
        assert _tree(CHART_COPY) == _tree(POLICIES), HINT

    def test_mounted_pack_is_policies(self) -> None:
        """The pod sees every policies/ file at its own relative path with its exact content."""
        mounted = {path: text.encode() for path, text in _mounted_pack(cases.GATEWAY_DEFAULT).items()}
        assert mounted == _tree(POLICIES), HINT

    def test_rendered_limits_equal_limits_yaml(self) -> None:
        """The limits memgov and OPA load from the ConfigMap are the ones in policies/data/limits.yaml."""
        rendered = yaml.safe_load(_mounted_pack(cases.GATEWAY_DEFAULT)["data/limits.yaml"])
        assert rendered == yaml.safe_load((POLICIES / "data" / "limits.yaml").read_text())


class TestPackInThePod:
    @pytest.fixture
    def etc_memgov(self, tmp_path: Path) -> Path:
        """/etc/memgov as the memgov and OPA containers see it."""
        pack = {f"policies/{rel}": text for rel, text in _mounted_pack(cases.GATEWAY_PRODUCTION).items()}
        return _kubelet_volume(tmp_path, {"config.yaml": "{}\n", **pack})

    def test_memgov_reads_the_same_revision_as_the_repository(self, etc_memgov: Path) -> None:
        """memgov reading the mounted pack reports the same revision and limits as for policies/."""
        mounted, source = read_pack(etc_memgov / "policies"), read_pack(POLICIES)
        assert (mounted.revision, mounted.limits) == (source.revision, source.limits)

    def test_opa_container_loads_the_decision_package(self, etc_memgov: Path) -> None:
        """The OPA container's load arguments load the pack's decision policy and leave its tests out."""
        assert OPA.exists(), f"{OPA} is missing: run `make tools` to build the pinned opa"
        opa = pod_spec(render(cases.GATEWAY_PRODUCTION))["containers"][1]
        ignores = [a for a in opa["args"] if a.startswith("--ignore=")]
        path = opa["args"][-1].replace("/etc/memgov", str(etc_memgov), 1)
        proc = subprocess.run(
            [str(OPA), "eval", *ignores, "--data", path, "--format", "json", "data.memgov"],
            capture_output=True, text=True, timeout=60, check=True,
        )
        loaded = json.loads(proc.stdout)["result"][0]["expressions"][0]["value"]
        assert "decision" in loaded
        assert not [pkg for pkg in loaded if pkg.endswith("_test")]


class TestUserPack:
    PACK = {
        "data/limits.yaml": "max_days: 3\n",
        "cedar/site.cedar": "permit(principal, action, resource);\n",
        "rego/site/policy.rego": "package site\n",
    }

    def test_user_pack_replaces_the_packaged_one(self) -> None:
        """policy.pack.files is mounted instead of the packaged pack, file for file."""
        assert _mounted_pack({"policy": {"pack": {"files": self.PACK}}}) == self.PACK

    def test_changing_the_pack_rolls_the_pods(self) -> None:
        """A different pack changes the pod template, so gateway pods restart onto it."""
        def checksum(values: dict[str, Any]) -> str:
            deployment = find(render(values), "Deployment")
            return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/policies"])

        assert checksum({"policy": {"pack": {"files": self.PACK}}}) != checksum(cases.GATEWAY_DEFAULT)


class TestSyncScript:
    def test_sync_copies_the_pack_and_drops_stale_files(self, tmp_path: Path) -> None:
        """The sync script mirrors policies/ into the chart, nested folders included, hidden and stale files out."""
        (tmp_path / "scripts").mkdir()
        shutil.copy2(SYNC, tmp_path / "scripts" / SYNC.name)
        pack = {"cedar/a.cedar": b"permit(principal, action, resource);\n", "rego/memgov/x.rego": b"package memgov.x\n",
                "data/limits.yaml": b"max_days: 7"}
        for rel, content in pack.items():
            (tmp_path / "policies" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "policies" / rel).write_bytes(content)
        (tmp_path / "policies" / ".scratch.swp").write_bytes(b"x")
        stale = tmp_path / "charts" / "memgov" / "files" / "policies" / "cedar" / "removed.cedar"
        stale.parent.mkdir(parents=True)
        stale.write_bytes(b"old")
        subprocess.run([str(tmp_path / "scripts" / SYNC.name)], check=True, capture_output=True, timeout=30)
        assert _tree(tmp_path / "charts" / "memgov" / "files" / "policies") == pack
