"""A deployment that is safe to roll out: staged switch-over, the UI path, token shadowing, card URLs,
graceful stops, spreading, disruption budgets and the install notes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import cases
from tests.chart.helm import RELEASE, config_file, find, kagent_files, notes, pod_spec, render, run_helm

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# kagent's controller container as kagent's chart renders it with memgov's sidecar values: its
# "http" containerPort is controller.service.ports.targetPort, which now names memgov's listener.
KAGENT_CONTROLLER = {"name": "controller", "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]}


def _memgov_containers(values: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(render(values))
    return [*spec.get("initContainers", []), *spec["containers"]]


class TestStagedRolloutNotes:
    def test_default_stage_warns_and_names_the_next_steps(self) -> None:
        """The first install says memgov can still be bypassed and how to finish: switch, restart, enforce."""
        text = notes(cases.GATEWAY_DEFAULT)
        assert 'rollout stage "prepare"' in text and "WARNING: nothing stops a client" in text
        steps = [text.index(s) for s in ("-f memgov-kagent-values.yaml", "rollout restart", "rollout.stage=enforce")]
        assert steps == sorted(steps)

    def test_enforced_stage_says_it_is_done(self) -> None:
        """Once upgraded to enforce (after the switch) the notes no longer warn and say it is done."""
        text = notes(cases.GATEWAY_PRODUCTION, upgrade=True)
        assert "WARNING" not in text and "Done: only memgov reaches kagent's controller API." in text

    @pytest.mark.parametrize(
        ("values", "steps"), [(cases.GATEWAY_PRODUCTION, "2-3"), (cases.SIDECAR, "2-4")], ids=["gateway", "sidecar"]
    )
    def test_an_install_straight_to_enforce_is_not_done_before_kagent_is_switched(
        self, values: dict[str, Any], steps: str
    ) -> None:
        """Installed at enforce in one step, the notes warn that agents fail until kagent is switched, name the
        steps to do now, and never print "Done"."""
        text = notes(values)
        assert "WARNING: installed straight at rollout.stage=enforce" in text and f"do steps {steps} now" in text
        assert "Done" not in text

    @pytest.mark.parametrize("values", [cases.GATEWAY_DEFAULT, cases.SIDECAR], ids=["gateway", "sidecar"])
    def test_notes_repeat_that_f_replaces_controller_env(self, values: dict[str, Any]) -> None:
        """kagent's controller.env is a list: the notes say -f replaces it whole."""
        assert "-f REPLACES kagent's whole controller.env" in notes(values)

    @pytest.mark.parametrize(
        ("values", "says"),
        [
            (cases.GATEWAY_DEFAULT, "anyone who reaches it can list and delete every user's memories"),
            (cases.GATEWAY_UI_PORT_FORWARD, "open it only with kubectl port-forward"),
            (cases.SIDECAR, "the UI is governed like any other client"),
        ],
        ids=["gateway", "port-forward", "sidecar"],
    )
    def test_notes_warn_about_the_ui(self, values: dict[str, Any], says: str) -> None:
        """The notes tell what kagent's UI can do in each mode."""
        assert says in notes(values)


class TestTokenShadowing:
    @pytest.mark.parametrize("values", [cases.SIDECAR, cases.GATEWAY_PRODUCTION], ids=["sidecar", "gateway"])
    def test_every_memgov_container_shadows_the_token(self, values: dict[str, Any]) -> None:
        """memgov, OPA and the bundle writer mount an empty folder over the ServiceAccount token path."""
        spec = pod_spec(render(values))
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in _memgov_containers(values):
            (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == TOKEN_DIR]
            assert mount["readOnly"] is True, container["name"]
            assert set(volumes[mount["name"]]) == {"name", "emptyDir"}

    def test_sidecar_patch_containers_are_all_shadowed(self) -> None:
        """The patch for kagent's pod (which automounts its token) adds no container without the shadow."""
        patch = kagent_files(render(cases.SIDECAR))["controller-patch.yaml"]["spec"]["template"]["spec"]
        added = [*patch["initContainers"], *patch["containers"]]
        assert [c["name"] for c in added] == ["memgov-bundle", "memgov", "opa"]
        assert all(any(m["mountPath"] == TOKEN_DIR for m in c["volumeMounts"]) for c in added)


class TestAgentCards:
    def test_gateway_points_cards_at_memgov(self) -> None:
        """kagent's a2aBaseUrl names memgov's Service on 8083, so a client following a card stays behind memgov."""
        manifests = render(cases.GATEWAY_DEFAULT)
        controller = kagent_files(manifests)["kagent-values.yaml"]["controller"]
        service = find(manifests, "Service", RELEASE)
        assert controller["a2aBaseUrl"] == f"http://{service['metadata']['name']}.kagent:8083"
        assert 8083 in {p["port"] for p in service["spec"]["ports"]}

    def test_sidecar_keeps_kagents_card_url(self) -> None:
        """In sidecar mode kagent's default card URL (its controller Service) already lands on memgov."""
        controller = kagent_files(render(cases.SIDECAR))["kagent-values.yaml"]["controller"]
        assert "a2aBaseUrl" not in controller
        assert controller["service"]["ports"]["targetPort"] == 8080


class TestGracefulStop:
    @pytest.mark.parametrize("values", [cases.GATEWAY_PRODUCTION, cases.SIDECAR], ids=["gateway", "sidecar"])
    def test_streams_outlive_a_roll(self, values: dict[str, Any]) -> None:
        """Each serving container pauses in preStop (no shell needed), and memgov drains within the grace period."""
        manifests = render(values)
        spec = pod_spec(manifests)
        for container in spec["containers"]:
            assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
        assert spec["terminationGracePeriodSeconds"] == 60
        assert config_file(manifests)["listen"]["shutdown_timeout_s"] == 60 - 5 - 5

    def test_grace_period_must_leave_time_to_drain(self) -> None:
        """A grace period shorter than the drain pause plus margins is refused."""
        with pytest.raises(Exception, match="terminationGracePeriodSeconds=15"):
            run_helm("template", {"terminationGracePeriodSeconds": 15, "shutdown": {"drainSeconds": 10}})


class TestReplicas:
    def test_replicas_spread_over_nodes_and_zones(self) -> None:
        """With more than one replica and no constraints given, pods prefer distinct nodes and zones."""
        values = {
            "replicaCount": 2,
            "state": {"postgresql": {"existingSecret": "s"}},
            "networkPolicy": {"postgresql": {"to": [cases.POSTGRES_PEER]}},
        }
        spread = pod_spec(render(values))["topologySpreadConstraints"]
        assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
        assert all(c["labelSelector"]["matchLabels"]["app.kubernetes.io/name"] == "memgov" for c in spread)
        assert "topologySpreadConstraints" not in pod_spec(render(cases.GATEWAY_DEFAULT))

    @pytest.mark.parametrize("values", [cases.GATEWAY_DEFAULT, cases.GATEWAY_PRODUCTION], ids=["one", "three"])
    def test_the_budget_never_blocks_a_drain(self, values: dict[str, Any]) -> None:
        """Drains take maxUnavailable pods at a time; no minAvailable, which one replica could never satisfy."""
        budget = find(render(values), "PodDisruptionBudget")["spec"]
        assert budget["maxUnavailable"] == 1 and "minAvailable" not in budget


class TestSidecarPorts:
    def test_no_container_port_is_declared_twice_in_kagents_pod(self) -> None:
        """kagent's controller container declares 8080 (its Service's targetPort); memgov's containers do not."""
        declared = [
            (p["containerPort"], p.get("protocol", "TCP"))
            for c in [KAGENT_CONTROLLER, *pod_spec(render(cases.SIDECAR))["containers"]]
            for p in c.get("ports", [])
        ]
        assert len(declared) == len(set(declared))
