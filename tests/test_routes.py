"""Route classification: every kagent v0.9.11 controller route and the bypass spellings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.routes import Operation, Traffic, classify

CONTROLLER_ROUTES = [
    # memory (section 1)
    ("POST", "/api/memories/sessions", Operation.MEMORY_SAVE, "/api/memories/sessions"),
    ("POST", "/api/memories/sessions/batch", Operation.MEMORY_SAVE_BATCH, "/api/memories/sessions/batch"),
    ("POST", "/api/memories/search", Operation.MEMORY_SEARCH, "/api/memories/search"),
    ("GET", "/api/memories?agent_name=a&user_id=b", Operation.MEMORY_LIST, "/api/memories"),
    ("DELETE", "/api/memories?agent_name=a&user_id=b", Operation.MEMORY_DELETE_ALL, "/api/memories"),
    # A2A
    ("POST", "/api/a2a/kagent/k8s-agent", Operation.A2A_INVOKE, "/api/a2a/{ns}/{name}"),
    ("POST", "/api/a2a/kagent/k8s-agent/", Operation.A2A_INVOKE, "/api/a2a/{ns}/{name}"),
    ("POST", "/api/a2a-sandboxes/kagent/box", Operation.A2A_INVOKE, "/api/a2a-sandboxes/{ns}/{name}"),
    (
        "GET",
        "/api/a2a/kagent/k8s-agent/.well-known/agent-card.json",
        Traffic.A2A_CARD,
        "/api/a2a/{ns}/{name}/.well-known/agent-card.json",
    ),
    # embedding route on the gateway
    (
        "POST",
        "/embeddings/kagent/k8s-agent/v1/embeddings",
        Operation.EMBEDDING,
        "/embeddings/{ns}/{name}/v1/embeddings",
    ),
    # ungoverned stores
    ("GET", "/api/crewai/memory?thread_id=1", Operation.MEMORY_UNGOVERNED, "/api/crewai/memory"),
    ("POST", "/api/crewai/memory", Operation.MEMORY_UNGOVERNED, "/api/crewai/memory"),
    ("DELETE", "/api/crewai/memory", Operation.MEMORY_UNGOVERNED, "/api/crewai/memory"),
    ("GET", "/api/crewai/flows/state", Operation.MEMORY_UNGOVERNED, "/api/crewai/flows/state"),
    ("POST", "/api/langgraph/checkpoints", Operation.MEMORY_UNGOVERNED, "/api/langgraph/{rest}"),
    ("GET", "/api/langgraph/checkpoints", Operation.MEMORY_UNGOVERNED, "/api/langgraph/{rest}"),
    ("POST", "/api/langgraph/checkpoints/writes", Operation.MEMORY_UNGOVERNED, "/api/langgraph/{rest}"),
    ("DELETE", "/api/langgraph/checkpoints/t1", Operation.MEMORY_UNGOVERNED, "/api/langgraph/{rest}"),
    # passthrough (section 4)
    ("GET", "/health", Traffic.PASSTHROUGH, "/health"),
    ("GET", "/version", Traffic.PASSTHROUGH, "/version"),
    ("GET", "/api/me", Traffic.PASSTHROUGH, "/api/me"),
    ("GET", "/api/sessions", Traffic.PASSTHROUGH, "/api/sessions"),
    ("POST", "/api/sessions", Traffic.PASSTHROUGH, "/api/sessions"),
    ("GET", "/api/sessions/agent/kagent/a", Traffic.PASSTHROUGH, "/api/sessions/agent/{ns}/{name}"),
    ("GET", "/api/sessions/s1?order=asc&limit=3", Traffic.PASSTHROUGH, "/api/sessions/{id}"),
    ("PUT", "/api/sessions/s1", Traffic.PASSTHROUGH, "/api/sessions/{id}"),
    ("DELETE", "/api/sessions/s1", Traffic.PASSTHROUGH, "/api/sessions/{id}"),
    ("GET", "/api/sessions/s1/tasks", Traffic.PASSTHROUGH, "/api/sessions/{id}/tasks"),
    ("POST", "/api/sessions/s1/events", Traffic.PASSTHROUGH, "/api/sessions/{id}/events"),
    ("POST", "/api/tasks", Traffic.PASSTHROUGH, "/api/tasks"),
    ("GET", "/api/tasks/t1", Traffic.PASSTHROUGH, "/api/tasks/{id}"),
    ("DELETE", "/api/tasks/t1", Traffic.PASSTHROUGH, "/api/tasks/{id}"),
    ("GET", "/api/agents", Traffic.PASSTHROUGH, "/api/{collection}"),
    ("GET", "/api/agents/kagent/a", Traffic.PASSTHROUGH, "/api/{collection}/{ns}/{name}"),
    # writes to kagent's definitions
    ("POST", "/api/agents", Operation.CONTROLLER_WRITE, "/api/{collection}"),
    ("PUT", "/api/agents", Operation.CONTROLLER_WRITE, "/api/{collection}"),
    ("DELETE", "/api/agents/kagent/a", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("POST", "/api/sandboxagents", Operation.CONTROLLER_WRITE, "/api/{collection}"),
    ("PUT", "/api/sandboxagents/kagent/a", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("DELETE", "/api/sandboxagents/kagent/a", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("POST", "/api/agentharnesses", Operation.CONTROLLER_WRITE, "/api/{collection}"),
    ("DELETE", "/api/agentharnesses/kagent/h", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("POST", "/api/modelconfigs", Operation.CONTROLLER_WRITE, "/api/{collection}"),
    ("PUT", "/api/modelconfigs/kagent/m", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("DELETE", "/api/modelconfigs/kagent/m", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("POST", "/api/toolservers", Operation.CONTROLLER_WRITE, "/api/{collection}"),
    ("DELETE", "/api/toolservers/kagent/t", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("POST", "/api/prompttemplates", Operation.CONTROLLER_WRITE, "/api/{collection}"),
    ("PUT", "/api/prompttemplates/kagent/p", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("DELETE", "/api/prompttemplates/kagent/p", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("PATCH", "/api/agents/kagent/a", Operation.CONTROLLER_WRITE, "/api/{collection}/{ns}/{name}"),
    ("POST", "/api/agentharnesses/kagent/h/", Traffic.PASSTHROUGH, "/api/agentharnesses/{ns}/{name}/{rest}"),
    ("GET", "/api/sandboxagents/kagent/a", Traffic.PASSTHROUGH, "/api/{collection}/{ns}/{name}"),
    ("GET", "/api/agentharnesses", Traffic.PASSTHROUGH, "/api/{collection}"),
    ("GET", "/api/agentharnesses/kagent/h/ws/x", Traffic.PASSTHROUGH, "/api/agentharnesses/{ns}/{name}/{rest}"),
    ("GET", "/api/modelconfigs/kagent/m", Traffic.PASSTHROUGH, "/api/{collection}/{ns}/{name}"),
    ("GET", "/api/modelproviderconfigs/models", Traffic.PASSTHROUGH, "/api/modelproviderconfigs/{kind}"),
    ("GET", "/api/modelproviderconfigs/memories", Traffic.PASSTHROUGH, "/api/modelproviderconfigs/{kind}"),
    ("GET", "/api/modelproviderconfigs/configured", Traffic.PASSTHROUGH, "/api/modelproviderconfigs/{kind}"),
    (
        "GET",
        "/api/modelproviderconfigs/configured/openai/models",
        Traffic.PASSTHROUGH,
        "/api/modelproviderconfigs/configured/{name}/models",
    ),
    ("GET", "/api/models", Traffic.PASSTHROUGH, "/api/{collection}"),
    ("GET", "/api/tools", Traffic.PASSTHROUGH, "/api/{collection}"),
    ("GET", "/api/toolservers/kagent/t", Traffic.PASSTHROUGH, "/api/{collection}/{ns}/{name}"),
    ("GET", "/api/toolservertypes", Traffic.PASSTHROUGH, "/api/{collection}"),
    ("GET", "/api/namespaces", Traffic.PASSTHROUGH, "/api/{collection}"),
    ("GET", "/api/prompttemplates/kagent/p", Traffic.PASSTHROUGH, "/api/{collection}/{ns}/{name}"),
    ("POST", "/api/feedback", Traffic.PASSTHROUGH, "/api/{collection}"),
    ("GET", "/api/substrate/status", Traffic.PASSTHROUGH, "/api/substrate/status"),
    ("GET", "/api/sandbox/ssh", Traffic.PASSTHROUGH, "/api/sandbox/ssh"),
    # kagent v0.10: share links are decided (session.share); the session's other new routes, MCP
    # apps and the harness lifecycle are relayed (a share token on a session route is decided too).
    ("POST", "/api/sessions/s-1/shares", Operation.SESSION_SHARE, "/api/sessions/{id}/shares"),
    ("GET", "/api/sessions/s-1/shares", Operation.SESSION_SHARE, "/api/sessions/{id}/shares"),
    ("DELETE", "/api/sessions/s-1/shares/tok_1", Operation.SESSION_SHARE, "/api/sessions/{id}/shares"),
    ("PUT", "/api/sessions/s-1/shares", Traffic.PASSTHROUGH, "/api/sessions/{id}/shares"),
    ("PATCH", "/api/sessions/s-1", Traffic.PASSTHROUGH, "/api/sessions/{id}"),
    ("GET", "/api/mcp-apps/kagent/app/ui", Traffic.PASSTHROUGH, "/api/mcp-apps/{rest}"),
    ("GET", "/api/mcpapps", Traffic.PASSTHROUGH, "/api/mcp-apps/{rest}"),
    ("POST", "/api/agentharnesses/kagent/h/ensure", Traffic.PASSTHROUGH, "/api/agentharnesses/{ns}/{name}/{rest}"),
    ("POST", "/api/agentharnesses/kagent/h/suspend", Traffic.PASSTHROUGH, "/api/agentharnesses/{ns}/{name}/{rest}"),
    ("GET", "/api/agentharnesses/kagent/h/status", Traffic.PASSTHROUGH, "/api/agentharnesses/{ns}/{name}/{rest}"),
    ("POST", "/mcp", Traffic.PASSTHROUGH, "/mcp"),
    ("GET", "/nothing/here", Traffic.PASSTHROUGH, "/{unknown}"),
]

BYPASS_SPELLINGS = [
    ("POST", "/api/memories/search/", Traffic.MEMORY_OTHER),
    ("POST", "/api/memories%2Fsearch", Traffic.MEMORY_OTHER),
    ("POST", "/api/memories%252Fsearch", Traffic.MEMORY_OTHER),
    ("POST", "/API/MEMORIES/SEARCH", Traffic.MEMORY_OTHER),
    ("POST", "/api//memories/search", Traffic.MEMORY_OTHER),
    ("POST", "//api/memories/search", Traffic.MEMORY_OTHER),
    ("POST", "/api/./memories/search", Traffic.MEMORY_OTHER),
    ("POST", "/api/x/../memories/sessions", Traffic.MEMORY_OTHER),
    ("POST", "/api/%6demories/sessions", Traffic.MEMORY_OTHER),
    ("GET", "/api/memories/", Traffic.MEMORY_OTHER),
    ("POST", "/api/memories", Traffic.MEMORY_OTHER),
    ("PUT", "/api/memories/sessions", Traffic.MEMORY_OTHER),
    ("GET", "/api/memories/search", Traffic.MEMORY_OTHER),
    ("GET", "/embeddings/kagent/a/v1/embeddings", Traffic.MEMORY_OTHER),
    ("POST", "/Embeddings/kagent/a/v1/embeddings", Traffic.MEMORY_OTHER),
    ("POST", "/api/A2A/kagent/a", Traffic.A2A_NONCANONICAL),
    ("POST", "/api/a2a/kagent%2Fa", Traffic.A2A_NONCANONICAL),
    ("POST", "/api/a2a/kagent/a/%2e%2e/b", Traffic.A2A_NONCANONICAL),
    ("POST", "/api/a2a//kagent/a", Traffic.A2A_NONCANONICAL),
    ("GET", "/api/a2a/kagent/x/../k8s-agent/.well-known/agent-card.json", Traffic.A2A_NONCANONICAL),
    ("GET", "/api/a2a/kagent/k8s-agent/x/.well-known/agent-card.json", Traffic.A2A_NONCANONICAL),
    ("GET", "/api/a2a/kagent/k8s-agent/.well-known/agent-card.json/", Traffic.A2A_NONCANONICAL),
    ("POST", "/API/CREWAI/memory", Operation.MEMORY_UNGOVERNED),
    ("POST", "/api/%61gents", Traffic.CONTROLLER_NONCANONICAL),
    ("POST", "/api/Agents", Traffic.CONTROLLER_NONCANONICAL),
    ("PUT", "/api//agents", Traffic.CONTROLLER_NONCANONICAL),
    ("PUT", "/api/x/../agents", Traffic.CONTROLLER_NONCANONICAL),
    ("DELETE", "/api/agents/kagent/./k8s-agent", Traffic.CONTROLLER_NONCANONICAL),
    ("DELETE", "/api/agents/kagent/k8s%2Dagent", Traffic.CONTROLLER_NONCANONICAL),
    ("PUT", "/api/prompttemplates/kagent%2Fmemgov-policies", Traffic.CONTROLLER_NONCANONICAL),
    ("POST", "/api/modelconfigs%2F", Traffic.CONTROLLER_NONCANONICAL),
    ("POST", "/api/sessions/s-1/%73hares", Traffic.CONTROLLER_NONCANONICAL),
    ("GET", "/api/sessions/s-1/Shares", Traffic.CONTROLLER_NONCANONICAL),
    ("DELETE", "/api/sessions/s-1/shares/tok%5F1", Traffic.CONTROLLER_NONCANONICAL),
    ("POST", "/api/sessions/s-1/shares/", Traffic.CONTROLLER_NONCANONICAL),
    ("POST", "/api/sessions/x/../s-1/shares", Traffic.CONTROLLER_NONCANONICAL),
]


class TestClassify:
    @pytest.mark.parametrize(("method", "path", "cls", "template"), CONTROLLER_ROUTES)
    def test_controller_routes(self, method, path, cls, template):
        """Every documented controller route lands in its SPEC §2 class with a loggable template."""
        match = classify(method, path)
        assert (match.cls, match.template) == (cls, template)

    @pytest.mark.parametrize(("method", "path", "cls"), BYPASS_SPELLINGS)
    def test_bypass_spellings_are_never_governed_routes(self, method, path, cls):
        """Encoded, folded, dotted or trailing-slash spellings of governed routes are refused classes."""
        assert classify(method, path).cls is cls

    def test_a2a_params(self):
        """A2A and embedding matches expose namespace and name."""
        assert classify("POST", "/api/a2a/team/my-agent/").params == {"ns": "team", "name": "my-agent", "kind": "a2a"}
        assert classify("POST", "/embeddings/team/e/v1/embeddings").params == {"ns": "team", "name": "e"}

    def test_method_is_case_insensitive(self):
        """Lower-case methods classify like upper-case ones."""
        assert classify("post", "/api/memories/search").cls is Operation.MEMORY_SEARCH

    def test_definition_reads_stay_passthrough(self):
        """Only writes to kagent's definitions are governed; reading them is relayed as before."""
        for method in ("GET", "HEAD", "OPTIONS"):
            assert classify(method, "/api/agents/kagent/k8s-agent").cls is Traffic.PASSTHROUGH
            assert classify(method, "/api/%61gents").cls is Traffic.PASSTHROUGH

    @settings(max_examples=400, deadline=None)
    @given(st.sampled_from(["GET", "POST", "DELETE"]), st.text(alphabet="/%.aAeimnorsx2F-_", max_size=40))
    def test_templates_come_from_a_closed_set(self, method, path):
        """Whatever the path, the loggable template is one of a fixed set, so raw text never reaches a log."""
        assert classify(method, "/" + path).template in KNOWN_TEMPLATES


KNOWN_TEMPLATES = {row[3] for row in CONTROLLER_ROUTES} | {
    "/api/memories/{other}",
    "/api/a2a/{other}",
    "/api/{ungoverned}",
    "/api/{collection}/{other}",
    "/api/a2a/{ns}/{name}/{rest}",
    "/api/a2a-sandboxes/{ns}/{name}/{rest}",
    "/api/a2a-sandboxes/{ns}/{name}/.well-known/agent-card.json",
    "/{invalid}",
}
