"""No silent loss of state: the chart makes the state store a choice, keeps SQLite on a claim when asked,
keeps SQLite pods single, warns about emptyDir state, and migrates PostgreSQL in a hook Job."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import cases
from tests.chart.helm import RELEASE, config_file, find, kagent_files, kinds, notes, pod_spec, render, render_error
from tests.chart.netpol import Endpoint, Namespace, allows, egress_allows

POSTGRES: dict[str, Any] = {
    "state": {"postgresql": {"existingSecret": "memgov-state"}},
    "networkPolicy": {"postgresql": {"to": [cases.POSTGRES_PEER]}},
}
PERSISTENT: dict[str, Any] = {"state": {"persistence": {"enabled": True}}}
MIGRATION_JOB: dict[str, Any] = {**POSTGRES, "state": {**POSTGRES["state"], "migrationJob": {"enabled": True}}}


def _state_volume(values: dict[str, Any]) -> dict[str, Any]:
    (volume,) = [v for v in pod_spec(render(values))["volumes"] if v["name"] == "memgov-state"]
    return volume


class TestChoice:
    @pytest.mark.parametrize("mode", ["gateway", "sidecar"])
    def test_values_that_choose_no_store_are_refused(self, mode: str) -> None:
        message = render_error({"mode": mode}, choose_state=False)
        assert "no state store chosen" in message
        for option in ("state.postgresql.existingSecret", "state.persistence.enabled=true", "state.ephemeral=true"):
            assert option in message

    def test_two_stores_at_once_are_refused(self) -> None:
        values = {"state": {"persistence": {"enabled": True}, "ephemeral": True}}
        assert "state.persistence.enabled, state.ephemeral are all set: choose one state store." in render_error(
            values, choose_state=False
        )

    def test_ephemeral_state_is_an_empty_dir_and_the_notes_say_it_is_lost(self) -> None:
        assert set(_state_volume({"state": {"ephemeral": True}})) == {"name", "emptyDir"}
        text = notes({"state": {"ephemeral": True}})
        assert "WARNING: state.ephemeral=true" in text and "Every pod replacement loses it" in text
        sidecar = notes({**cases.SIDECAR, "state": {"ephemeral": True}})
        assert "(every kagent controller rollout too)" in sidecar

    @pytest.mark.parametrize("values", [POSTGRES, PERSISTENT], ids=["postgresql", "persistent"])
    def test_durable_stores_do_not_warn(self, values: dict[str, Any]) -> None:
        assert "state.ephemeral" not in notes(values)


class TestPersistentSqlite:
    def test_state_lives_on_a_claim_the_chart_keeps(self) -> None:
        manifests = render(PERSISTENT)
        claim = find(manifests, "PersistentVolumeClaim", f"{RELEASE}-state")
        assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert claim["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        assert _state_volume(PERSISTENT)["persistentVolumeClaim"] == {"claimName": f"{RELEASE}-state"}
        assert config_file(manifests)["state"]["url"] == "sqlite:////var/lib/memgov/state.db"
        mounts = {m["name"]: m["mountPath"] for m in pod_spec(manifests)["containers"][0]["volumeMounts"]}
        assert mounts["memgov-state"] == "/var/lib/memgov"

    def test_the_old_pod_lets_go_before_the_new_one_starts(self) -> None:
        deployment = find(render(PERSISTENT), "Deployment")
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
        assert deployment["spec"]["replicas"] == 1

    def test_an_existing_claim_is_used_and_none_is_created(self) -> None:
        values = {"state": {"persistence": {"enabled": True, "existingClaim": "memgov-data"}}}
        assert "PersistentVolumeClaim" not in kinds(render(values))
        assert _state_volume(values)["persistentVolumeClaim"] == {"claimName": "memgov-data"}

    def test_storage_class_size_and_annotations_reach_the_claim(self) -> None:
        persistence = {"enabled": True, "storageClassName": "fast", "size": "5Gi", "annotations": {"a.example/b": "c"}}
        claim = find(render({"state": {"persistence": persistence}}), "PersistentVolumeClaim")
        assert claim["spec"]["storageClassName"] == "fast"
        assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
        assert claim["metadata"]["annotations"]["a.example/b"] == "c"

    @pytest.mark.parametrize("state", [PERSISTENT["state"], {"ephemeral": True}], ids=["persistent", "ephemeral"])
    def test_sqlite_refuses_more_than_one_gateway_pod(self, state: dict[str, Any]) -> None:
        assert "replicaCount=2 needs PostgreSQL state" in render_error({"replicaCount": 2, "state": state})

    def test_postgresql_state_has_no_local_volume(self) -> None:
        manifests = render(POSTGRES)
        assert "memgov-state" not in {v["name"] for v in pod_spec(manifests)["volumes"]}
        assert "PersistentVolumeClaim" not in kinds(manifests)
        assert find(manifests, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"


class TestAuditSpool:
    """The audit spool lives on a volume, so records spooled during an outage outlive a killed container."""

    @pytest.mark.parametrize("mode", ["gateway", "sidecar"])
    def test_postgresql_state_spools_to_its_own_empty_dir(self, mode: str) -> None:
        base: dict[str, Any] = cases.SIDECAR if mode == "sidecar" else {}
        network = {**base.get("networkPolicy", {}), **POSTGRES["networkPolicy"]}
        manifests = render({**base, "state": POSTGRES["state"], "networkPolicy": network})
        assert config_file(manifests)["audit"] == {"spool_dir": "/var/lib/memgov-spool"}
        spec = pod_spec(manifests)
        (volume,) = [v for v in spec["volumes"] if v["name"] == "memgov-spool"]
        assert volume == {"name": "memgov-spool", "emptyDir": {"sizeLimit": "64Mi"}}
        (memgov,) = [c for c in spec["containers"] if c["name"] == "memgov"]
        mounts = {m["name"]: m["mountPath"] for m in memgov["volumeMounts"]}
        assert mounts["memgov-spool"] == "/var/lib/memgov-spool"

    @pytest.mark.parametrize("state", [PERSISTENT["state"], {"ephemeral": True}], ids=["persistent", "ephemeral"])
    def test_sqlite_state_spools_on_the_state_volume(self, state: dict[str, Any]) -> None:
        manifests = render({"state": state})
        assert config_file(manifests)["audit"] == {"spool_dir": "/var/lib/memgov/audit-spool"}
        assert "memgov-spool" not in {v["name"] for v in pod_spec(manifests)["volumes"]}


class TestSidecarSqlite:
    @pytest.mark.parametrize("state", [PERSISTENT["state"], {"ephemeral": True}], ids=["persistent", "ephemeral"])
    def test_kagent_controller_replicas_above_one_are_refused(self, state: dict[str, Any]) -> None:
        values = {**cases.SIDECAR, "state": state, "kagent": {"controller": {"replicas": 2}}}
        message = render_error(values)
        assert "kagent.controller.replicas=2 with SQLite state in sidecar mode" in message

    def test_postgresql_lets_kagent_run_several_controllers(self) -> None:
        values = {**cases.SIDECAR, **POSTGRES, "kagent": {"controller": {"replicas": 3}}}
        files = kagent_files(render(values))
        assert "replicas" not in files["controller-patch.yaml"]["spec"]
        assert "replicas" not in files["kagent-values.yaml"]["controller"]

    def test_the_patch_and_kagent_values_keep_one_controller_pod_on_the_claim(self) -> None:
        files = kagent_files(render({**cases.SIDECAR, **PERSISTENT}))
        spec = files["controller-patch.yaml"]["spec"]
        assert spec["replicas"] == 1
        assert spec["strategy"] == {"type": "Recreate", "rollingUpdate": None}
        assert files["kagent-values.yaml"]["controller"]["replicas"] == 1
        (volume,) = [v for v in spec["template"]["spec"]["volumes"] if v["name"] == "memgov-state"]
        assert volume["persistentVolumeClaim"] == {"claimName": f"{RELEASE}-state"}


HOOK_JOBS = {
    f"{RELEASE}-migrate": ("pre-install,pre-upgrade", "migrate"),
    f"{RELEASE}-schema-check": ("pre-rollback", "check"),
}


def _jobs(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in render(values) if m["kind"] == "Job"}


class TestMigrationJob:
    def test_migrate_runs_before_install_and_upgrade_and_check_before_a_rollback(self) -> None:
        """Two hook Jobs of the release's own image: `memgov state migrate` before install and upgrade, and
        `memgov state check` before a rollback to this revision."""
        jobs = _jobs(MIGRATION_JOB)
        assert set(jobs) == set(HOOK_JOBS)
        for name, (hook, command) in HOOK_JOBS.items():
            annotations = jobs[name]["metadata"]["annotations"]
            assert annotations["helm.sh/hook"] == hook
            assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
            (container,) = jobs[name]["spec"]["template"]["spec"]["containers"]
            assert container["command"] == ["memgov", "state", command]
            assert (
                container["image"]
                == find(render(MIGRATION_JOB), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
            )
            assert {"name": "MEMGOV_STATE__URL_FILE", "value": "/var/run/memgov/secrets/state-url"} in container["env"]

    def test_the_service_account_and_egress_policy_are_hooks_made_before_the_jobs(self) -> None:
        """The Jobs' ServiceAccount and NetworkPolicy exist for every hook the Jobs run in, at a lower weight, so a
        first install (where hooks run before the release's other objects) has them in place first."""
        manifests = render(MIGRATION_JOB)
        account = find(manifests, "ServiceAccount", f"{RELEASE}-migrate")
        policy = find(manifests, "NetworkPolicy", f"{RELEASE}-migrate")
        for obj in (account, policy):
            annotations = obj["metadata"]["annotations"]
            assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade", "pre-rollback"}
            assert int(annotations["helm.sh/hook-weight"]) < 0
        assert account["automountServiceAccountToken"] is False

    def test_the_jobs_read_only_the_state_url_as_their_own_account_without_its_token(self) -> None:
        """Each Job mounts the state URL's Secret key only and runs as its own ServiceAccount, token unmounted."""
        for job in _jobs(MIGRATION_JOB).values():
            spec = job["spec"]["template"]["spec"]
            assert spec["automountServiceAccountToken"] is False
            assert spec["serviceAccountName"] == f"{RELEASE}-migrate"
            secrets = [v["secret"] for v in spec["volumes"] if "secret" in v]
            assert secrets == [
                {
                    "secretName": "memgov-state",
                    "defaultMode": 0o440,
                    "items": [{"key": "url", "path": "state-url"}],
                }
            ]

    def test_an_existing_service_account_can_be_named(self) -> None:
        """serviceAccount.create=false runs the Jobs as the named account and makes none."""
        values = {
            **MIGRATION_JOB,
            "state": {
                **MIGRATION_JOB["state"],
                "migrationJob": {"serviceAccount": {"create": False, "name": "db-jobs"}},
            },
        }
        manifests = render(values)
        assert not [
            m for m in manifests if m["kind"] == "ServiceAccount" and m["metadata"]["name"].endswith("-migrate")
        ]
        assert {j["spec"]["template"]["spec"]["serviceAccountName"] for j in _jobs(values).values()} == {"db-jobs"}

    def test_the_jobs_have_their_own_affinity_and_priority(self) -> None:
        """migrationJob.affinity and priorityClassName reach both Jobs; the gateway's affinity does not."""
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
        values = {
            **MIGRATION_JOB,
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            "state": {
                **MIGRATION_JOB["state"],
                "migrationJob": {"affinity": affinity, "priorityClassName": "platform-jobs"},
            },
        }
        for job in _jobs(values).values():
            spec = job["spec"]["template"]["spec"]
            assert (spec["affinity"], spec["priorityClassName"]) == (affinity, "platform-jobs")
        assert all("affinity" not in j["spec"]["template"]["spec"] for j in _jobs(MIGRATION_JOB).values())

    def test_the_jobs_egress_reaches_dns_and_postgresql_only_and_nothing_reaches_them(self) -> None:
        """The Jobs' own NetworkPolicy, evaluated: DNS and the PostgreSQL peers are reachable from a Job pod,
        kagent's controller, the embedding provider and the Kubernetes API are not, and nothing may connect to it."""
        manifests = render(MIGRATION_JOB)
        nps = [m for m in manifests if m["kind"] == "NetworkPolicy"]
        kagent, databases, system = Namespace("kagent"), Namespace("databases"), Namespace("kube-system")
        job = _jobs(MIGRATION_JOB)[f"{RELEASE}-migrate"]
        pod = Endpoint("migrate", "10.0.0.50", kagent, job["spec"]["template"]["metadata"]["labels"])
        postgres = Endpoint("pg", "10.0.3.5", databases, cases.POSTGRES_PEER["podSelector"]["matchLabels"])
        dns = Endpoint("dns", "10.0.4.10", system, {"k8s-app": "kube-dns"})
        controller = Endpoint(
            "controller",
            "10.0.0.9",
            kagent,
            {"app.kubernetes.io/name": "kagent", "app.kubernetes.io/component": "controller"},
        )
        apiserver = Endpoint("apiserver", "10.96.0.1")
        assert egress_allows(nps, pod, postgres, 5432) and egress_allows(nps, pod, dns, 53, "UDP")
        assert not any(
            egress_allows(nps, pod, dst, port) for dst, port in ((controller, 8083), (apiserver, 443), (postgres, 80))
        )
        assert not allows(nps, controller, pod, 8080)

    def test_the_job_pods_are_not_endpoints_of_memgovs_service_nor_selected_by_its_policy(self) -> None:
        """A Job's pod carries no label memgov's Service or memgov's own NetworkPolicy selects."""
        manifests = render(MIGRATION_JOB)
        selector = find(manifests, "Service", RELEASE)["spec"]["selector"]
        memgov_policy = find(manifests, "NetworkPolicy", RELEASE)["spec"]["podSelector"]["matchLabels"]
        for job in _jobs(MIGRATION_JOB).values():
            labels = job["spec"]["template"]["metadata"]["labels"]
            assert not all(labels.get(k) == v for k, v in selector.items())
            assert not all(labels.get(k) == v for k, v in memgov_policy.items())

    def test_sidecar_mode_needs_postgresql_peers_for_the_jobs(self) -> None:
        """In sidecar mode memgov's own egress is kagent's pod's, but the Jobs' policy is the chart's: without
        PostgreSQL peers it would block the migration, so the render refuses."""
        values = {**cases.SIDECAR, "state": {"postgresql": {"existingSecret": "memgov-state"}}}
        assert "the migration Jobs' egress policy would block PostgreSQL" in render_error(values)

    def test_serve_only_checks_the_schema_the_job_migrated(self) -> None:
        assert config_file(render(MIGRATION_JOB))["state"]["auto_migrate"] is False
        # The Job is the default with PostgreSQL; without it, serve migrates as it starts (the setting's default).
        assert config_file(render(POSTGRES))["state"]["auto_migrate"] is False
        no_job = {**POSTGRES, "state": {**POSTGRES["state"], "migrationJob": {"enabled": False}}}
        assert "auto_migrate" not in config_file(render(no_job))["state"]

    @pytest.mark.parametrize("state", [PERSISTENT["state"], {"ephemeral": True}], ids=["persistent", "ephemeral"])
    def test_sqlite_migrates_as_serve_starts(self, state: dict[str, Any]) -> None:
        """A Job cannot open the pod's SQLite file: with SQLite there is no Job, and serve migrates as it starts."""
        manifests = render({"state": {**state, "migrationJob": {"enabled": True}}})
        assert not [m for m in manifests if m["kind"] == "Job"]
        assert "auto_migrate" not in config_file(manifests)["state"]
