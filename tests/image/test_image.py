"""The container image: linted, shaped as the chart expects, and memgov running from its filesystem.

The image is the one `make image-ci` builds from the Containerfile (scripts/image-ci.sh): the same
recipe on stand-in bases, since registries are out of reach here. memgov is started from the
unpacked filesystem as a runtime would start it: the image's user, environment and working
directory, a read-only root, and the chart's command and mounts.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sidecar.dev.devstack.pg import free_port
from sidecar.dev.devstack.stack import start_devstack
from sidecar.policy.pack import read_pack
from tests.chart import cases
from tests.chart.helm import CHART, find, pod_spec, render
from tests.image.rootfs import Image, executables, launch_argv, unpack
from tests.support.smoke import production_config, serving, smoke, url, wait_ready

REPO = Path(__file__).resolve().parents[2]
ARCHIVE = REPO / ".tools" / "image" / "memgov-ci.tar"
CONTAINERFILE = REPO / "Containerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"
# What must not be in the image at run time: shells, package managers, pip, compilers and build tools.
FORBIDDEN = {
    "sh",
    "bash",
    "dash",
    "ash",
    "zsh",
    "busybox",
    "apt",
    "apt-get",
    "dpkg",
    "pip",
    "pip3",
    "gcc",
    "cc",
    "make",
    "ld",
    "tar",
    "curl",
    "wget",
}


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    """The CI image, unpacked."""
    assert ARCHIVE.exists(), f"{ARCHIVE} is missing: run `make image-ci` (scripts/image-ci.sh)"
    yield unpack(ARCHIVE, tmp_path_factory.mktemp("image"))


class TestContainerfile:
    def test_hadolint_passes(self) -> None:
        """hadolint finds nothing in the Containerfile."""
        proc = subprocess.run(
            [str(HADOLINT), str(CONTAINERFILE)], capture_output=True, text=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def test_hadolint_catches_a_bad_recipe(self, tmp_path: Path) -> None:
        """The same lint fails a recipe that runs as root from an unpinned base, so it is really checking."""
        bad = tmp_path / "Containerfile"
        bad.write_text("FROM debian\nRUN apt-get install -y python3\n")
        assert subprocess.run([str(HADOLINT), str(bad)], capture_output=True, timeout=60, check=False).returncode

    def test_bases_are_pinned_by_digest(self) -> None:
        """Both default bases name a sha256 digest."""
        defaults = [
            line.split("=", 1)[1]
            for line in CONTAINERFILE.read_text().splitlines()
            if line.startswith("ARG ") and "_BASE=" in line
        ]
        assert len(defaults) == 2
        assert all("@sha256:" in base and len(base.rsplit(":", 1)[1]) == 64 for base in defaults)


class TestImageShape:
    def test_runs_as_the_charts_numeric_non_root_user(self, image: Image) -> None:
        """The image's user is numeric, not root, and the one the chart's security context names."""
        uid, gid = image.user
        assert uid != 0 and gid != 0 and image.config["User"] == f"{uid}:{gid}"
        for values in (cases.GATEWAY_DEFAULT, cases.SIDECAR):
            for container in pod_spec(render(values))["containers"][:1]:
                sc = container["securityContext"]
                assert (sc["runAsUser"], sc["runAsGroup"], sc["runAsNonRoot"]) == (uid, gid, True)

    def test_read_only_root_needs_only_the_charts_writable_mounts(self, image: Image) -> None:
        """memgov writes only to /tmp (working directory) and /var/lib/memgov, both volumes in the chart."""
        assert image.config["WorkingDir"] == "/tmp"
        memgov = pod_spec(render(cases.GATEWAY_DEFAULT))["containers"][0]
        assert memgov["securityContext"]["readOnlyRootFilesystem"] is True
        writable = {m["mountPath"] for m in memgov["volumeMounts"] if not m.get("readOnly")}
        assert writable == {"/tmp", "/var/lib/memgov"}

    def test_no_shell_or_build_tools(self, image: Image) -> None:
        """No shell, package manager, pip, compiler or archiver is left for run time."""
        assert executables(image.root) & FORBIDDEN == set()
        assert not list((image.root / "opt" / "memgov").rglob("pip"))

    def test_dev_tooling_is_left_out(self, image: Image) -> None:
        """The runtime ships without the dev tooling: no sidecar/dev in the image's environment."""
        packages = list((image.root / "opt" / "memgov").rglob("sidecar"))
        assert packages and all((p / "server.py").is_file() for p in packages)
        assert not [p for p in packages if (p / "dev").exists()]

    def test_the_charts_command_is_the_images_program(self, image: Image) -> None:
        """`memgov` (the chart's command) resolves on the image's PATH to memgov's entry point."""
        command = pod_spec(render(cases.GATEWAY_DEFAULT))["containers"][0]["command"][0]
        assert image.config["Entrypoint"] == [command]
        found = [d for d in image.env["PATH"].split(":") if (image.root / d.lstrip("/") / command).is_file()]
        assert found == ["/opt/memgov/bin"]


class TestRunsFromTheImage:
    async def test_smoke(self, image: Image, tmp_path: Path) -> None:
        """memgov from the image's filesystem: ready on its own pack, one governed decision, one passthrough."""
        uid, gid = image.user
        etc, state = tmp_path / "etc", tmp_path / "state"
        etc.mkdir()
        state.mkdir()
        os.chown(state, uid, gid)
        dev = await start_devstack()
        try:
            config = production_config(
                etc,
                dev.kagent_url,
                state={"url": "sqlite:////var/lib/memgov/state.db"},
                secrets={"session_key_file": "/etc/memgov/session.key"},
            )
            (etc / "session.key").chmod(0o644)
            (etc / "config.yaml").write_text(yaml.safe_dump(config))
            command = pod_spec(render(cases.GATEWAY_DEFAULT))["containers"][0]["command"]
            argv = launch_argv(
                image, command, {"/etc/memgov": (etc, False), "/var/lib/memgov": (state, True)}, sys.executable
            )
            log = tmp_path / "memgov.log"
            with serving(argv, log=log) as proc:
                ready = await wait_ready(proc, url(config, "ops"), log)
                await smoke(url(config, "data"), url(config, "ops"), "cedar")
        finally:
            await dev.stop()
        assert ready["checks"]["policy"]["revision"] == read_pack(REPO / "policies").revision
        assert (state / "state.db").exists()

    async def test_helm_test_script_runs_on_the_image(self, image: Image, tmp_path: Path) -> None:
        """The `helm test` pod's command runs on the image: no answer directly, 2xx through the relay."""
        pod = find(render({"rollout": cases.ENFORCE}), "Pod", "memgov-boundary-test")
        command = pod["spec"]["containers"][0]["command"][:2]
        mount = pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
        scripts = tmp_path / "check"
        scripts.mkdir()
        (scripts / "boundary-check.py").write_text((CHART / "files" / "boundary-check.py").read_text())
        dev = await start_devstack()
        try:
            checks = ["--direct", f"http://127.0.0.1:{free_port()}/health", "--via-memgov", f"{dev.kagent_url}/health"]
            argv = launch_argv(image, [*command, *checks], {mount: (scripts, False)}, sys.executable)
            proc = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=120)
        finally:
            await dev.stop()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert [line.split()[:2] for line in proc.stdout.splitlines()] == [["PASS", "direct"], ["PASS", "via"]]
