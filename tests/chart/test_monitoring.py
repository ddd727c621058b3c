"""The dashboard and the alerts: rendered as the chart ships them, rules valid for Prometheus, and every
metric and label they use one memgov exports."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import REGISTRY

import sidecar.server  # noqa: F401 - registers every metric the gateway exports
from sidecar.reasons import REASON_VALUES
from sidecar.state.types import ERASURE_STATES
from tests.chart import cases
from tests.chart.helm import CHART, KUBE_VERSION, REPO, find, render, render_error

RULECHECK = REPO / ".tools" / "bin" / "rulecheck"
MONITORING = {"grafanaDashboard": {"enabled": True}, "prometheusRule": cases.PROMETHEUS_RULE}
# Label values the queries may name, where memgov's label values form a closed set.
CLOSED_LABELS: dict[str, frozenset[str]] = {
    "reason": REASON_VALUES,
    "state": frozenset(ERASURE_STATES),
    "action": frozenset({"forward", "rewrite_disabled", "empty_result", "deny"}),
    "outcome": frozenset({"loaded", "unchanged", "rejected", "engine_unavailable"}),
}
_DURATION = r"^[0-9]+(ms|s|m|h|d|w|y)$"
PROMETHEUS_RULE_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["groups"],
    "properties": {
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "rules"],
                "properties": {
                    "name": {"type": "string"},
                    "rules": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["alert", "expr", "labels", "annotations"],
                            "properties": {
                                "alert": {"type": "string", "pattern": "^[A-Z][A-Za-z]+$"},
                                "expr": {"type": "string"},
                                "for": {"type": "string", "pattern": _DURATION},
                                "labels": {
                                    "type": "object",
                                    "required": ["severity"],
                                    "properties": {"severity": {"enum": ["warning", "critical"]}},
                                },
                                "annotations": {
                                    "type": "object",
                                    "required": ["summary", "description", "runbook_url"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "summary": {"type": "string"},
                                        "description": {"type": "string"},
                                        "runbook_url": {
                                            "type": "string",
                                            "pattern": f"^{re.escape(cases.RUNBOOK_URL)}#memgov[a-z]+$",
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        }
    },
}


def _rule() -> dict[str, Any]:
    return find(render(MONITORING), "PrometheusRule")


def _dashboard() -> dict[str, Any]:
    cm = find(render(MONITORING), "ConfigMap", "memgov-dashboard")
    return json.loads(cm["data"]["memgov.json"])


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _queries() -> list[str]:
    exprs = [t["expr"] for p in _panels() for t in p["targets"]]
    exprs += [r["expr"] for g in _rule()["spec"]["groups"] for r in g["rules"]]
    return exprs


#: Labels Prometheus adds to every memgov series it scrapes through the chart's ServiceMonitor.
TARGET_LABELS = frozenset({"namespace", "pod", "job", "service", "instance", "endpoint", "container"})
#: `up` is Prometheus' own series for a target; a query may use it only for memgov's target.
_UP = re.compile(r'\bup\{job="memgov", namespace="kagent"\}')


def _exported() -> dict[str, tuple[str, ...]]:
    """Sample name -> label names, for every memgov metric the gateway registers."""
    # prometheus_client has no public way to list a registry's sample names with their labels.
    names = REGISTRY._names_to_collectors
    # A counter's family name is not a series Prometheus stores; only <name>_total is.
    return {
        name: tuple(getattr(c, "_labelnames", ()))
        for name, c in names.items()
        if name.startswith("memgov_") and f"{name}_total" not in names
    }


def _rulecheck(groups: list[dict[str, Any]], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert RULECHECK.exists(), f"{RULECHECK} is missing: run `make tools`"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return subprocess.run([str(RULECHECK), str(path)], capture_output=True, text=True, timeout=60, check=False)


class TestDashboard:
    def test_ships_as_a_sidecar_config_map(self) -> None:
        """The dashboard is a ConfigMap with the label Grafana's dashboard sidecar looks for, off by default."""
        cm = find(render(MONITORING), "ConfigMap", "memgov-dashboard")
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        kubernetes_validate.validate(cm, KUBE_VERSION, strict=True)
        assert not [m for m in render({}) if m["metadata"]["name"] == "memgov-dashboard"]
        assert json.loads((CHART / "dashboards" / "memgov.json").read_text()) == _dashboard()

    @pytest.mark.parametrize(
        ("topic", "metric"),
        [
            ("decisions by action", "sum by (action) (rate(memgov_governed_decisions_total"),
            ("refusals by reason", "sum by (reason)"),
            ("fail-closed rate", 'reason=~"policy_unavailable|state_unavailable|internal_error"'),
            ("erasure states", "memgov_erasures"),
            ("erasure age", "memgov_erasure_oldest_unfinished_seconds"),
            ("expiry backlog", "memgov_expiry_overdue_seconds"),
            ("budget exhaustion", "hourly_budget_exhausted"),
            ("shadow disagreements", "memgov_policy_shadow_disagreements_total"),
            ("policy revision", "memgov_policy_pack_info"),
            ("OPA revision", "memgov_policy_opa_bundle_info"),
            ("upstream latency", "memgov_upstream_duration_seconds_bucket"),
        ],
    )
    def test_shows_what_an_operator_needs(self, topic: str, metric: str) -> None:
        """Each topic the operator asked for has a panel querying it."""
        assert any(metric in t["expr"] for p in _panels() for t in p["targets"]), topic

    def test_panels_use_the_datasource_variable_and_do_not_overlap(self) -> None:
        """Every panel asks the chosen Prometheus; no two panels share a grid cell."""
        cells: set[tuple[int, int]] = set()
        for panel in _dashboard()["panels"]:
            grid = panel["gridPos"]
            mine = {
                (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
            }
            assert not cells & mine, panel["title"]
            cells |= mine
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == "${datasource}"


class TestAlerts:
    def test_rule_is_a_valid_prometheus_rule(self) -> None:
        """The PrometheusRule has valid metadata and only the monitoring.coreos.com/v1 fields used here."""
        rule = _rule()
        assert rule["apiVersion"] == "monitoring.coreos.com/v1"
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": rule["metadata"]}, KUBE_VERSION, strict=True
        )
        jsonschema.validate(rule["spec"], PROMETHEUS_RULE_SPEC)

    def test_prometheus_parses_every_rule(self, tmp_path: Path) -> None:
        """Prometheus's rule parser (rulecheck) accepts the rendered groups: PromQL, templates, durations."""
        checked = _rulecheck(_rule()["spec"]["groups"], tmp_path)
        assert checked.returncode == 0, checked.stderr
        assert "SUCCESS: 14 rules found" in checked.stdout

    def test_rule_parser_refuses_a_broken_rule(self, tmp_path: Path) -> None:
        """The same check fails on a PromQL error, so the passing check above means something."""
        groups = _rule()["spec"]["groups"]
        groups[0]["rules"][0]["expr"] = "sum(rate(memgov_erasures[5m])"
        assert _rulecheck(groups, tmp_path).returncode != 0

    @pytest.mark.parametrize(
        "alert",
        [
            "MemgovErasureFailed",
            "MemgovErasureStuck",
            "MemgovStateUnavailable",
            "MemgovAuditRecordsDropped",
            "MemgovPolicyReloadFailed",
            "MemgovShadowDisagreement",
            "MemgovExpirySweepBehind",
            "MemgovRotationModelMissing",
            "MemgovDown",
            "MemgovAbsent",
            "MemgovUnready",
        ],
    )
    def test_alerts_cover_what_an_operator_must_act_on(self, alert: str) -> None:
        """Erasure failed or stuck, store unavailable, reload failure, shadow disagreement, sweeper behind, an agent
        rotation cannot re-embed for."""
        assert alert in {r["alert"] for g in _rule()["spec"]["groups"] for r in g["rules"]}

    @pytest.mark.parametrize("runbook", [None, "docs/runbook.md", "/runbook.md", "runbooks.example.org/memgov"])
    def test_alerts_need_an_absolute_runbook_url(self, runbook: str | None) -> None:
        """The alerts do not render with the default (none) or a relative runbook URL: a link followed from a
        pager or Alertmanager must be absolute."""
        rule = {"enabled": True} if runbook is None else {"enabled": True, "runbookUrl": runbook}
        assert "needs prometheusRule.runbookUrl" in render_error({"prometheusRule": rule})

    def test_erasure_slo_is_configurable(self) -> None:
        """MemgovErasureStuck fires after prometheusRule.erasureSloMinutes."""
        rule = find(
            render({**MONITORING, "prometheusRule": {**cases.PROMETHEUS_RULE, "erasureSloMinutes": 15}}),
            "PrometheusRule",
        )
        stuck = next(r for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] == "MemgovErasureStuck")
        assert stuck["expr"].endswith("> 900")


_METRIC = re.compile(r"\b(memgov_[a-z0-9_]+)\b(?:\{([^}]*)\})?")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_BY = re.compile(r"\bby\s*\(([^)]*)\)")


class TestMetricsExist:
    @pytest.mark.parametrize("query", _queries())
    def test_every_metric_and_label_is_exported(self, query: str) -> None:
        """Each memgov metric a panel or alert queries is exported, with the labels and label values it uses."""
        exported = _exported()
        used = _METRIC.findall(query)
        up = _UP.findall(query)
        assert used or up, query
        assert not re.search(r"(?<![a-z_])up\{", _UP.sub("", query)), f"`up` of a target other than memgov's: {query}"
        labels: set[str] = {"le", *TARGET_LABELS}
        for name, matchers in used:
            assert name in exported, f"{name} is not a metric memgov exports"
            labels |= set(exported[name])
            for label, op, value in _MATCHER.findall(matchers):
                assert label in exported[name] or label in TARGET_LABELS, f"{name} has no label {label}"
                if label in CLOSED_LABELS and op in ("=", "=~"):
                    assert set(value.split("|")) <= CLOSED_LABELS[label], f"{label}={value}"
        for grouping in _BY.findall(query):
            assert {g.strip() for g in grouping.split(",")} <= labels, query


class TestAlertState:
    def _alerts(self) -> dict[str, dict[str, Any]]:
        return {r["alert"]: r for g in _rule()["spec"]["groups"] for r in g["rules"]}

    def test_every_alert_keeps_the_namespace(self) -> None:
        """An aggregation that drops `namespace` would merge the releases of several namespaces into one alert."""
        for name, rule in self._alerts().items():
            groupings = _BY.findall(rule["expr"])
            aggregates = re.findall(r"\b(sum|max|min|avg|count)\s*(?:by\s*\([^)]*\)\s*)?\(", rule["expr"])
            assert len(groupings) == len(aggregates), f"{name} aggregates without `by`"
            assert all("namespace" in {g.strip() for g in grouping.split(",")} for grouping in groupings), name

    def test_erasure_failed_is_state_based(self) -> None:
        """The alert holds while a failed erasure exists, from its first scrape on, and clears only when none is."""
        expr = self._alerts()["MemgovErasureFailed"]["expr"]
        assert "offset" not in expr and "increase" not in expr and "delta" not in expr
        assert expr == 'max by (namespace) (memgov_erasures{state="failed"}) > 0'

    def test_down_and_absent_watch_memgovs_own_target(self) -> None:
        alerts = self._alerts()
        assert alerts["MemgovDown"]["expr"] == 'up{job="memgov", namespace="kagent"} == 0'
        assert alerts["MemgovAbsent"]["expr"] == 'absent(up{job="memgov", namespace="kagent"})'
        # The ServiceMonitor scrapes the Service named like the job the alerts select.
        manifests = render({**MONITORING, "serviceMonitor": {"enabled": True}})
        assert find(manifests, "Service", "memgov")["metadata"]["name"] == "memgov"

    def test_every_runbook_anchor_exists(self) -> None:
        """Each runbook_url names a heading of docs/runbook.md (GitHub-style anchor)."""
        headings = re.findall(r"^#+ (.+)$", (REPO / "docs" / "runbook.md").read_text(), flags=re.M)
        anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
        for name, rule in self._alerts().items():
            assert rule["annotations"]["runbook_url"].split("#", 1)[1] in anchors, name
            assert rule["annotations"]["runbook_url"].split("#", 1)[1] == name.lower()


class TestDashboardVariables:
    def test_namespace_and_pod_variables_filter_every_panel(self) -> None:
        variables = {v["name"]: v for v in _dashboard()["templating"]["list"]}
        assert variables["namespace"]["type"] == variables["pod"]["type"] == "query"
        assert variables["pod"]["includeAll"] is True and variables["pod"]["multi"] is True
        for panel in _panels():
            for target in panel["targets"]:
                for _name, matchers in _METRIC.findall(target["expr"]):
                    assert 'namespace="$namespace"' in matchers and 'pod=~"$pod"' in matchers, target["expr"]
