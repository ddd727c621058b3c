"""The model rotation re-embeds with comes from the values, declared the way kagent's Agent declares it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart import cases
from tests.chart.helm import config_file, find, render, render_error

HELPER = {"disabledVariant": "helper-nomem", "ghost": "@agent-helper:example.org"}
#: Rotation on: the rest adapter (the default) with an embedding provider the egress policy allows.
ROTATING: dict[str, Any] = {
    "upstream": {"embeddingUrl": "https://embeddings.example.org/v1"},
    "networkPolicy": {"embedding": {"to": [{"ipBlock": {"cidr": cases.PROVIDER_CIDR}}]}},
}
DECLARED: dict[str, Any] = {
    **ROTATING,
    "agents": {"kagent/helper": {**HELPER, "memory": {"modelConfig": "embeddings"}}},
    "modelConfigs": {"kagent/embeddings": {"provider": "OpenAI", "model": "text-embedding-3-small"}},
}


def _agent_config(values: dict[str, Any]) -> dict[str, Any]:
    agents: dict[str, Any] = config_file(render(values))["agents"]
    return agents


class TestDeclaredModel:
    def test_the_agents_memory_model_config_becomes_its_rotation_model(self) -> None:
        """memory.modelConfig names a described ModelConfig: its model, at the 768 dimensions kagent's runtimes
        use (and the ModelConfig is one an operator token guards)."""
        assert _agent_config(DECLARED)["kagent/helper"] == {
            "disabled_variant": "helper-nomem",
            "ghost": "@agent-helper:example.org",
            "embedding_model": "text-embedding-3-small",
            "embedding_dimensions": 768,
            "model_configs": ["embeddings"],
        }

    def test_the_provider_defaults_to_openai_as_in_kagent(self) -> None:
        """A ModelConfig without a provider is kagent's default OpenAI one."""
        values = {**DECLARED, "modelConfigs": {"kagent/embeddings": {"model": "text-embedding-3-small"}}}
        assert _agent_config(values)["kagent/helper"]["embedding_model"] == "text-embedding-3-small"

    def test_a_model_named_directly_still_renders(self) -> None:
        """embeddingModel names the model without a ModelConfig (no dimensions sent)."""
        values = {**ROTATING, "agents": {"kagent/helper": {**HELPER, "embeddingModel": "nomic-embed-text"}}}
        assert _agent_config(values)["kagent/helper"]["embedding_model"] == "nomic-embed-text"


class TestModelGuards:
    @pytest.mark.parametrize(
        ("values", "message"),
        [
            (
                {**DECLARED, "modelConfigs": {"kagent/other": {"model": "m"}}},
                "agents.kagent/helper.memory.modelConfig=embeddings names no modelConfigs entry",
            ),
            (
                {**DECLARED, "modelConfigs": {"other/embeddings": {"model": "m"}}},
                "names no modelConfigs entry",
            ),
            (
                {**DECLARED, "modelConfigs": {"kagent/embeddings": {"provider": "Ollama", "model": "nomic"}}},
                "uses a ModelConfig with provider Ollama",
            ),
            (
                {
                    **DECLARED,
                    "agents": {
                        "kagent/helper": {**HELPER, "memory": {"modelConfig": "embeddings"}, "embeddingModel": "m"}
                    },
                },
                "sets both memory.modelConfig and embeddingModel",
            ),
        ],
        ids=[
            "undescribed-model-config",
            "model-config-of-another-namespace",
            "not-openai",
            "both",
        ],
    )
    def test_an_agent_rotation_cannot_re_embed_for_fails_the_render(self, values: dict[str, Any], message: str) -> None:
        """With rotation on, an agent without a usable declared model fails the install, naming what to set."""
        assert message in render_error(values)

    @pytest.mark.parametrize(
        "values",
        [
            {**ROTATING, "agents": {"kagent/helper": HELPER}},
            {**ROTATING, "agents": {"kagent/helper": HELPER}, "erasure": {"rotate": False}},
            {"agents": {"kagent/helper": HELPER}},
            {
                **ROTATING,
                "agents": {"kagent/helper": HELPER},
                "erasure": {"adapter": "kagent-db", "kagentDb": {"existingSecret": "s"}},
                "networkPolicy": {**ROTATING["networkPolicy"], "postgresql": {"to": [cases.POSTGRES_PEER]}},
            },
        ],
        ids=["rotation-on", "rotation-off", "no-embedding-provider", "kagent-db-adapter"],
    )
    def test_no_model_in_the_values_renders(self, values: dict[str, Any]) -> None:
        """No model in the values renders, rotation on or off: memgov then reads the model each Agent's
        definition declares from kagent (tests/drill: the chart's defaults on both releases)."""
        assert "embedding_model" not in _agent_config(values)["kagent/helper"]


class TestAlert:
    def test_an_agent_without_a_model_alerts(self) -> None:
        """The PrometheusRule fires on the gauge counting agents rotation cannot re-embed for."""
        rule = find(render({**DECLARED, "prometheusRule": cases.PROMETHEUS_RULE}), "PrometheusRule")
        (alert,) = [r for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] == "MemgovRotationModelMissing"]
        assert alert["expr"] == "max by (namespace) (memgov_rotation_agents_without_model) > 0"
        assert alert["labels"]["severity"] == "critical" and "/readyz" in alert["annotations"]["description"]
