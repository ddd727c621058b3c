"""`memgov drill` proves every acceptance property, writes a content-free bundle, and notices a leaky target."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sidecar.cli import build_parser
from sidecar.dev.devstack.clock import DevClock
from sidecar.dev.drill_devstack import AGENTS, CAP, EMBEDDING_MODEL, devstack_target
from sidecar.drill.bundle import report_json
from sidecar.drill.cli import deployment_target
from sidecar.drill.runner import CHECKS, Report, run_drill
from sidecar.drill.sentinels import find_leaks
from tests.chart.helm import config_file, render
from tests.support.harness import install_role, role_url
from tests.support.upstream import Upstream, sa_token, start_stack

EXACT = [c for c in CHECKS if c.id == "exact_one_entry_erase"]


def chart_default_agents() -> dict:
    """The drill agents' settings as the chart renders them with nothing about their models: rotation on,
    and the model left to what each Agent's definition in kagent declares."""
    values = {
        "upstream": {"embeddingUrl": "https://embeddings.example.org/v1"},
        "networkPolicy": {"embedding": {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]}},
        "agents": {ref: {"disabledVariant": ref.split("/")[1] + "-nomem", "ghost": ghost} for ref, ghost in AGENTS},
    }
    return config_file(render(values))["agents"]


def declared_agents() -> dict:
    """The drill agents' settings as the chart renders them: its defaults, rotation on (an embedding provider),
    and each Agent's memory ModelConfig declared the way kagent declares it."""
    values = {
        "upstream": {"embeddingUrl": "https://embeddings.example.org/v1"},
        "networkPolicy": {"embedding": {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]}},
        "agents": {
            ref: {"disabledVariant": ref.split("/")[1] + "-nomem", "ghost": ghost, "memory": {"modelConfig": "embed"}}
            for ref, ghost in AGENTS
        },
        "modelConfigs": {"drill/embed": {"provider": "OpenAI", "model": EMBEDDING_MODEL}},
    }
    return config_file(render(values))["agents"]


def _bundle(folder: Path) -> tuple[dict, str]:
    return json.loads((folder / "drill.json").read_text()), (folder / "SUMMARY.md").read_text()


class TestDrillDevstack:
    async def test_every_check_passes_and_bundle_is_content_free(self, memgov, planted, tmp_path):
        """`memgov drill --devstack` passes all twelve checks and its bundle carries no planted sentinel."""
        code, out, _ = await memgov("drill", "--devstack", "--output", str(tmp_path / "bundle"))
        doc, summary = _bundle(tmp_path / "bundle")
        assert code == 0, [c for c in doc["checks"] if not c["passed"]]
        assert [c["id"] for c in doc["checks"]] == [c.id for c in CHECKS]
        assert all(c["passed"] for c in doc["checks"]) and doc["result"]["passed"] is True
        assert doc["versions"]["kagent"] == "v0.9.11" and doc["versions"]["policy_revision"]
        assert doc["cleanup"]["complete"] is True
        assert "# memgov drill: PASSED" in summary and "| 12 | Sentinel absence" in summary
        assert "12 passed, 0 failed, 0 not provable" in out
        assert len(planted) > 20
        assert not [s for s in planted if find_leaks(s, [json.dumps(doc), summary])]

    async def test_bypass_to_kagent_finds_no_namespace(self, planted, tmp_path):
        """A client that reaches kagent around memgov cannot name another user's namespace: what it can derive
        from a session key, or guess in the real key shape, finds nothing; the drill notes the reachability."""
        async with devstack_target() as (target, local):
            leaky = dataclasses.replace(target, kagent_url=local.dev.kagent_url)
            report = await run_drill(
                leaky, local=local, clock=local.clock, checks=[c for c in CHECKS if c.id == "no_cross_user_reuse"]
            )
        (check,) = report.checks
        assert check.passed and check.evidence["bypass"] == {"reachable": True, "entries_seen": 0}
        assert any("around memgov" in note for note in check.notes)

    async def test_exact_erase_names_a_missing_model_as_its_cause(self, tmp_path):
        """With rotation on and no model configured for the agent, the exact-erase check fails naming that cause."""
        bare = {ref: {"disabled_variant": ref.split("/")[1] + "-nomem", "ghost": ghost} for ref, ghost in AGENTS}
        async with devstack_target(agents=bare) as (target, local):
            report = await run_drill(target, local=local, clock=local.clock, checks=EXACT)
        (check,) = report.checks
        assert check.outcome == "failed" and check.evidence["failed_expectation"] == "embedding_model_not_configured"
        assert check.evidence["agent"] in dict(AGENTS)
        assert any("memory.modelConfig" in note for note in check.notes)

    async def test_cap_beyond_the_hourly_budget_is_not_provable(self, tmp_path):
        """When the budget cannot fill a scope to its cap the check says so instead of passing (exit 3)."""
        cap_check = [c for c in CHECKS if c.id == "cap_refusal"]
        async with devstack_target() as (target, local):
            tight = dataclasses.replace(target, limits=target.limits.model_copy(update={"hourly_operations": 10}))
            report = await run_drill(tight, local=local, clock=local.clock, checks=cap_check)
        (result,) = report.checks
        assert (report.exit_code, result.outcome) == (3, "not_provable")
        assert result.evidence["not_provable"] == "hourly_budget_below_cap_fill"
        assert (result.evidence["cap"], result.evidence["needed_operations"]) == (CAP, 14)
        assert result.notes


class TestDrillDeployment:
    async def test_deployment_mode_against_running_gateway(self, deployment, planted):
        """Against URLs and key files the drill passes and says what a deployment cannot show it."""
        dep, t = deployment, deployment.target
        argv = [
            "drill",
            "--data-url",
            t.data_url,
            "--control-url",
            t.control_url,
            "--ops-url",
            t.ops_url,
            "--bridge-key-file",
            str(dep.keys["bridge"]),
            "--operator-key-file",
            str(dep.keys["operator"]),
            "--session-key-file",
            str(dep.keys["session"]),
            "--server-name",
            t.server_name,
            "--bridge-bot",
            t.bridge_bot,
            "--agent",
            t.agents[0].ref,
            "--ghost",
            t.agents[0].ghost,
        ]
        target = deployment_target(build_parser().parse_args(argv))
        report = await run_drill(target)
        by_id = {c.id: c for c in report.checks}
        assert report.exit_code == 0, {c.id: c.evidence for c in report.checks if not c.passed}
        assert target.subject.startswith("@drill-") and report.target["mode"] == "deployment"
        assert by_id["hard_expiry"].evidence["expiry_observed"] is False and by_id["hard_expiry"].notes
        assert by_id["no_cross_agent_reuse"].notes and "logs" not in by_id["sentinel_absence"].evidence["scanned"]
        assert "metrics" in by_id["sentinel_absence"].evidence["scanned"]
        assert not [s for s in planted if find_leaks(s, [json.dumps(report_json(report))])]


class TestDrillUsage:
    @pytest.mark.parametrize(
        "argv, expected",
        [
            (["--devstack", "--data-url", "http://127.0.0.1:9", "--control-url", "http://127.0.0.1:9"], 2),
            (["--data-url", "http://127.0.0.1:9"], 2),
            (["--data-url", "http://127.0.0.1:9", "--control-url", "http://127.0.0.1:9"], 2),
            (["--data-url", "http://127.0.0.1:9", "--control-url", "http://127.0.0.1:9", "KEYS"], 4),
        ],
    )
    async def test_exit_codes(self, memgov, tmp_path, argv, expected):
        """Contradictory or missing options exit 2; a target that does not answer exits 4."""
        key = tmp_path / "k"
        key.write_text("a" * 64)
        full = [
            "--bridge-key-file",
            str(key),
            "--operator-key-file",
            str(key),
            "--session-key-file",
            str(key),
            "--server-name",
            "drill.example",
            "--bridge-bot",
            "@bridge:drill.example",
            "--agent",
            "ns/agent",
            "--ghost",
            "@agent:drill.example",
        ]
        argv = [a for arg in argv for a in (full if arg == "KEYS" else [arg])]
        code, _out, err = await memgov("drill", *argv, "--output", str(tmp_path / "bundle"))
        assert code == expected and err.startswith("memgov drill: ")
        assert not (tmp_path / "bundle").exists()


async def _drill_on(
    upstream: Upstream,
    adapter: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    settings: dict | None = None,
    *,
    declare: bool = False,
) -> Report:
    """The devstack drill with the given kagent behind the gateway, the given erasure adapter and agents' settings."""
    pg_server = request.getfixturevalue("pg_server")
    store_url = None if upstream.real else request.getfixturevalue("pg_url")
    agents = [ref for ref, _ in AGENTS] + [f"{ref}-nomem" for ref, _ in AGENTS]
    dev = await start_stack(
        upstream, pg_server=pg_server, log_dir=tmp_path / "kagent", agents=agents, store_url=store_url, clock=DevClock()
    )
    try:
        erasure: dict[str, str] = {"adapter": adapter}
        if adapter == "kagent-db":
            owner = dev.real.db_url if dev.real is not None else store_url
            assert owner is not None
            await install_role(owner)
            erasure["kagent_db_url"] = role_url(owner)
        token = sa_token(AGENTS[0][0]) if upstream.auth_mode == "trusted-proxy" else None
        async with devstack_target(dev, erasure=erasure, kagent_token=token, agents=settings, declare=declare) as (
            target,
            local,
        ):
            return await run_drill(target, local=local, clock=local.clock)
    finally:
        await dev.stop()


class TestDrillAgainstKagent:
    """The whole drill with each release of kagent itself as the controller: its log is one of the scanned sinks,
    and the evidence names the release the drill ran against."""

    def _assert_passed(self, report: Report, planted: list[str], adapter: str, upstream: Upstream) -> None:
        by_id = {c.id: c for c in report.checks}
        assert report.exit_code == 0, {c.id: c.evidence for c in report.checks if not c.passed}
        assert report.versions["kagent"] == upstream.release.tag
        assert "kagent_log" in by_id["sentinel_absence"].evidence["scanned"]
        assert by_id["exact_one_entry_erase"].evidence["erasure"]["adapter"] == adapter
        # Exact under either adapter: the devstack pins its agents' embedding model, so rest rotates.
        assert by_id["exact_one_entry_erase"].evidence["erasure"]["physical_deletion"] == "complete"
        if adapter == "rest":
            assert by_id["exact_one_entry_erase"].evidence["rotation"]["state"] == "verified"
        assert report.cleanup["complete"] is True
        assert len(planted) > 20

    @pytest.mark.kagent
    async def test_kagent_db_adapter(self, upstream, planted, tmp_path, request):
        """With kagent-db on kagent's own schema every check passes, on each release in both of its auth modes."""
        self._assert_passed(await _drill_on(upstream, "kagent-db", tmp_path, request), planted, "kagent-db", upstream)

    @pytest.mark.kagent
    async def test_rest_adapter(self, upstream, planted, tmp_path, request):
        """With the REST adapter (kagent's own list and delete routes) every check passes, on each release in
        both auth modes."""
        self._assert_passed(await _drill_on(upstream, "rest", tmp_path, request), planted, "rest", upstream)

    @pytest.mark.kagent
    async def test_rest_adapter_with_the_agents_declared_model(self, upstream, planted, tmp_path, request):
        """The chart's defaults plus each Agent's declared memory ModelConfig are enough: every check passes over
        REST, the exact erase by a verified rotation."""
        agents = declared_agents()
        assert {a["embedding_model"] for a in agents.values()} == {EMBEDDING_MODEL}
        report = await _drill_on(upstream, "rest", tmp_path, request, settings=agents)
        self._assert_passed(report, planted, "rest", upstream)

    @pytest.mark.kagent(standins=("0.9", "0.10"))
    async def test_rest_adapter_with_no_model_in_memgovs_configuration(self, upstream, planted, tmp_path, request):
        """The chart's defaults with no model anywhere in memgov's configuration: memgov reads each Agent's memory
        ModelConfig from kagent, and every check passes over REST, the exact erase by a verified rotation."""
        agents = chart_default_agents()
        assert not any("embedding_model" in a or "model_configs" in a for a in agents.values())
        report = await _drill_on(upstream, "rest", tmp_path, request, settings=agents, declare=True)
        self._assert_passed(report, planted, "rest", upstream)


class TestKagentToken:
    def test_the_token_file_is_sent_as_a_bearer_and_never_shown(self, tmp_path):
        """--kagent-token-file (kagent's trusted-proxy mode) becomes the drill's Authorization, absent from evidence."""
        key, token = tmp_path / "k", tmp_path / "token"
        key.write_text("a" * 64)
        token.write_text("header.payload.signature\n")
        argv = [
            "drill",
            "--data-url",
            "http://127.0.0.1:9",
            "--control-url",
            "http://127.0.0.1:9",
            "--bridge-key-file",
            str(key),
            "--operator-key-file",
            str(key),
            "--session-key-file",
            str(key),
            "--server-name",
            "drill.example",
            "--bridge-bot",
            "@bridge:drill.example",
            "--agent",
            "ns/agent",
            "--ghost",
            "@agent:drill.example",
            "--kagent-token-file",
            str(token),
        ]
        target = deployment_target(build_parser().parse_args(argv))
        assert target.kagent_auth() == {"Authorization": "Bearer header.payload.signature"}
        assert target.describe()["kagent_bearer"] is True
        assert "header.payload" not in repr(target) + json.dumps(target.describe())
