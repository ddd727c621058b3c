"""The install model the boundary tests share: kagent's own pods, memgov per mode and stage, hostile policies.

The connectivity matrix of docs/boundary.md is rendered here from cyclonus's verdicts; the chart
tests check that the page holds exactly what cyclonus computes (a failure prints the section to
paste after a chart change).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.boundary.cyclonus import allowed
from sidecar.boundary.model import (
    CONTROLLER_PORT_NAMES,
    KAGENT_API_PORT,
    PPROF_PORT,
    UI_PORT,
    UI_PORT_NAMES,
    Flow,
    Install,
    Peer,
    Policy,
)

REPO = Path(__file__).resolve().parents[2]
CYCLONUS = REPO / ".tools" / "bin" / "cyclonus"
DOC = REPO / "docs" / "boundary.md"
BEGIN, END = "<!-- connectivity matrix: begin -->", "<!-- connectivity matrix: end -->"

MODES = ("gateway", "sidecar")
STAGES = ("prepare", "enforce")
#: memgov's namespace when it has its own (gateway mode).
OWN_NAMESPACE = "memgov"
CONTROLLER_LABELS = {
    "app.kubernetes.io/name": "kagent",
    "app.kubernetes.io/instance": "kagent",
    "app.kubernetes.io/component": "controller",
}
UI_LABELS = {**CONTROLLER_LABELS, "app.kubernetes.io/component": "ui"}


def cyclonus() -> str:
    """The pinned cyclonus (``make tools`` builds it)."""
    if not CYCLONUS.exists():
        raise FileNotFoundError(f"{CYCLONUS} is missing: run `make tools` to build the pinned cyclonus")
    return str(CYCLONUS)


def values_for(mode: str, stage: str, **extra: Any) -> dict[str, Any]:
    """memgov's chart values for one mode and rollout stage (everything else at its default)."""
    return {"mode": mode, "rollout": {"stage": stage}, **extra}


def install_for(
    values: Mapping[str, Any], kagent_pods: Mapping[str, Mapping[str, str]], memgov_namespace: str | None = None
) -> Install:
    """The install: memgov per the values (in its own namespace if given), kagent's controller, UI and every
    other pod of kagent's chart."""
    others = [
        Peer(name, f"10.244.1.{i + 1}", name.split("/")[0], dict(labels))
        for i, (name, labels) in enumerate(sorted(kagent_pods.items()))
        if labels not in (CONTROLLER_LABELS, UI_LABELS)
    ]
    controller = Peer(
        "kagent/kagent-controller", "10.244.0.2", "kagent", CONTROLLER_LABELS, port_names=CONTROLLER_PORT_NAMES
    )
    ui = Peer("kagent/kagent-ui", "10.244.0.3", "kagent", UI_LABELS, port_names=UI_PORT_NAMES)
    return Install.from_values(
        values, memgov_namespace=memgov_namespace, controller=controller, ui=ui, neighbours=others
    )


def _np(name: str, spec: dict[str, Any]) -> Policy:
    meta = {"name": name, "namespace": "kagent"}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": spec}


#: Policies a neighbour might add to kagent's namespace, one at a time (docs/boundary.md explains each).
HOSTILE: dict[str, Policy] = {
    "allow-same-namespace": _np(
        "allow-same-namespace",
        {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}]},
    ),
    "allow-from-namespace-selector": _np(
        "allow-from-ingress-nginx",
        {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kagent"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]}
            ],
        },
    ),
    "allow-all-ingress": _np("allow-all-ingress", {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}),
    "ui-open": _np(
        "kagent-ui-public",
        {
            "podSelector": {"matchLabels": {"app.kubernetes.io/component": "ui"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": UI_PORT, "protocol": "TCP"}]}],
        },
    ),
    "egress-only": _np("egress-only", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}),
}


# --- the matrix --------------------------------------------------------------------------------

TARGETS = (("controller", KAGENT_API_PORT), ("controller", PPROF_PORT), ("ui", UI_PORT))


@dataclass(frozen=True)
class Case:
    """One mode and stage, memgov in kagent's namespace or its own: the install and its rendered NetworkPolicies."""

    mode: str
    stage: str
    install: Install
    policies: Sequence[Policy]

    @property
    def column(self) -> str:
        """The matrix column: mode (and memgov's own namespace) / stage."""
        own = self.install.memgov_namespace != self.install.namespace
        return f"{self.mode}{', own namespace' if own else ''} / {self.stage}"


def reach(case: Case) -> dict[str, set[str]]:
    """Source name -> the targets (``controller:8083`` …) cyclonus lets it reach in this case."""
    flows = []
    for role, port in TARGETS:
        target = case.install.controller if role == "controller" else case.install.ui
        flows += [Flow(s, target, port) for s in case.install.sources if s != target]
    out: dict[str, set[str]] = {s.name: set() for s in case.install.sources}
    for flow, ok in zip(flows, allowed(case.policies, flows, cyclonus()), strict=True):
        if ok:
            role = "controller" if flow.target == case.install.controller else "ui"
            out[flow.source.name].add(f"{role}:{flow.port}")
    return out


def matrix_markdown(cases: Sequence[Case]) -> str:
    """The connectivity matrix: one row per source pod, one column per mode and stage."""
    results = {c.column: reach(c) for c in cases}
    sources = sorted({name for r in results.values() for name in r}, key=_row_order)
    head = "| source pod | " + " | ".join(results) + " |"
    lines = [head, "|---" * (len(results) + 1) + "|"]
    for name in sources:
        cells = []
        for r in results.values():
            if name not in r:
                cells.append("(not in this mode)")
            else:
                cells.append(", ".join(_label(t) for t in sorted(r[name], key=_target_order)) or "—")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _label(target: str) -> str:
    return {"controller:8083": "API 8083", "controller:6060": "pprof 6060", "ui:8080": "UI 8080"}[target]


def _target_order(target: str) -> int:
    return [f"{r}:{p}" for r, p in TARGETS].index(target)


def _row_order(name: str) -> tuple[int, str]:
    first = ["kagent/memgov", f"{OWN_NAMESPACE}/memgov", "kagent/kagent-ui"]
    last = ("attacker", "impostor")
    return (first.index(name), name) if name in first else (len(first) + any(w in name for w in last), name)


def doc_section() -> str:
    """The matrix as docs/boundary.md holds it."""
    text = DOC.read_text()
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
