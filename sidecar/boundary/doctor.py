"""``memgov doctor``: every path around memgov that a namespace's NetworkPolicies leave open.

It reads memgov's chart values and the NetworkPolicies exported from kagent's namespace
(``kubectl get networkpolicy -n kagent -o yaml``), models the install (``model``), asks cyclonus
which connections the policies allow, and prints each connection that reaches kagent's
controller (API 8083, pprof 6060) without passing memgov, or reaches kagent's UI while the UI may
reach the controller, with the policy that opens it. Without ``--pods`` it knows only the labels
the chart values name, so a selector asking for others may select the controller or UI and is
tried as if it did. With ``--ops-url`` (memgov's operations listener, e.g. port-forwarded) it also
reports the kagent release memgov reads from the controller, and whether memgov is tested against
it. Exit codes: 0 no path, 1 at least one path, 2 unreadable input, 3 cyclonus is missing or failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sidecar.boundary.cyclonus import CyclonusError, allowed, find_cyclonus
from sidecar.boundary.model import (
    KAGENT_API_PORT,
    PPROF_PORT,
    UI_PORT,
    BoundaryInputError,
    Flow,
    Install,
    Peer,
    Policy,
    normalize_policies,
    policy_name,
    selects,
    selects_for_ingress,
    stand_ins,
    witnesses,
)
from sidecar.command import add_command

EXIT_CLEAR, EXIT_PATH, EXIT_INPUT, EXIT_CYCLONUS = 0, 1, 2, 3
MAX_INPUT_BYTES = 16 * 1024 * 1024
CYCLONUS_NEEDED = (
    "memgov doctor needs cyclonus v0.5.6 on PATH: "
    "go install github.com/mattfenwick/cyclonus/cmd/cyclonus@v0.5.6 (or `make tools` in a checkout)"
)


@dataclass(frozen=True)
class Bypass:
    """A connection around memgov, what it leads to, and the policies (or absence) that open it."""

    flow: Flow
    via_ui: bool
    openers: tuple[str, ...]

    def describe(self) -> str:
        """One line: the connection, where it leads, and what opens it."""
        hop = f" -> (UI proxies /api/) -> controller:{KAGENT_API_PORT}" if self.via_ui else ""
        return f"{self.flow.describe()}{hop}  opened by {'; '.join(self.openers)}"


def _targets(install: Install, policies: Sequence[Policy]) -> dict[Peer, Peer]:
    """Each pod a bypass ends at (the controller, in gateway mode the UI, and their stand-ins) -> the pod it is."""
    pods = [install.controller, *([install.ui] if install.mode == "gateway" else [])]
    return {variant: pod for pod in pods for variant in (pod, *stand_ins(pod, policies))}


def check_flows(install: Install, policies: Sequence[Policy]) -> list[Flow]:
    """Every connection from a modelled source or a policy's witness to what bypasses memgov."""
    sources = [*install.sources, *witnesses(policies)]
    flows = []
    for target, pod in _targets(install, policies).items():
        ports = (KAGENT_API_PORT, PPROF_PORT) if pod == install.controller else (UI_PORT,)
        flows += [Flow(s, target, port) for port in ports for s in sources if s != pod]
    return flows


def bypasses(install: Install, policies: Sequence[Policy], binary: str) -> list[Bypass]:
    """Every connection around memgov these policies allow, with the policies that open it.

    A target whose labels are not all known is also tried as each of its stand-ins, so a policy
    that may select it counts as selecting it.
    """
    targets = _targets(install, policies)
    flows = check_flows(install, policies)
    open_flows = [f for f, ok in zip(flows, allowed(policies, flows, binary), strict=True) if ok]
    ui_reaches_api = any(
        f.source == install.ui and targets[f.target] == install.controller and f.port == KAGENT_API_PORT
        for f in open_flows
    )

    def legitimate(source: Peer) -> bool:
        return install.legitimate(Flow(source, install.controller, KAGENT_API_PORT))

    found = [
        (f, targets[f.target] == install.ui)
        for f in open_flows
        if (targets[f.target] == install.controller and not (f.port == KAGENT_API_PORT and legitimate(f.source)))
        # memgov itself never calls the UI; any other pod that reaches it reaches the API through it.
        or (targets[f.target] == install.ui and ui_reaches_api and not legitimate(f.source))
    ]
    openers = _openers(policies, [f for f, _ in found], binary)
    return [Bypass(f, via_ui, openers[f]) for f, via_ui in found]


def _openers(policies: Sequence[Policy], flows: Sequence[Flow], binary: str) -> dict[Flow, tuple[str, ...]]:
    """For each open flow, the ingress policies of its target that admit it on their own."""
    names: dict[Flow, list[str]] = {f: [] for f in flows}
    for target in {f.target for f in flows}:
        mine = [f for f in flows if f.target == target]
        selecting = [p for p in policies if selects_for_ingress(p, target)]
        if not selecting:
            for f in mine:
                names[f].append(f"no NetworkPolicy isolating {target.name} for ingress")
            continue
        for policy in selecting:
            for f, ok in zip(mine, allowed([policy], mine, binary), strict=True):
                if ok:
                    names[f].append(f"NetworkPolicy {policy_name(policy)}")
    return {f: tuple(n) for f, n in names.items()}


# --- the command -----------------------------------------------------------------------------


_ALIASES = "aliases are not accepted"


class _NoAliasLoader(yaml.SafeLoader):
    """A safe loader that refuses YAML aliases: kubectl never writes them, and nested ones can expand
    a small file into more objects than memory holds."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, _ALIASES, None)
        return super().compose_node(parent, index)


def _load_yaml(path: Path, what: str) -> list[Any]:
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise BoundaryInputError(f"{what}: cannot read {path} ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise BoundaryInputError(f"{what}: {path} is larger than {MAX_INPUT_BYTES} bytes")
    try:
        return list(yaml.load_all(raw, Loader=_NoAliasLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        if getattr(exc, "problem", None) == _ALIASES:
            raise BoundaryInputError(f"{what}: {path} uses YAML aliases, which are not accepted") from None
        raise BoundaryInputError(f"{what}: {path} is not YAML{where}") from None


def _values(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    docs = [d for d in _load_yaml(path, "--values") if d is not None]
    if len(docs) > 1 or (docs and not isinstance(docs[0], Mapping)):
        raise BoundaryInputError("--values: expected one YAML mapping (a Helm values file)")
    return dict(docs[0]) if docs else {}


def _pods(path: Path | None, namespace: str) -> list[Peer]:
    """The pods of a ``kubectl get pods -o yaml`` export, as sources with their real labels."""
    if path is None:
        return []
    items: list[Any] = []
    for doc in _load_yaml(path, "--pods"):
        listed = doc.get("items") if isinstance(doc, Mapping) else None
        items.extend(listed if isinstance(listed, list) else [doc])
    pods: list[Peer] = []
    for item in items:
        if item is None:
            continue
        meta = item.get("metadata") if isinstance(item, Mapping) else None
        if not isinstance(item, Mapping) or item.get("kind") != "Pod" or not isinstance(meta, Mapping):
            raise BoundaryInputError("--pods: expected Pod objects (kubectl get pods -o yaml)")
        labels = meta.get("labels") or {}
        if not isinstance(labels, Mapping) or not isinstance(meta.get("name"), str):
            raise BoundaryInputError("--pods: a Pod has no name or malformed labels")
        ns = str(meta.get("namespace") or namespace)
        status = item.get("status")
        ip = status.get("podIP") if isinstance(status, Mapping) else None
        ip = str(ip or f"10.246.{len(pods) // 250}.{len(pods) % 250 + 1}")
        labels = {str(k): str(v) for k, v in labels.items()}
        pods.append(Peer(f"{ns}/{meta['name']}", ip, ns, labels, port_names=_port_names(item)))
    return pods


def _port_names(pod: Mapping[str, Any]) -> dict[int, str]:
    """Container port number -> name of a Pod object; malformed entries are refused."""
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or [] if isinstance(spec, Mapping) else None
    if not isinstance(containers, list):
        raise BoundaryInputError("--pods: a Pod has a malformed spec.containers")
    names: dict[int, str] = {}
    for container in containers:
        ports = container.get("ports") or [] if isinstance(container, Mapping) else None
        if not isinstance(ports, list) or not all(isinstance(p, Mapping) for p in ports):
            raise BoundaryInputError("--pods: a Pod has malformed container ports")
        for port in ports:
            if isinstance(port.get("containerPort"), int) and isinstance(port.get("name"), str):
                names[port["containerPort"]] = port["name"]
    return names


def build(args: argparse.Namespace) -> tuple[Install, list[Policy]]:
    """The install and the policies the command line names; BoundaryInputError on bad input."""
    values = _values(args.values)
    policies = normalize_policies(_load_yaml(args.policies, "--policies"), args.namespace)
    pods = _pods(args.pods, args.namespace)
    where = {"namespace": args.namespace, "release": args.release, "memgov_namespace": args.memgov_namespace}
    probe = Install.from_values(values, **where)
    controller = next((p for p in pods if selects({"matchLabels": probe.controller.labels}, p.labels)), None)
    ui = next((p for p in pods if selects({"matchLabels": probe.ui.labels}, p.labels)), None)
    others = [
        p for p in pods if p not in (controller, ui) and (probe.memgov is None or p.labels != probe.memgov.labels)
    ]
    install = Install.from_values(values, **where, controller=controller, ui=ui, neighbours=others)
    return install, policies


def kagent_release(ops_url: str) -> str:
    """What memgov's /readyz says of kagent's release, as one line."""
    try:
        with urllib.request.urlopen(ops_url.rstrip("/") + "/readyz", timeout=10) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()  # not ready: the details are there all the same
    except (urllib.error.URLError, OSError) as exc:
        return f"kagent release: memgov's /readyz did not answer ({type(exc).__name__})"
    try:
        detail = json.loads(body)["checks"]["kagent"]
        release, tested, known = detail["release"], bool(detail["tested"]), ", ".join(detail["tested_releases"])
    except (ValueError, KeyError, TypeError):
        return "kagent release: memgov's /readyz does not report it (an older memgov)"
    if release is None:
        return f"kagent release: unknown (kagent's /version gave none memgov recognises; tested: {known})"
    verdict = "tested" if tested else f"NOT tested (tested: {known})"
    return f"kagent release: {release}, {verdict}"


def _cmd_doctor(args: argparse.Namespace) -> int:
    if args.ops_url:
        print(f"memgov doctor: {kagent_release(args.ops_url)}")
    try:
        install, policies = build(args)
    except BoundaryInputError as exc:
        print(f"memgov doctor: {exc}", file=sys.stderr)
        return EXIT_INPUT
    try:
        found = bypasses(install, policies, find_cyclonus())
    except CyclonusError as exc:
        print(CYCLONUS_NEEDED if exc.missing else f"memgov doctor: {exc}", file=sys.stderr)
        return EXIT_CYCLONUS
    where = f"namespace {install.namespace}, {install.mode} mode, {install.stage} stage, {len(policies)} policies"
    if install.memgov_namespace != install.namespace:
        where = f"{where}, memgov in namespace {install.memgov_namespace}"
    if not found:
        print(f"memgov doctor: no path around memgov ({where})")
        return EXIT_CLEAR
    print(f"memgov doctor: {len(found)} path(s) around memgov ({where}):")
    for bypass in found:
        print(f"  {bypass.describe()}")
    return EXIT_PATH


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_command(
        sub, "doctor", "Find every path around memgov in a namespace's NetworkPolicies (needs cyclonus).", __doc__
    )
    p.add_argument("--policies", type=Path, required=True, help="kubectl get networkpolicy -n <ns> -o yaml output.")
    p.add_argument("--values", type=Path, help="memgov's Helm values file (chart defaults when left out).")
    p.add_argument("--pods", type=Path, help="kubectl get pods -n <ns> -o yaml output: real labels and more sources.")
    p.add_argument("--namespace", default="kagent", help="kagent's namespace.")
    p.add_argument(
        "--memgov-namespace", help="memgov's namespace when it has its own (gateway mode); kagent's by default."
    )
    p.add_argument("--release", default="memgov", help="memgov's Helm release name (its pods' instance label).")
    p.add_argument(
        "--ops-url", help="memgov's operations listener (e.g. a port-forward): also report kagent's release."
    )
    p.set_defaults(func=_cmd_doctor)
