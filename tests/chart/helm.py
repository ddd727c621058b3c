"""Run the pinned helm binary against charts/memgov and parse what it renders."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import tarfile
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "memgov"
FIXTURES = REPO / "tests" / "chart" / "fixtures"
HELM = REPO / ".tools" / "bin" / "helm"
RELEASE = "memgov"
NAMESPACE = "kagent"
# The Kubernetes version helm renders for and the manifests are validated against.
KUBE_VERSION = "1.33.0"

Manifest = dict[str, Any]


class HelmFailed(Exception):
    """helm exited non-zero; the message is its stderr."""


def _helm_binary() -> Path:
    if not HELM.exists():
        raise FileNotFoundError(f"{HELM} is missing: run `make tools` to build the pinned helm")
    return HELM


#: The chart refuses values that choose no state store. Tests about something else render the
#: evaluation choice; tests about the state store set one (or none) themselves.
EPHEMERAL_STATE: dict[str, Any] = {"ephemeral": True}


def with_state(values: dict[str, Any]) -> dict[str, Any]:
    """values, with state.ephemeral=true when they choose no state store."""
    state = values.get("state") or {}
    chosen = (state.get("postgresql") or {}).get("existingSecret") or (state.get("persistence") or {}).get("enabled")
    if chosen or "ephemeral" in state:
        return values
    return {**values, "state": {**state, **EPHEMERAL_STATE}}


def run_helm(
    command: str,
    values: dict[str, Any],
    namespace: str = NAMESPACE,
    *,
    chart: Path = CHART,
    kube_version: str = KUBE_VERSION,
    extra: tuple[str, ...] = (),
    choose_state: bool = True,
) -> str:
    """Run `helm lint` or `helm template` with values; return stdout or raise HelmFailed(stderr).

    Unless ``choose_state`` is false, values that choose no state store get ``state.ephemeral``.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="memgov-values-") as fh:
        # JSON is YAML, and it keeps keys such as "kagent/helper" or "data/limits.yaml" intact.
        json.dump(with_state(values) if choose_state else values, fh)
        fh.flush()
        args = [str(_helm_binary()), command]
        if command == "template":
            args.append(RELEASE)
        args += [str(chart), "--namespace", namespace, "--kube-version", kube_version, "--values", fh.name, *extra]
        if command == "lint":
            args.append("--strict")
        proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise HelmFailed(proc.stderr + proc.stdout)
    return proc.stdout


@cache
def _render(values_json: str, namespace: str) -> tuple[Manifest, ...]:
    out = run_helm("template", json.loads(values_json), namespace)
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def render(values: dict[str, Any], namespace: str = NAMESPACE) -> list[Manifest]:
    """Render the chart (cached per values) and return a private copy of its manifests."""
    return copy.deepcopy(list(_render(json.dumps(values, sort_keys=True), namespace)))


def render_error(values: dict[str, Any], namespace: str = NAMESPACE, *, choose_state: bool = True) -> str:
    """Render values that must be refused and return helm's message."""
    try:
        run_helm("template", values, namespace, choose_state=choose_state)
    except HelmFailed as exc:
        return str(exc)
    raise AssertionError("helm rendered values that should have been refused")


def notes(values: dict[str, Any], namespace: str = NAMESPACE, *, upgrade: bool = False) -> str:
    """The install notes `helm install` (or, with ``upgrade``, `helm upgrade`) would print for these values.

    `helm template` never renders NOTES.txt, so a scratch copy of the chart renders its text
    through `tpl` in a throwaway ConfigMap; the chart itself is not changed.
    """
    with tempfile.TemporaryDirectory(prefix="memgov-notes-") as scratch:
        copy_ = Path(scratch) / "memgov"
        shutil.copytree(CHART, copy_)
        (copy_ / "notes-source.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
        (copy_ / "templates" / "zz-notes.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
            'data: {notes: {{ tpl (.Files.Get "notes-source.txt") . | quote }}}\n'
        )
        extra = ("--show-only", "templates/zz-notes.yaml", *(("--is-upgrade",) if upgrade else ()))
        out = run_helm("template", values, namespace, chart=copy_, extra=extra)
    return str(yaml.safe_load(out)["data"]["notes"])


def find(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    """Return the one manifest of a kind (and name)."""
    hits = [m for m in manifests if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def kinds(manifests: list[Manifest]) -> list[str]:
    """Return the rendered kinds, sorted."""
    return sorted(m["kind"] for m in manifests)


def config_file(manifests: list[Manifest]) -> dict[str, Any]:
    """Return memgov's rendered config.yaml, parsed."""
    return yaml.safe_load(find(manifests, "ConfigMap", f"{RELEASE}-config")["data"]["config.yaml"])


def kagent_files(manifests: list[Manifest]) -> dict[str, Any]:
    """Return the parsed files of the ConfigMap that tells how to change kagent."""
    data = find(manifests, "ConfigMap", f"{RELEASE}-kagent")["data"]
    return {key: yaml.safe_load(text) for key, text in data.items()}


def pod_spec(manifests: list[Manifest]) -> dict[str, Any]:
    """Return the pod spec memgov runs in: the Deployment's, or the sidecar patch's."""
    deployments = [m for m in manifests if m["kind"] == "Deployment"]
    if deployments:
        return deployments[0]["spec"]["template"]["spec"]
    return kagent_files(manifests)["controller-patch.yaml"]["spec"]["template"]["spec"]


def umbrella(folder: Path, memgov_values: dict[str, Any]) -> Path:
    """An umbrella chart that carries memgov as its subchart (in charts/), with global values set."""
    root = folder / "platform"
    (root / "charts").mkdir(parents=True)
    shutil.copytree(CHART, root / "charts" / "memgov")
    (root / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [
                    {"name": "memgov", "version": yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]}
                ],
            }
        )
    )
    (root / "values.yaml").write_text(
        yaml.safe_dump(
            {
                "global": {"imageRegistry": "registry.example.com", "labels": {"team": "platform"}},
                "memgov": memgov_values,
            }
        )
    )
    return root


def previous_chart() -> Path:
    """The chart of the last landed release, as an archive helm installs (tests/chart/fixtures/README.md)."""
    (archive,) = FIXTURES.glob("memgov-*.tgz")
    return archive


def previous_chart_file(name: str) -> str:
    """One file of the previous release's chart, by its path in the chart (``Chart.yaml``, ``values.yaml``)."""
    with tarfile.open(previous_chart()) as tar:
        member = tar.extractfile(f"memgov/{name}")
        assert member is not None, name
        return member.read().decode()
