"""What memgov reads of kagent's controller API: its release and an agent's declared memory model, shape-checked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from sidecar.contentstore.controller import KagentController, KagentWatch, Release
from sidecar.contentstore.reembed import EmbeddingModel
from sidecar.contentstore.rotator import ModelBook
from sidecar.upstream import Upstream

AGENT = "kagent/helper"


def _agent(model_config: object) -> dict[str, Any]:
    memory = {} if model_config is None else {"modelConfig": model_config}
    return {"error": False, "data": {"agent": {"spec": {"declarative": {"memory": memory}}}}, "message": ""}


def _model_config(spec: dict[str, object]) -> dict[str, Any]:
    return {"error": False, "data": {"ref": "kagent/embeddings", "spec": spec}, "message": ""}


class _Kagent:
    """A controller that answers what a test sets, and records the headers it was sent."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.headers: list[dict[str, str]] = []

    def json(self, path: str, body: object, status: int = 200) -> None:
        import json

        self.answers[path] = (status, json.dumps(body).encode())

    async def handle(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        status, body = self.answers.get(request.path_qs, (404, b'{"error":true}'))
        return web.Response(status=status, body=body, content_type="application/json")


@pytest.fixture
async def kagent(aiohttp_server: Any) -> AsyncIterator[tuple[_Kagent, KagentController]]:
    fake = _Kagent()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", fake.handle)
    server = await aiohttp_server(app)
    async with aiohttp.ClientSession() as session:
        upstream = Upstream("controller", str(server.make_url("")).rstrip("/"), session)
        yield fake, KagentController(upstream, lambda: {"Authorization": "Bearer memgov"})


class TestRelease:
    @pytest.mark.parametrize(
        ("reported", "name", "tested"),
        [
            ("v0.9.11", "v0.9.11", True),
            ("v0.10.0-rc3", "v0.10.0-rc3", True),
            ("v0.10.4", "v0.10.4", False),
            ("v0.10.4; drop table", None, False),
            (42, None, False),
        ],
    )
    async def test_the_release_is_read_and_judged(
        self, kagent, reported: object, name: str | None, tested: bool
    ) -> None:
        """A release kagent reports is named and judged tested or not; a value of another shape is never repeated."""
        fake, controller = kagent
        fake.json("/version", {"kagent_version": reported, "git_commit": "x"})
        release = await controller.release()
        assert (release.name, release.tested) == (name, tested)

    async def test_a_controller_that_does_not_answer_is_an_unknown_release(self, kagent) -> None:
        """A non-200 answer is no release at all."""
        fake, controller = kagent
        fake.json("/version", {"kagent_version": "v0.9.11"}, status=500)
        assert await controller.release() == Release(None)

    async def test_memgov_reads_with_its_own_credentials(self, kagent) -> None:
        """Every read carries memgov's own headers, never a caller's."""
        fake, controller = kagent
        fake.json("/version", {"kagent_version": "v0.9.11"})
        await controller.release()
        assert fake.headers[-1]["Authorization"] == "Bearer memgov"


class TestDeclaredModel:
    async def test_the_model_of_the_agent_s_memory_model_config(self, kagent) -> None:
        """The definition's memory.modelConfig names a ModelConfig; its model is what rotation re-embeds with."""
        fake, controller = kagent
        fake.json("/api/agents/kagent/helper", _agent("embeddings"))
        fake.json("/api/modelconfigs/kagent/embeddings", _model_config({"provider": "OpenAI", "model": "text-3-small"}))
        assert await controller.declared_model(AGENT) == ("kagent/embeddings", EmbeddingModel("text-3-small", 768))

    @pytest.mark.parametrize(
        ("model_config", "spec"),
        [
            (None, {"model": "m"}),  # no memory model declared
            ("Not A Name", {"model": "m"}),  # not a Kubernetes object name
            ("embeddings", {"provider": "Anthropic", "model": "m"}),  # not re-embeddable through the OpenAI API
            ("embeddings", {"model": "a model with spaces"}),  # not a model id
            ("embeddings", {"model": ["m"]}),  # another shape
        ],
    )
    async def test_anything_else_is_no_model(self, kagent, model_config: object, spec: dict[str, object]) -> None:
        """A definition or ModelConfig of another shape gives no model: rotation waits, it never guesses."""
        fake, controller = kagent
        fake.json("/api/agents/kagent/helper", _agent(model_config))
        fake.json("/api/modelconfigs/kagent/embeddings", _model_config(spec))
        config, model = await controller.declared_model(AGENT)
        assert model is None
        # A ModelConfig named validly stays governed even when its model is unusable.
        assert config == ("kagent/embeddings" if model_config == "embeddings" else None)

    async def test_an_agent_kagent_does_not_know_has_no_model(self, kagent) -> None:
        """A 404 for the definition gives no model."""
        _, controller = kagent
        assert await controller.declared_model(AGENT) == (None, None)


class TestModelBook:
    def test_a_configured_model_wins_over_a_declared_one(self) -> None:
        """The operator's configuration overrides what a definition declares; only undeclared agents are read."""
        configured = EmbeddingModel("configured", 768)
        book = ModelBook(["a/x", "a/y"], {"a/x": configured})
        book.learn("a/x", "a/m", EmbeddingModel("declared", 768))
        book.learn("a/y", "a/m", EmbeddingModel("declared", 768))
        assert (book.model("a/x"), book.model("a/y").model, book.undeclared()) == (configured, "declared", ["a/y"])

    def test_a_model_no_longer_declared_is_forgotten(self) -> None:
        """A definition that stops naming a model takes the model away: rotation then waits."""
        book = ModelBook(["a/y"], {})
        book.learn("a/y", "a/m", EmbeddingModel("declared", 768))
        assert book.declared_configs() == {"a/m"}
        book.learn("a/y", None, None)
        assert (book.knows("a/y"), book.missing(), book.declared_configs()) == (False, ["a/y"], frozenset())


class TestWatch:
    async def test_a_reading_publishes_the_release_and_the_models(self, kagent) -> None:
        """One refresh names the release in /readyz and the metric, and learns each undeclared agent's model."""
        fake, controller = kagent
        fake.json("/version", {"kagent_version": "v0.10.4"})
        fake.json("/api/agents/kagent/helper", _agent("embeddings"))
        fake.json("/api/modelconfigs/kagent/embeddings", _model_config({"model": "text-3-small"}))
        book = ModelBook([AGENT, "kagent/other"], {})
        watch = KagentWatch(controller, book, 300)
        await watch.refresh()
        ok, detail = await watch.ready_check()
        assert ok and detail["release"] == "v0.10.4" and detail["tested"] is False
        assert detail["agents_without_model"] == ["kagent/other"]
        assert REGISTRY.get_sample_value("memgov_kagent_release_untested") == 1
        assert REGISTRY.get_sample_value("memgov_rotation_agents_without_model") == 1
        fake.json("/version", {"kagent_version": "v0.9.11"})
        await watch.refresh()
        assert REGISTRY.get_sample_value("memgov_kagent_release_untested") == 0
