"""Every alert of the chart's PrometheusRule, evaluated over input series by Prometheus's own rule manager and
PromQL engine (rulecheck's `test`, promtool's rule unit test format): it fires, holds and clears."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import cases
from tests.chart.helm import REPO, find, render

RULECHECK = REPO / ".tools" / "bin" / "rulecheck"
TESTS = Path(__file__).with_name("alerts.test.yaml")
RULES_FILE = "memgov-rules.yaml"


def _groups() -> list[dict[str, Any]]:
    """The alert groups as the chart renders them by default (release memgov, namespace kagent), without
    their annotations: text, checked by the rule parser (test_monitoring.py), not by these tests."""
    groups = find(render({"prometheusRule": cases.PROMETHEUS_RULE}), "PrometheusRule")["spec"]["groups"]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations")
    return list(groups)


def _alerts() -> list[str]:
    return [r["alert"] for g in _groups() for r in g["rules"]]


def _checks() -> dict[str, list[tuple[int, bool]]]:
    """Each alert's checks in the test file: (minute, whether it is expected to fire), in time order."""
    out: dict[str, list[tuple[int, bool]]] = {}
    for group in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in group["alert_rule_test"]:
            minute = int(str(check["eval_time"]).removesuffix("m"))
            out.setdefault(check["alertname"], []).append((minute, bool(check["exp_alerts"])))
    return {name: sorted(seq) for name, seq in out.items()}


def _run(tmp_path: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> subprocess.CompletedProcess[str]:
    """Write the rendered rules beside (a copy of) the test file and run `rulecheck test` on it."""
    assert RULECHECK.exists(), f"{RULECHECK} is missing: run `make tools`"
    (tmp_path / RULES_FILE).write_text(yaml.safe_dump({"groups": _groups()}, sort_keys=False))
    tests = tmp_path / TESTS.name
    if edit is None:
        shutil.copy(TESTS, tests)
    else:
        data = yaml.safe_load(TESTS.read_text())
        edit(data)
        tests.write_text(yaml.safe_dump(data, sort_keys=False))
    return subprocess.run(
        [str(RULECHECK), "test", str(tests)], capture_output=True, text=True, timeout=120, check=False
    )


def _group(data: dict[str, Any], alert: str) -> dict[str, Any]:
    return next(g for g in data["tests"] if g["alert_rule_test"][0]["alertname"] == alert)


def _expect_still_firing_at_the_end(data: dict[str, Any]) -> None:
    checks = _group(data, "MemgovErasureFailed")["alert_rule_test"]
    checks[-1]["exp_alerts"] = checks[-2]["exp_alerts"]


def _expect_firing_while_pending(data: dict[str, Any]) -> None:
    checks = _group(data, "MemgovErasureStuck")["alert_rule_test"]
    checks[1]["exp_alerts"] = checks[2]["exp_alerts"]


def _expect_another_pod(data: dict[str, Any]) -> None:
    _group(data, "MemgovDown")["alert_rule_test"][2]["exp_alerts"][0]["exp_labels"]["pod"] = "memgov-1"


def _name_an_unknown_alert(data: dict[str, Any]) -> None:
    _group(data, "MemgovAbsent")["alert_rule_test"][0]["alertname"] = "MemgovNoSuchAlert"


class TestAlertRuleTests:
    def test_every_alert_fires_holds_and_clears_in_the_tests(self) -> None:
        """Each alert the chart renders has checks, in time order, that it is quiet, fires, still fires at a later
        check, and is quiet again; the file tests no alert the chart does not have."""
        checks = _checks()
        assert sorted(checks) == sorted(_alerts())
        for alert, seq in checks.items():
            firing = [i for i, (_, fires) in enumerate(seq) if fires]
            assert not seq[0][1], f"{alert}: no quiet check before it fires"
            assert len(firing) >= 2, f"{alert}: no check that it holds"
            assert not seq[-1][1] and seq[-1][0] > seq[firing[-1]][0], f"{alert}: no check that it clears"

    def test_prometheus_evaluates_every_test_as_expected(self, tmp_path: Path) -> None:
        """rulecheck loads the series into Prometheus's TSDB and evaluates the rendered rules step by step: every
        expected alert fires at its time, with its labels, and no other."""
        proc = _run(tmp_path)
        assert proc.returncode == 0, proc.stderr
        groups = len(yaml.safe_load(TESTS.read_text())["tests"])
        checks = sum(len(seq) for seq in _checks().values())
        assert f"SUCCESS: {groups} test groups, {checks} alert checks" in proc.stdout

    @pytest.mark.parametrize(
        ("edit", "said"),
        [
            (_expect_still_firing_at_the_end, "MemgovErasureFailed at 17m"),
            (_expect_firing_while_pending, "MemgovErasureStuck at 8m"),
            (_expect_another_pod, 'pod="memgov-1"'),
            (_name_an_unknown_alert, '"MemgovNoSuchAlert" is not an alerting rule'),
        ],
        ids=["failed-erasure-retried", "pending-is-not-firing", "wrong-labels", "unknown-alert"],
    )
    def test_a_wrong_expectation_fails(self, tmp_path: Path, edit: Callable[[dict[str, Any]], None], said: str) -> None:
        """The evaluation can fail: an erasure alert expected to outlive its retry (the gauge back to 0), an alert
        expected while its `for` is pending, other labels, or an alert no rule defines, each fails and says where."""
        proc = _run(tmp_path, edit)
        assert proc.returncode == 1
        assert said in proc.stderr
