"""kagent v0.9.11's own Helm chart, rendered offline from ../shared/vendor with the pinned helm.

The vendored archive holds kagent's ``helm/`` folder: every chart has a ``Chart-template.yaml``
(``VERSION`` substituted, as kagent's Makefile does), and the dependencies served from OCI
registries or chart repositories cannot be fetched offline, so they are dropped and turned off;
the ``file://`` ones (agents, tools) are kept and built.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.once import once

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / ".tools" / "bin" / "helm"
VENDOR = Path(os.environ.get("MEMGOV_VENDOR_DIR", REPO.parent / "shared" / "vendor"))
ARCHIVE = "kagent-v0.9.11-helm.tar.gz"
SHA256 = "f669c24e8d382ed56eefab874ff879da463e0060f3fe719fbdd7b386df6ead43"
VERSION = "0.9.11"
UNFETCHABLE = ("kmcp", "substrate", "kagent-tools", "oauth2-proxy")


def _build(folder: Path) -> None:
    archive = VENDOR / ARCHIVE
    if hashlib.sha256(archive.read_bytes()).hexdigest() != SHA256:
        raise RuntimeError(f"{archive} does not match its pinned sha256")
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    for template in (folder / "helm").rglob("Chart-template.yaml"):
        text = template.read_text().replace("${VERSION}", VERSION)
        chart = yaml.safe_load(text)
        chart["dependencies"] = [
            d for d in chart.get("dependencies") or [] if str(d.get("repository", "")).startswith("file://")
        ] or None
        if chart["dependencies"] is None:
            del chart["dependencies"]
        (template.parent / "Chart.yaml").write_text(yaml.safe_dump(chart))
    subprocess.run([str(HELM), "dependency", "build", str(folder / "helm" / "kagent")], check=True, capture_output=True)
    args = [str(HELM), "template", "kagent", str(folder / "helm" / "kagent"), "--namespace", "kagent"]
    for dep in UNFETCHABLE:
        args += ["--set", f"{dep}.enabled=false"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    (folder / "render.yaml").write_text(out)


def render_kagent(factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every object kagent's chart installs by default (rendered once per test run)."""
    folder = once(factory, "kagent-chart", _build)
    return [doc for doc in yaml.safe_load_all((folder / "render.yaml").read_text()) if doc]


def kagent_pods(manifests: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``namespace/name`` -> pod labels of every pod kagent's install runs: its Deployments and its agents.

    kagent's controller runs each Agent as a Deployment whose pods carry ``app=kagent`` and
    ``kagent=<agent name>`` (its translator's selector labels).
    """
    pods: dict[str, dict[str, str]] = {}
    for m in manifests:
        ns = m["metadata"].get("namespace", "kagent")
        if m["kind"] == "Deployment":
            pods[f"{ns}/{m['metadata']['name']}"] = dict(m["spec"]["template"]["metadata"]["labels"])
        elif m["kind"] == "Agent":
            pods[f"{ns}/{m['metadata']['name']}"] = {"app": "kagent", "kagent": m["metadata"]["name"]}
    return pods
