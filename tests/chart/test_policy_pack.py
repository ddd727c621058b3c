"""The chart carries no copy of the policy pack: memgov's image holds it, a ConfigMap only an operator's own pack."""

from __future__ import annotations

from typing import Any, Final

from tests.chart import cases
from tests.chart.helm import CHART, RELEASE, find, pod_spec, render

PACK_SUFFIXES = (".cedar", ".cedarschema", ".rego")


def _mounted_pack(values: dict[str, Any]) -> dict[str, str]:
    """Return path -> content of the operator pack as the pod sees it under /etc/memgov/policies."""
    manifests = render(values)
    data = find(manifests, "ConfigMap", f"{RELEASE}-policies")["data"]
    config = next(v for v in pod_spec(manifests)["volumes"] if v["name"] == "memgov-config")
    sources = [s["configMap"] for s in config["projected"]["sources"]]
    source = next(s for s in sources if s["name"] == f"{RELEASE}-policies")
    return {item["path"].removeprefix("policies/"): data[item["key"]] for item in source["items"]}


class TestNoCopy:
    def test_chart_holds_no_policy_files(self) -> None:
        """No Cedar or Rego file is in the chart (files/ holds the `helm test` script and the list of values each
        chart version added): the image has the pack."""
        assert sorted(p.name for p in (CHART / "files").iterdir()) == ["added-values.yaml", "boundary-check.py"]
        assert [p for p in CHART.rglob("*") if p.suffix in PACK_SUFFIXES] == []

    def test_default_renders_no_pack_config_map(self) -> None:
        """Without an operator pack nothing pack-related is rendered or mounted."""
        manifests = render(cases.GATEWAY_DEFAULT)
        assert [m for m in manifests if m["metadata"]["name"] == f"{RELEASE}-policies"] == []
        config = next(v for v in pod_spec(manifests)["volumes"] if v["name"] == "memgov-config")
        assert [s["configMap"]["name"] for s in config["projected"]["sources"]] == [f"{RELEASE}-config"]


class TestUserPack:
    PACK: Final = {
        "data/limits.yaml": "max_days: 3\n",
        "cedar/site.cedar": "permit(principal, action, resource);\n",
        "rego/site/policy.rego": "package site\n",
    }

    def test_user_pack_is_mounted_file_for_file(self) -> None:
        """policy.pack.files is stored in a ConfigMap and mounted at its own relative paths."""
        assert _mounted_pack({"policy": {"pack": {"files": self.PACK}}}) == self.PACK

    def test_changing_the_pack_rolls_the_pods(self) -> None:
        """A different pack changes the pod template, so gateway pods restart onto it."""

        def checksum(values: dict[str, Any]) -> str:
            deployment = find(render(values), "Deployment")
            return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/policies"])

        assert checksum({"policy": {"pack": {"files": self.PACK}}}) != checksum(cases.GATEWAY_DEFAULT)
