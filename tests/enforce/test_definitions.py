"""Writes to kagent's definitions through the data plane: refused before kagent sees a claim on memgov's
boundary, relayed as checked otherwise, and an operator's to make for the definitions memgov governs.

Tests marked ``kagent`` run against the stand-in and against kagent v0.9.11's own HTTP server, whose
handlers decode the definition with Go's encoding/json and keep it in a controller-runtime client
(read back with kagent's own GET)."""

from __future__ import annotations

import copy
import json
from typing import Any

import aiohttp
import pytest

from sidecar.dev.devstack import Devstack, definitions
from sidecar.wire import dumps
from tests.support.sentinel import capture_sinks, make_sentinel
from tests.support.stack import AGENT, AGENT_MODEL_CONFIGS, GHOST, RUNTIME_EMBEDDING_MODEL
from tests.support.upstream import bridge_headers
from tests.support.wait import until

#: memgov's identity as the chart renders it for a release named "memgov" in kagent's namespace.
BOUNDARY = {
    "selectors": [{"app.kubernetes.io/name": "memgov", "app.kubernetes.io/instance": "memgov"}],
    "marker_keys": ["memgov/boundary-exception"],
    "service_accounts": ["memgov"],
    "secrets": ["memgov-session-key", "memgov-bridge-key"],
    "names": ["memgov", "memgov-config", "memgov-policies"],
}
MEMGOV_LABELS = {"app.kubernetes.io/name": "memgov", "app.kubernetes.io/instance": "memgov"}


def byo(name: str = "chat", namespace: str = "team", **deployment: Any) -> dict[str, Any]:
    """A BYO agent definition, the kind kagent's API validates and stores without runtime images."""
    dep = {"image": "ghcr.io/example/chat:1", **deployment}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"type": "BYO", "byo": {"deployment": dep}}}


def spelled(text: str) -> bytes:
    return text.encode()


#: A BYO deployment's fields with ``{}`` where the claim goes.
_DEPLOYMENT = (
    '{{"metadata": {{"name": "chat", "namespace": "team"}},'
    ' "{spec}": {{"type": "BYO", "{byo}": {{"{dep}": {{"image": "i", {claim}}}}}}}}}'
)


def _claimed(claim: str, *, spec: str = "spec", byo_key: str = "byo", dep: str = "deployment") -> bytes:
    return spelled(_DEPLOYMENT.format(spec=spec, byo=byo_key, dep=dep, claim=claim))


LABELS = json.dumps(MEMGOV_LABELS)
#: Every spelling and nesting of memgov's labels (or another claim) kagent v0.9.11 reads, and what
#: memgov answers: refused before kagent sees it, either for the claim or as a body it will not guess at.
HOSTILE: list[tuple[str, bytes, int, str]] = [
    ("byo deployment labels", _claimed(f'"labels": {LABELS}'), 403, "boundary_claimed"),
    (
        "field names in other case",
        _claimed(f'"Labels": {LABELS}', spec="Spec", byo_key="BYO", dep="Deployment"),
        403,
        "boundary_claimed",
    ),
    (
        "one selector label is enough",
        _claimed('"labels": {"app.kubernetes.io/instance": "memgov"}'),
        403,
        "boundary_claimed",
    ),
    ("service account labels", _claimed(f'"serviceAccountConfig": {{"labels": {LABELS}}}'), 403, "boundary_claimed"),
    (
        "boundary marker annotation",
        _claimed('"annotations": {"memgov/boundary-exception": "true"}'),
        403,
        "boundary_claimed",
    ),
    (
        "agent metadata annotations",
        spelled(
            '{"metadata": {"name": "chat", "namespace": "team", "annotations": {"memgov/boundary-exception": "true"}},'
            ' "spec": {"type": "BYO", "byo": {"deployment": {"image": "i"}}}}'
        ),
        403,
        "boundary_claimed",
    ),
    (
        "declarative deployment labels",
        spelled(
            '{"metadata": {"name": "chat", "namespace": "team"}, "spec": {"type": "Declarative", "declarative":'
            f' {{"modelConfig": "m", "deployment": {{"labels": {LABELS}}}}}}}}}'
        ),
        403,
        "boundary_claimed",
    ),
    ("memgov's service account", _claimed('"serviceAccountName": "memgov"'), 403, "boundary_claimed"),
    (
        "memgov's secret in an env reference",
        _claimed('"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "memgov-session-key", "key": "k"}}}]'),
        403,
        "boundary_claimed",
    ),
    (
        "memgov's secret as a volume",
        _claimed('"volumes": [{"name": "k", "secret": {"secretName": "memgov-bridge-key"}}]'),
        403,
        "boundary_claimed",
    ),
    ("named like memgov's Service", spelled(json.dumps(byo(name="memgov"))), 403, "boundary_claimed"),
    ("labels, then labels again", _claimed(f'"labels": {{}}, "labels": {LABELS}'), 400, "bad_request"),
    ("labels, then Labels", _claimed(f'"labels": {{}}, "Labels": {LABELS}'), 400, "bad_request"),
    (
        "a second spec in other case",
        spelled(
            '{"metadata": {"name": "chat", "namespace": "team"},'
            ' "spec": {"type": "BYO", "byo": {"deployment": {"image": "i"}}},'
            f' "Spec": {{"type": "BYO", "byo": {{"deployment": {{"image": "i", "labels": {LABELS}}}}}}}}}'
        ),
        400,
        "bad_request",
    ),
    ("a key Go folds onto labels", _claimed(f'"labelſ": {LABELS}'), 400, "bad_request"),
    (
        "a duplicate label key",
        _claimed('"labels": {"app.kubernetes.io/name": "chat", "app.kubernetes.io/name": "memgov"}'),
        400,
        "bad_request",
    ),
]


async def _absent(stack, ref: str) -> bool:
    """kagent holds no agent ``ref``: the real one is asked through memgov (reads are relayed as they
    are); the stand-in keeps nothing, so there no write naming it may have arrived."""
    if stack.upstream.real:
        status, _, _ = await stack.definition("GET", f"/api/agents/{ref}")
        return status == 404
    name = ref.partition("/")[2]
    return not any(name.encode() in r.body for r in stack.dev.recorder.requests if r.method != "GET")


def _passed(status: int) -> bool:
    """kagent accepted the write (the stand-in echoes 200, kagent answers 200 or 201)."""
    return 200 <= status < 300


class TestDefinitionWrites:
    @pytest.fixture
    async def gated(self, make_stack):
        return await make_stack(boundary=BOUNDARY)

    @pytest.mark.kagent
    async def test_a_definition_claiming_memgovs_identity_never_reaches_kagent(self, gated):
        """Every spelling and nesting of memgov's labels kagent reads, and every other claim, is refused
        before kagent sees it; kagent ends up holding none of these definitions."""
        for name, raw, status, reason in HOSTILE:
            got, body, headers = await gated.definition("POST", "/api/agents", raw=raw)
            assert (got, body.get("error")) == (status, reason), name
            assert headers["X-Memgov-Decision"].startswith("deny;"), name
            assert await _absent(gated, "team/chat"), name
            assert await _absent(gated, "team/memgov"), name
        if not gated.upstream.real:
            assert [r for r in gated.dev.recorder.requests if r.method != "GET"] == []

    @pytest.mark.kagent
    async def test_a_legitimate_definition_reaches_kagent_as_checked(self, gated):
        """An ordinary agent with labels, annotations and a Secret of its own passes without an operator,
        and kagent stores exactly what memgov read."""
        agent = byo(
            labels={"team": "search", "app.kubernetes.io/part-of": "search"},
            annotations={"example.org/owner": "search-team"},
            env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "chat-token", "key": "token"}}}],
        )
        status, body, headers = await gated.definition("POST", "/api/agents", agent)
        assert _passed(status) and headers["X-Memgov-Decision"].startswith("forward;"), body
        status, body, _ = await gated.definition("GET", "/api/agents/team/chat")
        if gated.upstream.real:
            assert status == 200 and body["data"]["agent"]["spec"] == agent["spec"]
        else:
            sent = [r for r in gated.dev.recorder.requests if r.method == "POST"][-1]
            assert sent.body == dumps(agent)

    @pytest.mark.kagent(standins=("0.9", "0.10"))
    async def test_the_model_config_an_agent_declares_in_kagent_is_governed(self, make_stack, upstream):
        """No ModelConfig in memgov's configuration: the one the memory agent's kagent definition names for its
        memory, read from kagent, changes only with an operator token, like a configured one."""

        async def in_kagent(dev: Devstack) -> None:
            async with aiohttp.ClientSession() as http:
                headers = bridge_headers(upstream, "ops@example.org")
                await definitions.declare(
                    http, dev.kagent_url, {AGENT: RUNTIME_EMBEDDING_MODEL}, headers=headers, config="memory-embed"
                )

        bare = {AGENT: {"disabled_variant": "k8s-agent-nomem", "ghost": GHOST}}
        gated = await make_stack(in_kagent=in_kagent, boundary=BOUNDARY, agents=bare)

        async def learnt() -> bool:
            async with gated.http.get(gated.gw.ops_url + "/readyz") as resp:
                detail = (await resp.json())["checks"]["kagent"]
                return AGENT not in detail.get("agents_without_model", [AGENT])

        await until(learnt)
        swapped = {"spec": {"provider": "OpenAI", "model": "text-embedding-3-large"}}
        status, body, _ = await gated.definition("PUT", "/api/modelconfigs/kagent/memory-embed", swapped)
        assert (status, body["error"]) == (403, "operator_required")
        status, body, _ = await gated.definition("PUT", "/api/modelconfigs/kagent/other-config", swapped)
        assert body.get("error") != "operator_required"
        status, body, _ = await gated.definition("PUT", "/api/modelconfigs/kagent/memory-embed", swapped, operator=True)
        assert body.get("error") != "operator_required", body

    @pytest.mark.kagent
    async def test_a_governed_agents_definition_needs_an_operator(self, gated):
        """The memory agent's memory-free variant and its ModelConfig change only with an operator token,
        carried beside kagent's own Authorization header."""
        variant = byo(name="k8s-agent-nomem", namespace="kagent")
        status, body, _ = await gated.definition("POST", "/api/agents", variant)
        assert (status, body["error"]) == (403, "operator_required")
        assert await _absent(gated, "kagent/k8s-agent-nomem")
        status, body, _ = await gated.definition("POST", "/api/agents", variant, operator=True)
        assert _passed(status), body
        changed = copy.deepcopy(variant)
        changed["spec"]["byo"]["deployment"]["image"] = "ghcr.io/example/other:2"
        status, body, _ = await gated.definition("PUT", "/api/agents", changed)
        assert (status, body["error"]) == (403, "operator_required")
        status, body, _ = await gated.definition("DELETE", "/api/agents/kagent/k8s-agent-nomem")
        assert (status, body["error"]) == (403, "operator_required")
        model = {"ref": f"kagent/{AGENT_MODEL_CONFIGS[0]}", "spec": {"provider": "OpenAI", "model": "gpt-4o"}}
        status, body, _ = await gated.definition("POST", "/api/modelconfigs", model)
        assert (status, body["error"]) == (403, "operator_required")
        status, body, _ = await gated.definition("POST", "/api/modelconfigs", model, operator=True)
        assert _passed(status), body
        swapped = {"spec": {"provider": "OpenAI", "model": "gpt-4o-mini"}}
        path = f"/api/modelconfigs/kagent/{AGENT_MODEL_CONFIGS[0]}"
        status, body, _ = await gated.definition("PUT", path, swapped)
        assert (status, body["error"]) == (403, "operator_required")
        status, body, _ = await gated.definition("PUT", path, swapped, operator=True)
        assert _passed(status), body
        # An ordinary ModelConfig passes under kagent's own auth mode.
        status, body, _ = await gated.definition("POST", "/api/modelconfigs", {**model, "ref": "team/chat-model"})
        assert _passed(status), body

    @pytest.mark.kagent
    async def test_an_operator_cannot_make_a_definition_claim_the_boundary(self, gated):
        """The floor refuses a claim whoever sends it: an operator token does not loosen it."""
        status, body, _ = await gated.definition(
            "POST", "/api/agents", byo(name="k8s-agent-nomem", namespace="kagent", labels=MEMGOV_LABELS), operator=True
        )
        assert (status, body["error"]) == (403, "boundary_claimed")
        assert await _absent(gated, "kagent/k8s-agent-nomem")

    async def test_the_operator_token_never_reaches_kagent(self, gated):
        """kagent receives the definition with its own headers, never memgov's operator token."""
        variant = byo(name="k8s-agent-nomem", namespace="kagent")
        status, _, _ = await gated.definition("POST", "/api/agents", variant, operator=True)
        assert _passed(status)
        (sent,) = [r for r in gated.dev.recorder.requests if r.method == "POST"]
        assert sent.header("X-Memgov-Operator") is None

    async def test_a_forged_or_expired_operator_token_is_no_operator(self, gated):
        """A token signed with another key, or of another kind, does not stand for an operator."""
        variant = byo(name="k8s-agent-nomem", namespace="kagent")
        for token in ("Bearer " + gated.context(), "Bearer not-a-token", gated.operator_token()):
            headers = {"X-Memgov-Operator": token, "Content-Type": "application/json"}
            async with gated.http.post(gated.gw.data_url + "/api/agents", json=variant, headers=headers) as resp:
                assert (resp.status, (await resp.json())["error"]) == (403, "operator_required"), token[:12]

    async def test_a_look_alike_path_is_refused(self, gated):
        """A percent-encoded or folded spelling of a definition route is refused, not relayed undecided."""
        for path in ("/api/%61gents", "/api/Agents", "/api//agents", "/api/prompttemplates/kagent%2Fmemgov-policies"):
            status, body, _ = await gated.definition("POST", path, byo())
            assert (status, body["error"]) == (403, "route_denied"), path
        # Only memgov's own reads (kagent's release, the memory agents' declared models) reached kagent.
        assert [r for r in gated.dev.recorder.requests if r.method != "GET"] == []

    async def test_without_configuration_memgovs_generic_markers_are_refused(self, stack):
        """A gateway with no boundary settings still refuses memgov's name label and memgov/ keys."""
        for agent in (byo(labels={"app.kubernetes.io/name": "memgov"}), byo(annotations={"memgov/x": "1"})):
            status, body, _ = await stack.definition("POST", "/api/agents", agent)
            assert (status, body["error"]) == (403, "boundary_claimed")

    async def test_a_refusal_is_audited_by_reason_without_content(self, gated):
        """An anonymous refused write is counted per hour and reason; an operator's leaves an audit row."""
        await gated.definition("POST", "/api/agents", byo(labels=MEMGOV_LABELS))
        await gated.definition("POST", "/api/agents", byo(name="memgov"), operator=True)
        log = gated.parts.store.audit_log
        counted = {(op, reason): n for _, op, reason, n in await log.refusal_counts()}
        assert counted == {("controller.write", "boundary_claimed"): 1}
        rows = [r for r in await log.audit_rows(limit=10) if r["kind"] == "decision"]
        assert [(r["operation"], r["reason"]) for r in rows] == [("controller.write", "boundary_claimed")]


class TestDefinitionSentinels:
    async def test_a_definitions_content_reaches_no_sink(self, make_stack):
        """A system prompt in a refused or a forwarded definition appears in no log, metric, span, audit
        row or error body of memgov's."""
        prompt = make_sentinel("prompt")
        stack = await make_stack(boundary=BOUNDARY)
        declarative = {
            "metadata": {"name": "chat", "namespace": "team"},
            "spec": {"type": "Declarative", "declarative": {"modelConfig": "m", "systemMessage": f"you are {prompt}"}},
        }
        with capture_sinks() as sinks:
            for body, operator in (
                (declarative, False),  # forwarded
                ({**declarative, "metadata": {"name": "memgov", "namespace": "team"}}, False),  # boundary_claimed
                ({**declarative, "metadata": {"name": "k8s-agent", "namespace": "kagent"}}, False),  # operator_required
                ({**declarative, "metadata": {"name": "k8s-agent", "namespace": "kagent"}}, True),  # forwarded
            ):
                status, answer, headers = await stack.definition("POST", "/api/agents", body, operator=operator)
                if status >= 400:
                    sinks.record(status, headers.items(), json.dumps(answer))
            text = json.dumps(prompt)
            raw = f'{{"metadata": {{"name": "chat"}}, "spec": {{"systemMessage": {text}, "SystemMessage": "x"}}}}'
            status, answer, headers = await stack.definition("POST", "/api/agents", raw=raw.encode())
            assert status == 400
            sinks.record(status, headers.items(), json.dumps(answer))
            store = stack.parts.store
            sinks.extra.append(repr(await store.audit_log.audit_rows(limit=1000)))
            sinks.extra.append(repr(await store.audit_log.refusal_counts()))
        sinks.assert_clean(prompt)
        forwarded = [r for r in stack.dev.recorder.requests if r.method == "POST"]
        assert len(forwarded) == 2 and all(dumps(prompt)[1:-1] in r.body for r in forwarded)
