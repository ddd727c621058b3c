"""The `helm test` hook: rendered as an agent-like pod, and its script's verdicts on real sockets."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from sidecar.dev.devstack.pg import free_port
from tests.chart import cases
from tests.chart.helm import CHART, find, render
from tests.chart.netpol import Endpoint, Namespace, allows
from tests.chart.test_networkpolicy import CONTROLLER, MEMGOV, policies
from tests.support.gateway import gateway

SCRIPT = CHART / "files" / "boundary-check.py"
KAGENT = Namespace("kagent")


def hook(values: dict[str, Any]) -> dict[str, Any]:
    """The rendered test pod."""
    return find(render(values), "Pod", "memgov-boundary-test")


class TestRender:
    @pytest.mark.parametrize(
        ("values", "args"),
        [
            (
                {"rollout": cases.ENFORCE},
                [
                    "--direct",
                    "http://kagent-controller.kagent:8083/health",
                    "--via-memgov",
                    "http://memgov.kagent:8083/health",
                    "--memgov-answers",
                    "http://memgov.kagent:8083/api/memories/",
                ],
            ),
            (
                cases.SIDECAR,
                [
                    "--via-memgov",
                    "http://kagent-controller.kagent:8083/health",
                    "--memgov-answers",
                    "http://kagent-controller.kagent:8083/api/memories/",
                ],
            ),
            (
                {"rollout": cases.ENFORCE, "kagent": {"controller": {"name": "platform-kagent-controller"}}},
                [
                    "--direct",
                    "http://platform-kagent-controller.kagent:8083/health",
                    "--via-memgov",
                    "http://memgov.kagent:8083/health",
                    "--memgov-answers",
                    "http://memgov.kagent:8083/api/memories/",
                ],
            ),
        ],
        ids=["gateway", "sidecar", "renamed-kagent"],
    )
    def test_hook_checks_both_ways(self, values: dict[str, Any], args: list[str]) -> None:
        """The hook is a helm test that runs the chart's script with the controller and memgov URLs of its mode
        (kagent's Service as kagent.controller.name names it), and a path only memgov answers."""
        pod = hook(values)
        assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
        assert pod["spec"]["containers"][0]["command"] == ["python3", "/etc/memgov-test/boundary-check.py", *args]
        script = find(render(values), "ConfigMap", "memgov-boundary-test")["data"]["boundary-check.py"]
        assert script == SCRIPT.read_text()

    def test_hook_is_an_agent_to_the_policies(self) -> None:
        """The pod is let in to memgov as an agent, is not memgov, and so may not reach the controller."""
        values = {"rollout": cases.ENFORCE}
        pod = Endpoint("hook", "10.0.0.99", KAGENT, hook(values)["metadata"]["labels"])
        nps = policies(values)
        assert allows(nps, pod, MEMGOV, 8080)
        assert not allows(nps, pod, CONTROLLER, 8083)

    def test_no_hook_before_enforce(self) -> None:
        """In the prepare stage the controller is open by design, so there is no test to fail."""
        assert not [m for m in render({}) if m["kind"] == "Pod"]


@pytest.fixture
async def healthy() -> AsyncIterator[str]:
    """A loopback server standing in for kagent: /health answers 200, anything else 503."""
    app = web.Application()

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=503)

    app.router.add_get("/health", ok)
    app.router.add_get("/broken", broken)
    # What kagent's router does with a path it has no route for, whatever the path.
    app.router.add_route("*", "/{tail:.*}", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def check(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the hook's script as the pod does."""
    cmd = [sys.executable, str(SCRIPT), "--timeout", "2", *args]
    return await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60, check=False)


def closed_port() -> int:
    """A loopback port of this worker's slice that nobody listens on, so connecting is refused."""
    return free_port()


class TestScript:
    async def test_blocked_controller_and_healthy_memgov_pass(self, healthy: str) -> None:
        """No connection to the controller and a 2xx through memgov: exit 0, one PASS line each."""
        proc = await check("--direct", f"http://127.0.0.1:{closed_port()}/health", "--via-memgov", f"{healthy}/health")
        assert proc.returncode == 0, proc.stdout
        lines = proc.stdout.splitlines()
        assert [line.split()[0:2] for line in lines] == [["PASS", "direct"], ["PASS", "via"]]

    async def test_reachable_controller_fails(self, healthy: str) -> None:
        """If the controller answers at all, even with an error status, memgov can be bypassed: exit 1."""
        proc = await check("--direct", f"{healthy}/broken", "--via-memgov", f"{healthy}/health")
        assert proc.returncode == 1
        assert "FAIL direct" in proc.stdout and "memgov can be bypassed" in proc.stdout

    async def test_unhealthy_memgov_fails(self, healthy: str) -> None:
        """A non-2xx or no answer through memgov fails with a line saying which."""
        proc = await check("--via-memgov", f"{healthy}/broken", "--via-memgov", f"http://127.0.0.1:{closed_port()}/")
        assert proc.returncode == 1
        assert "HTTP 503" in proc.stdout and "no connection" in proc.stdout

    async def test_unresolvable_direct_name_proves_nothing(self) -> None:
        """A controller name that does not resolve is not a pass: exit 2, UNSURE."""
        proc = await check("--direct", "http://kagent-controller.invalid:8083/health")
        assert proc.returncode == 2 and proc.stdout.startswith("UNSURE direct")

    async def test_failure_wins_over_unsure(self, healthy: str) -> None:
        """One failed check makes the run fail even when another could not be made."""
        proc = await check("--direct", "http://kagent-controller.invalid:8083/", "--direct", f"{healthy}/health")
        assert proc.returncode == 1


class TestMemgovAnswers:
    async def test_memgovs_own_refusal_proves_memgov_answered(self, healthy: str) -> None:
        """A real gateway in front of the kagent stand-in: /health comes from kagent through it, and the refused
        memory path comes back with memgov's own body, so the check passes (exit 0)."""
        async with gateway(healthy) as gw:
            url = gw.data_url.rstrip("/")
            proc = await check("--via-memgov", f"{url}/health", "--memgov-answers", f"{url}/api/memories/")
        assert proc.returncode == 0, proc.stdout
        assert proc.stdout.splitlines()[1].startswith("PASS memgov answers")

    async def test_kagent_answering_instead_of_memgov_fails(self, healthy: str) -> None:
        """Where kagent answers in memgov's place (in sidecar mode: the patch not applied, the Service on the
        controller), /health still passes but the memgov check fails (exit 1): the test no longer proves nothing."""
        proc = await check("--via-memgov", f"{healthy}/health", "--memgov-answers", f"{healthy}/api/memories/")
        assert proc.returncode == 1
        assert "FAIL memgov answers" in proc.stdout and "something else answered" in proc.stdout
