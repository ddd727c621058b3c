"""docs/deploy.md's "Upgrade and rollback", command by command, on the real API server with helm and PostgreSQL.

The last released chart (tests/chart/fixtures) is installed and upgraded to this checkout with the command the
page gives, then rolled back. The hook Jobs' commands run for real against PostgreSQL (tests/chart/jobs.py),
so the migration and the schema check decide what helm does: a rollback whose binary runs on the schema goes
through, one it cannot follow is stopped before anything changes, and the documented backup and restore let
it through. Each documented command is run as written, with the test's namespace for `kagent`; the kubectl
commands run as the API requests kubectl makes, and reading a Job's logs as the Job's command's own output.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from pathlib import Path
from typing import Any

import yaml

from sidecar.dev.devstack.pg import bin_dir
from sidecar.state.migrations import LATEST
from tests.chart import cases
from tests.chart.helm import CHART, REPO, previous_chart, previous_chart_file
from tests.chart.jobs import JobController, items, run_container
from tests.chart.test_install import _kagent_controller
from tests.support.kube import KubeApi, pod_from
from tests.support.pg import PgServer
from tests.support.state import migrate_as, next_release

DEPLOY = REPO / "docs" / "deploy.md"
SECTION = re.compile(r"^## Upgrade and rollback\n(.*?)^## ", re.MULTILINE | re.DOTALL)
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
CURRENT = yaml.safe_load((REPO / "charts" / "memgov" / "Chart.yaml").read_text())["version"]
PREVIOUS = yaml.safe_load(previous_chart_file("Chart.yaml"))["version"]
_names = itertools.count(1)

GET_PATCH = (
    "kubectl -n kagent get configmap memgov-kagent -o jsonpath='{.data.controller-patch\\.yaml}'"
    " > memgov-controller-patch.yaml"
)
APPLY_PATCH = "kubectl -n kagent patch deployment kagent-controller --patch-file memgov-controller-patch.yaml"
LIST_CONTAINERS = (
    "kubectl -n kagent get deployment kagent-controller -o jsonpath='{.spec.template.spec.containers[*].name}'"
)

#: Every command of the section, and the test that runs it.
COMMANDS = {
    'pg_dump --format=custom --file=memgov-state.dump "$MEMGOV_STATE_URL"': "TestRollbackGuard",
    "helm upgrade memgov charts/memgov -n kagent --reset-then-reuse-values": "TestUpgradeFromTheLastRelease",
    "kubectl -n kagent logs job/memgov-migrate": "TestMigrationHook",
    "helm history memgov -n kagent": "TestUpgradeFromTheLastRelease",
    "helm rollback memgov <revision> -n kagent": "TestRollbackGuard",
    "kubectl -n kagent logs job/memgov-schema-check": "TestRollbackGuard",
    'pg_restore --clean --if-exists --dbname="$MEMGOV_STATE_URL" memgov-state.dump': "TestRollbackGuard",
    GET_PATCH: "TestSidecarRollback",
    APPLY_PATCH: "TestSidecarRollback",
    LIST_CONTAINERS: "TestSidecarRollback",
    "helm upgrade memgov charts/memgov -n kagent --reset-then-reuse-values --set rollout.stage=prepare": (
        "TestTakingMemgovOut"
    ),
    "helm uninstall memgov -n kagent": "TestTakingMemgovOut",
}


def documented() -> list[str]:
    """Every command line in the section's sh blocks, as written."""
    section = SECTION.search(DEPLOY.read_text())
    assert section, "docs/deploy.md has no Upgrade and rollback section"
    return [line for block in SH_BLOCK.findall(section.group(1)) for line in block.splitlines() if line.strip()]


def doc(command: str) -> str:
    """The documented command, checked to be in the section word for word."""
    assert command in documented(), f"not in docs/deploy.md: {command}"
    return command


def run(
    kube: KubeApi,
    command: str,
    namespace: str,
    *,
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    revision: int | None = None,
) -> Any:
    """Run a documented command as written, in the test's namespace (and with the revision chosen)."""
    line = doc(command).replace(" -n kagent", f" -n {namespace}")
    if revision is not None:
        line = line.replace("<revision>", str(revision))
    return kube.shell(line, cwd=cwd, env=env)


def ok(proc: Any) -> str:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return str(proc.stdout)


def namespace(kube: KubeApi, hint: str, state_url: str | None = None) -> str:
    """A restricted namespace with memgov's session key and, given a URL, its state Secret."""
    name = f"{hint}-{next(_names)}"
    kube.create_namespace(name)
    secrets = {"memgov-session-key": {"session-key": "k" * 64}}
    if state_url is not None:
        secrets["memgov-state"] = {"url": state_url}
    for secret, data in secrets.items():
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": name}}
        kube.create({**body, "stringData": data}).ok()
    return name


def my_values(folder: Path, namespace: str, **extra: Any) -> Path:
    """The operator's values file: PostgreSQL state (the hooks' case), two replicas, kagent's namespace."""
    values = {
        "replicaCount": 2,
        "state": {"postgresql": {"existingSecret": "memgov-state"}},
        "networkPolicy": {"postgresql": {"to": [cases.POSTGRES_PEER]}},
        "kagent": {"namespace": namespace},
        **extra,
    }
    path = folder / "my-values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def history(kube: KubeApi, ns: str) -> list[dict[str, Any]]:
    return list(json.loads(ok(kube.helm("history", "memgov", "-n", ns, "-o", "json"))))


def deployment(kube: KubeApi, ns: str, name: str = "memgov") -> dict[str, Any]:
    return dict(kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}").ok())


def image(kube: KubeApi, ns: str) -> str:
    return str(deployment(kube, ns)["spec"]["template"]["spec"]["containers"][0]["image"])


def json_lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


class TestDocumentedCommands:
    def test_every_command_of_the_section_has_its_test(self) -> None:
        """The upgrade and rollback section's commands are exactly the ones this module runs, each by a test here."""
        assert sorted(documented()) == sorted(COMMANDS)
        assert set(COMMANDS.values()) <= set(globals())


class TestUpgradeFromTheLastRelease:
    def test_the_documented_upgrade_from_the_last_release_then_rollback(
        self, kube: KubeApi, pg_url: str, tmp_path: Path
    ) -> None:
        """The last released chart, installed with an operator's values file, upgrades to this chart with the
        documented command: the new release's migration Job runs first (its ServiceAccount and egress policy in
        place before it), the operator's values stay and the new defaults arrive, the image is the new version,
        `helm history` names both charts; then the rollback to the first revision restores its image."""
        ns = namespace(kube, "upgrade", pg_url)
        values = my_values(tmp_path, ns)
        with JobController(kube, ns, runner=run_container) as jobs:
            ok(kube.helm("install", "memgov", str(previous_chart()), "-n", ns, "-f", str(values)))
            assert image(kube, ns).endswith(f":{PREVIOUS}")
            ok(run(kube, "helm upgrade memgov charts/memgov -n kagent --reset-then-reuse-values", ns))
            listed = ok(run(kube, "helm history memgov -n kagent", ns))
            ok(run(kube, "helm rollback memgov <revision> -n kagent", ns, revision=1))
        assert jobs.refused == []
        migrations = [r for r in jobs.runs if r.name == "memgov-migrate"]
        assert [(r.exit_code, r.image.rsplit(":", 1)[1]) for r in migrations] == [(0, PREVIOUS), (0, CURRENT)]
        assert {"ServiceAccount/memgov-migrate", "NetworkPolicy/memgov-migrate"} <= migrations[1].existing
        # The released chart has no pre-rollback hook: rolling back to it runs no check.
        assert [r.name for r in jobs.runs] == ["memgov-migrate", "memgov-migrate"]
        assert f"memgov-{PREVIOUS}" in listed and f"memgov-{CURRENT}" in listed
        revisions = history(kube, ns)
        assert [(h["chart"], h["app_version"]) for h in revisions] == [
            (f"memgov-{PREVIOUS}", PREVIOUS),
            (f"memgov-{CURRENT}", CURRENT),
            (f"memgov-{PREVIOUS}", PREVIOUS),
        ]
        assert revisions[-1]["status"] == "deployed" and image(kube, ns).endswith(f":{PREVIOUS}")

    def test_the_upgrade_keeps_the_operators_values_and_takes_the_new_defaults(
        self, kube: KubeApi, pg_url: str, tmp_path: Path
    ) -> None:
        """After the documented upgrade the release holds the operator's values and this chart's new defaults, its
        Deployment runs the new image with the operator's replica count, and its pods are admitted."""
        ns = namespace(kube, "upgrade-values", pg_url)
        with JobController(kube, ns, runner=run_container) as jobs:
            ok(kube.helm("install", "memgov", str(previous_chart()), "-n", ns, "-f", str(my_values(tmp_path, ns))))
            ok(run(kube, "helm upgrade memgov charts/memgov -n kagent --reset-then-reuse-values", ns))
        assert jobs.refused == []
        released = json.loads(ok(kube.helm("get", "values", "memgov", "-n", ns, "--all", "-o", "json")))
        assert released["replicaCount"] == 2 and released["state"]["postgresql"]["existingSecret"] == "memgov-state"
        assert released["kagent"]["controller"]["name"] == "kagent-controller"
        assert released["state"]["migrationJob"]["serviceAccount"]["create"] is True
        gateway = deployment(kube, ns)
        assert gateway["spec"]["replicas"] == 2 and image(kube, ns).endswith(f":{CURRENT}")
        reply = kube.create(pod_from(gateway, ns), dry_run=True)
        assert reply.status == 201 and reply.warnings == [], reply.body.get("message")

    def test_reuse_values_from_the_last_release_is_refused_by_name(
        self, kube: KubeApi, pg_url: str, tmp_path: Path
    ) -> None:
        """`--reuse-values` (the command earlier docs gave) keeps the released chart's values: the upgrade is refused
        with the values that are missing and the flag to use, and the release stays as it was."""
        ns = namespace(kube, "reuse", pg_url)
        with JobController(kube, ns, runner=run_container):
            ok(kube.helm("install", "memgov", str(previous_chart()), "-n", ns, "-f", str(my_values(tmp_path, ns))))
            proc = kube.shell(f"helm upgrade memgov charts/memgov -n {ns} --reuse-values", cwd=REPO)
        assert proc.returncode != 0
        assert "kagent.controller.name (new in 0.2.0)" in proc.stderr and "--reset-then-reuse-values" in proc.stderr
        assert [h["status"] for h in history(kube, ns)] == ["deployed"]


class TestMigrationHook:
    def test_a_refused_migration_fails_the_upgrade_and_its_log_says_why(
        self, kube: KubeApi, pg_server: PgServer, pg_url: str, tmp_path: Path
    ) -> None:
        """The upgrade moves the state to a database whose role may not create tables: the pre-upgrade Job exits 4,
        helm fails the upgrade and leaves the running Deployment as it was, and the Job's log (its command's output,
        in place of `kubectl logs`) names the migration and the SQLSTATE."""
        role, database = f"memgov_no_ddl_{next(_names)}", f"no_ddl_{next(_names)}"
        pg_server.psql(f"CREATE ROLE {role} LOGIN")
        pg_server.create_database(database)
        ns = namespace(kube, "migrate-refused", pg_url)
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "memgov-state-moved", "namespace": ns}}
        kube.create({**secret, "stringData": {"url": pg_server.url(database, role)}}).ok()
        with JobController(kube, ns, runner=run_container) as jobs:
            ok(kube.helm("install", "memgov", str(CHART), "-n", ns, "-f", str(my_values(tmp_path, ns))))
            before = deployment(kube, ns)
            upgrade = doc("helm upgrade memgov charts/memgov -n kagent --reset-then-reuse-values")
            moving = f"{upgrade} --set state.postgresql.existingSecret=memgov-state-moved --set replicaCount=3"
            proc = kube.shell(moving.replace(" -n kagent", f" -n {ns}") + " --timeout 60s", cwd=REPO)
        assert proc.returncode != 0
        failed = jobs.runs[-1]
        assert (failed.name, failed.exit_code) == ("memgov-migrate", 4)
        doc("kubectl -n kagent logs job/memgov-migrate")
        (line,) = [x for x in json_lines(failed.output) if x["level"] == "error"]
        assert (line["event"], line["migration"], line["error_code"]) == ("state.migration_failed", 0, "42501")
        after = deployment(kube, ns)
        assert after["spec"] == before["spec"] and after["spec"]["replicas"] == 2
        # The failed Job stays for `kubectl logs` (hook-succeeded deletes only a Job that succeeded).
        assert [j["metadata"]["name"] for j in items(kube, f"/apis/batch/v1/namespaces/{ns}/jobs")] == [
            "memgov-migrate"
        ]


class TestRollbackGuard:
    def _two_revisions(self, kube: KubeApi, ns: str, tmp_path: Path, jobs: JobController) -> None:
        """Revision 1 runs this chart's image; revision 2 the next release's (image.tag 9.9.9)."""
        values = my_values(tmp_path, ns)
        ok(kube.helm("install", "memgov", str(CHART), "-n", ns, "-f", str(values)))
        ok(kube.helm("upgrade", "memgov", str(CHART), "-n", ns, "-f", str(values), "--set", "image.tag=9.9.9"))
        assert image(kube, ns).endswith(":9.9.9") and jobs.refused == []

    def test_a_rollback_whose_binary_runs_on_the_newer_schema_goes_through(
        self, kube: KubeApi, pg_url: str, tmp_path: Path
    ) -> None:
        """The next release added a migration that names this one compatible: the pre-rollback Job (revision 1's
        image, `memgov state check`, after its ServiceAccount and egress policy) exits 0 and the rollback rolls."""
        ns = namespace(kube, "rollback-ok", pg_url)
        with JobController(kube, ns, runner=run_container) as jobs:
            self._two_revisions(kube, ns, tmp_path, jobs)
            assert asyncio.run(migrate_as(pg_url, next_release(compatible_from=LATEST))) == 1
            ok(run(kube, "helm rollback memgov <revision> -n kagent", ns, revision=1))
        check = jobs.runs[-1]
        assert (check.name, check.hook, check.command) == (
            "memgov-schema-check",
            "pre-rollback",
            ["memgov", "state", "check"],
        )
        assert check.image.endswith(f":{CURRENT}") and check.exit_code == 0
        assert {"ServiceAccount/memgov-migrate", "NetworkPolicy/memgov-migrate"} <= check.existing
        events = [x["event"] for x in json_lines(check.output)]
        assert events == ["state.schema_newer", "state.schema_compatible"]
        assert image(kube, ns).endswith(f":{CURRENT}") and history(kube, ns)[-1]["status"] == "deployed"

    def test_a_rollback_the_schema_has_outgrown_is_stopped_until_the_backup_is_restored(
        self, kube: KubeApi, pg_url: str, tmp_path: Path
    ) -> None:
        """Backed up as documented, then migrated by the next release in a way revision 1 cannot follow: its
        schema check exits 3 and names both versions, helm stops the rollback, no object changes and the attempt
        stays pending-rollback (an upgrade is refused meanwhile); after the documented restore the same rollback
        goes through."""
        ns = namespace(kube, "rollback-stopped", pg_url)
        env = {"MEMGOV_STATE_URL": pg_url, "PATH": f"{bin_dir()}:{kube.env()['PATH']}"}
        with JobController(kube, ns, runner=run_container) as jobs:
            self._two_revisions(kube, ns, tmp_path, jobs)
            ok(
                run(
                    kube,
                    'pg_dump --format=custom --file=memgov-state.dump "$MEMGOV_STATE_URL"',
                    ns,
                    cwd=tmp_path,
                    env=env,
                )
            )
            assert asyncio.run(migrate_as(pg_url, next_release(compatible_from=None))) == 1
            before = deployment(kube, ns)
            refused = run(kube, "helm rollback memgov <revision> -n kagent", ns, revision=1)
            stopped = jobs.runs[-1]
            after = deployment(kube, ns)
            pending = history(kube, ns)[-1]["status"]
            blocked = kube.helm("upgrade", "memgov", str(CHART), "-n", ns, "--reset-then-reuse-values")
            restore = 'pg_restore --clean --if-exists --dbname="$MEMGOV_STATE_URL" memgov-state.dump'
            ok(run(kube, restore, ns, cwd=tmp_path, env=env))
            ok(run(kube, "helm rollback memgov <revision> -n kagent", ns, revision=1))
        assert refused.returncode != 0
        assert (stopped.name, stopped.exit_code) == ("memgov-schema-check", 3)
        doc("kubectl -n kagent logs job/memgov-schema-check")
        (line,) = [x for x in json_lines(stopped.output) if x["level"] == "error"]
        assert (line["event"], line["schema_version"], line["supported"]) == (
            "state.schema_unknown",
            LATEST + 1,
            LATEST,
        )
        assert after["spec"] == before["spec"] and after["metadata"]["generation"] == before["metadata"]["generation"]
        # The stopped attempt stays pending: helm refuses an upgrade until a rollback goes through.
        assert pending == "pending-rollback"
        assert blocked.returncode != 0 and "another operation" in blocked.stderr
        passed = jobs.runs[-1]
        assert (passed.name, passed.exit_code) == ("memgov-schema-check", 0)
        assert image(kube, ns).endswith(f":{CURRENT}") and history(kube, ns)[-1]["status"] == "deployed"


class TestSidecarRollback:
    def test_reapplying_the_rolled_back_patch_restores_kagents_controller(self, kube: KubeApi, tmp_path: Path) -> None:
        """Sidecar mode: kagent's own controller Deployment patched with revision 2's patch (another config and the
        in-pod OPA); after the documented rollback, the rolled-back ConfigMap's patch, applied as documented, puts
        revision 1's config back in kagent's pod and takes the OPA container away again."""
        ns = namespace(kube, "sidecar-rollback")
        values = {
            "mode": "sidecar",
            "rollout": cases.ENFORCE,
            "state": {"ephemeral": True},
            "kagent": {"namespace": ns},
        }
        path = tmp_path / "values.json"
        path.write_text(json.dumps(values))
        ok(kube.helm("install", "memgov", str(CHART), "-n", ns, "-f", str(path)))
        files = kube.get(f"/api/v1/namespaces/{ns}/configmaps/memgov-kagent").ok()["data"]
        kube.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kagent-controller", "namespace": ns}}
        ).ok()
        kube.create(_kagent_controller(kube, ns, yaml.safe_load(files["kagent-values.yaml"]))).ok()

        def reapply() -> list[str]:
            doc(GET_PATCH)  # GET the ConfigMap, write the key to the file
            data = kube.get(f"/api/v1/namespaces/{ns}/configmaps/memgov-kagent").ok()["data"]
            (tmp_path / "memgov-controller-patch.yaml").write_text(data["controller-patch.yaml"])
            doc(APPLY_PATCH)  # kubectl sends the YAML file as a strategic-merge patch
            patch = yaml.safe_load((tmp_path / "memgov-controller-patch.yaml").read_text())
            kube.request(
                "PATCH",
                f"/apis/apps/v1/namespaces/{ns}/deployments/kagent-controller",
                patch,
                content_type="application/strategic-merge-patch+json",
            ).ok()
            doc(LIST_CONTAINERS)  # GET the Deployment, the containers' names
            return [
                c["name"] for c in deployment(kube, ns, "kagent-controller")["spec"]["template"]["spec"]["containers"]
            ]

        assert reapply() == ["memgov", "controller"]
        first = deployment(kube, ns, "kagent-controller")["spec"]["template"]["metadata"]["annotations"]
        opa = ("--set", "policy.engine=opa", "--set", "policy.opa.container.enabled=true")
        ok(kube.helm("upgrade", "memgov", str(CHART), "-n", ns, "-f", str(path), "--set", "log.level=debug", *opa))
        assert reapply() == ["memgov", "opa", "controller"]
        second = deployment(kube, ns, "kagent-controller")["spec"]["template"]["metadata"]["annotations"]
        assert second["memgov/checksum-config"] != first["memgov/checksum-config"]
        ok(run(kube, "helm rollback memgov <revision> -n kagent", ns, revision=1))
        assert reapply() == ["memgov", "controller"]
        back = deployment(kube, ns, "kagent-controller")["spec"]["template"]["metadata"]["annotations"]
        assert back["memgov/checksum-config"] == first["memgov/checksum-config"]


class TestTakingMemgovOut:
    def test_back_to_prepare_then_uninstall(self, kube: KubeApi, tmp_path: Path) -> None:
        """From enforce, the documented upgrade back to prepare removes the policies on kagent's pods and the
        admission policy (agents may reach the controller again); the documented uninstall removes the rest."""
        ns = namespace(kube, "take-out")
        path = tmp_path / "values.json"
        path.write_text(
            json.dumps({"state": {"ephemeral": True}, "kagent": {"namespace": ns}, "rollout": cases.ENFORCE})
        )
        ok(kube.helm("install", "memgov", str(CHART), "-n", ns, "-f", str(path)))
        policies = f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
        assert {p["metadata"]["name"] for p in items(kube, policies)} == {"memgov", "memgov-kagent-controller"}
        prepare = "helm upgrade memgov charts/memgov -n kagent --reset-then-reuse-values --set rollout.stage=prepare"
        ok(run(kube, prepare, ns))
        assert {p["metadata"]["name"] for p in items(kube, policies)} == {"memgov"}
        bindings = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
        assert not [b for b in items(kube, bindings) if b["metadata"]["name"].startswith(f"memgov-{ns}")]
        ok(run(kube, "helm uninstall memgov -n kagent", ns))
        assert items(kube, policies) == []
        assert items(kube, f"/apis/apps/v1/namespaces/{ns}/deployments") == []
