"""Pure route classification: ``(method, raw path) → RouteMatch`` (SPEC §2 traffic classes).

Governed handling applies only to the exact, canonical spelling of a memory, A2A, embedding or
definition-write route. A path that merely *decodes or folds* to a governed route (percent-encoded
slashes, other letter case, duplicate slashes, dot segments, trailing slash) is classified
``memory.other``, ``a2a.noncanonical`` or ``controller.noncanonical`` and refused, because kagent's
router may still reach the governed handler through such spellings; refusing them costs nothing
legitimate. (A definition path with only a trailing slash added reaches no definition handler in
kagent, and under ``/api/agentharnesses/{ns}/{name}/`` it is the harness gateway: relayed.)
"""

from __future__ import annotations

import enum
import posixpath
import re
from dataclasses import dataclass, field
from typing import Final, TypeAlias
from urllib.parse import unquote


class Operation(enum.StrEnum):
    """The governed operations (SPEC §2) and the content-bearing control call: what the policy decides.

    The values are the decision input's ``operation``, the Cedar action ids, and the ``route_class``
    metric and log label of the data plane's governed routes.
    """

    A2A_INVOKE = "a2a.invoke"
    MEMORY_SAVE = "memory.save"
    MEMORY_SAVE_BATCH = "memory.save_batch"
    MEMORY_SEARCH = "memory.search"
    MEMORY_LIST = "memory.list"
    MEMORY_DELETE_ALL = "memory.delete_all"
    MEMORY_UNGOVERNED = "memory.ungoverned"
    EMBEDDING = "embedding"
    CONTROL_INSPECT = "control.inspect"
    CONTROLLER_WRITE = "controller.write"
    SESSION_SHARE = "session.share"


class Traffic(enum.StrEnum):
    """Traffic no policy decides: relayed as it came, or refused for its spelling before any decision."""

    A2A_CARD = "a2a.card"
    A2A_NONCANONICAL = "a2a.noncanonical"
    MEMORY_OTHER = "memory.other"
    CONTROLLER_NONCANONICAL = "controller.noncanonical"
    PASSTHROUGH = "passthrough"
    INVALID = "invalid"


#: Every class a data-plane request is classified into; the values are the bounded ``route_class`` label.
RouteClass: TypeAlias = Operation | Traffic


#: Classes whose upstream error bodies are replaced (they can carry memory or DB text).
CONTENT_CLASSES: Final = frozenset(
    {
        Operation.MEMORY_SAVE,
        Operation.MEMORY_SAVE_BATCH,
        Operation.MEMORY_SEARCH,
        Operation.MEMORY_LIST,
        Operation.MEMORY_DELETE_ALL,
        Operation.EMBEDDING,
    }
)


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """Result of classification: the class, a loggable template and the path parameters."""

    cls: RouteClass
    template: str
    params: dict[str, str] = field(default_factory=dict)


_SEG = r"[A-Za-z0-9][A-Za-z0-9._\-]{0,252}"
_MEMORY_EXACT: Final[dict[tuple[str, str], RouteClass]] = {
    ("POST", "/api/memories/sessions"): Operation.MEMORY_SAVE,
    ("POST", "/api/memories/sessions/batch"): Operation.MEMORY_SAVE_BATCH,
    ("POST", "/api/memories/search"): Operation.MEMORY_SEARCH,
    ("GET", "/api/memories"): Operation.MEMORY_LIST,
    ("DELETE", "/api/memories"): Operation.MEMORY_DELETE_ALL,
}
_A2A = re.compile(rf"^/api/(?P<kind>a2a|a2a-sandboxes)/(?P<ns>{_SEG})/(?P<name>{_SEG})(?P<rest>/.*)?$")
_CARD_SUFFIX: Final = "/.well-known/agent-card.json"
_EMBEDDING = re.compile(rf"^/embeddings/(?P<ns>{_SEG})/(?P<name>{_SEG})/v1/embeddings$")
_UNGOVERNED = re.compile(r"^/api/(crewai/memory|crewai/flows/state|langgraph(/.*)?)$")
#: kagent's definition collections: what a write there creates or changes is a workload or its config.
DEFINITIONS: Final = ("agents", "sandboxagents", "agentharnesses", "modelconfigs", "toolservers", "prompttemplates")
_WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFINITION = re.compile(rf"^/api/(?P<kind>{'|'.join(DEFINITIONS)})(?:/(?P<ns>{_SEG})/(?P<name>{_SEG}))?$")
#: kagent v0.10's share links of a session: list and create on the collection, revoke one by token.
_SHARES = re.compile(rf"^/api/sessions/(?P<session>{_SEG})/shares(?:/(?P<token>{_SEG}))?$")
_SHARES_FOLDED = re.compile(r"^/api/sessions/[^/]+/shares(/[^/]+)?$")
_SHARE_VERBS: Final = {("POST", False): "create", ("GET", False): "list", ("DELETE", True): "revoke"}
#: A session's own routes, where a share token makes kagent act as the session's owner.
SESSION_PATH: Final = re.compile(rf"^/api/sessions/(?P<session>{_SEG})(?:/(?:events|tasks))?$")
_DEFINITION_FOLDED = re.compile(rf"^/api/({'|'.join(DEFINITIONS)})(/[^/]+/[^/]+)?$")

# Templates for passthrough routes (logs and metrics never see raw paths).
_TEMPLATES: Final[list[tuple[re.Pattern[str], str]]] = [
    (re.compile(p), t)
    for p, t in [
        (r"^/health$", "/health"),
        (r"^/version$", "/version"),
        (r"^/api/me$", "/api/me"),
        (r"^/api/sessions$", "/api/sessions"),
        (r"^/api/sessions/agent/[^/]+/[^/]+$", "/api/sessions/agent/{ns}/{name}"),
        (r"^/api/sessions/[^/]+$", "/api/sessions/{id}"),
        (r"^/api/sessions/[^/]+/tasks$", "/api/sessions/{id}/tasks"),
        (r"^/api/sessions/[^/]+/events$", "/api/sessions/{id}/events"),
        (r"^/api/sessions/[^/]+/shares(/[^/]+)?$", "/api/sessions/{id}/shares"),
        (r"^/api/tasks$", "/api/tasks"),
        (r"^/api/tasks/[^/]+$", "/api/tasks/{id}"),
        (r"^/api/(agents|sandboxagents|agentharnesses|modelconfigs|toolservers|prompttemplates)$", "/api/{collection}"),
        (
            r"^/api/(agents|sandboxagents|agentharnesses|modelconfigs|toolservers|prompttemplates)/[^/]+/[^/]+$",
            "/api/{collection}/{ns}/{name}",
        ),
        (r"^/api/agentharnesses/[^/]+/[^/]+/.*$", "/api/agentharnesses/{ns}/{name}/{rest}"),
        (r"^/api/modelproviderconfigs/(models|memories|configured)$", "/api/modelproviderconfigs/{kind}"),
        (r"^/api/modelproviderconfigs/configured/[^/]+/models$", "/api/modelproviderconfigs/configured/{name}/models"),
        (r"^/api/(models|tools|toolservertypes|namespaces|feedback)$", "/api/{collection}"),
        (r"^/api/substrate/status$", "/api/substrate/status"),
        (r"^/api/sandbox/ssh$", "/api/sandbox/ssh"),
        # kagent v0.10: MCP apps (rc3 spells the collection with a hyphen; the release notes without).
        (r"^/api/(mcp-apps|mcpapps)(/.*)?$", "/api/mcp-apps/{rest}"),
        (r"^/mcp(/.*)?$", "/mcp"),
    ]
]


# RFC 9112 origin-form: an absolute path made only of the characters RFC 3986 allows there, and
# an optional query of printable ASCII (browsers leave `|`, `[`, `{` … unencoded in queries).
# Anything else (absolute-form, asterisk-form, a fragment, spaces, control or non-ASCII bytes)
# could be read by kagent's router as a path other than the one classified.
_ORIGIN_FORM = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*(\?[\x21-\x22\x24-\x7e]*)?", re.ASCII)
_PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _canonical(decoded: str) -> str:
    """Fold a decoded path the way a lenient router might: case, slashes, dot segments."""
    folded = posixpath.normpath("/" + decoded.lower())
    return folded[1:] if folded.startswith("//") else folded


def classify(method: str, raw_path: str) -> RouteMatch:
    """Classify one request by method and raw (still percent-encoded) path, without I/O."""
    if _ORIGIN_FORM.fullmatch(raw_path) is None or _PCT.search(raw_path.partition("?")[0]) is not None:
        # SECURITY: what memgov classifies is what it forwards; a target it cannot read exactly
        # the way kagent will is refused, whatever it appears to name.
        return RouteMatch(Traffic.INVALID, "/{invalid}")
    method = method.upper()
    path = raw_path.split("?", 1)[0]

    exact = _MEMORY_EXACT.get((method, path))
    if exact is not None:
        return RouteMatch(exact, path)
    if (m := _EMBEDDING.match(path)) is not None:
        if method == "POST":
            return RouteMatch(Operation.EMBEDDING, "/embeddings/{ns}/{name}/v1/embeddings", m.groupdict())
        return RouteMatch(Traffic.MEMORY_OTHER, "/embeddings/{ns}/{name}/v1/embeddings", m.groupdict())
    if (m := _A2A.match(path)) is not None:
        kind, rest = m["kind"], m["rest"] or ""
        params = {"ns": m["ns"], "name": m["name"], "kind": kind}
        if rest == _CARD_SUFFIX:
            return RouteMatch(Traffic.A2A_CARD, f"/api/{kind}/{{ns}}/{{name}}{_CARD_SUFFIX}", params)
        # SECURITY: a card path under another segment ("x/../k8s-agent/.well-known/…") names a
        # different agent once kagent's router cleans it: not a card of {name}, refused here.
        if "%" in rest or "//" in rest or "/." in rest:
            return RouteMatch(Traffic.A2A_NONCANONICAL, f"/api/{kind}/{{ns}}/{{name}}/{{rest}}", params)
        return RouteMatch(Operation.A2A_INVOKE, f"/api/{kind}/{{ns}}/{{name}}", params)
    if _UNGOVERNED.match(path) is not None:
        return RouteMatch(Operation.MEMORY_UNGOVERNED, _ungoverned_template(path))
    if method in _WRITE_METHODS and (m := _DEFINITION.match(path)) is not None:
        params = {k: v for k, v in m.groupdict().items() if v is not None}
        return RouteMatch(Operation.CONTROLLER_WRITE, _definition_template(params), params)

    if (m := _SHARES.match(path)) is not None:
        verb = _SHARE_VERBS.get((method, m["token"] is not None))
        params = {"session": m["session"], "verb": verb or ""}
        if verb is None:
            # Any other method on a share collection or link: no share handler answers it in kagent.
            return RouteMatch(Traffic.PASSTHROUGH, "/api/sessions/{id}/shares")
        return RouteMatch(Operation.SESSION_SHARE, "/api/sessions/{id}/shares", params)

    # Anything whose decoded, folded form lands on a governed prefix is a bypass attempt or a typo.
    folded = _canonical(unquote(unquote(path)))
    if folded == "/api/memories" or folded.startswith(("/api/memories/", "/embeddings/")):
        return RouteMatch(Traffic.MEMORY_OTHER, "/api/memories/{other}")
    if folded.startswith(("/api/a2a/", "/api/a2a-sandboxes/")):
        return RouteMatch(Traffic.A2A_NONCANONICAL, "/api/a2a/{other}")
    if folded.startswith(("/api/crewai/", "/api/langgraph")):
        return RouteMatch(Operation.MEMORY_UNGOVERNED, "/api/{ungoverned}")
    if _SHARES_FOLDED.match(folded) is not None:
        # SECURITY: `/api/sessions/x/%73hares` may reach kagent's share handler once its router
        # decodes the path; only the exact spelling is decided, every other one refused.
        return RouteMatch(Traffic.CONTROLLER_NONCANONICAL, "/api/sessions/{id}/shares")
    trailing_slash_only = path != "/" and _DEFINITION.match(path.rstrip("/")) is not None
    if method in _WRITE_METHODS and _DEFINITION_FOLDED.match(folded) is not None and not trailing_slash_only:
        # SECURITY: kagent's router decodes the path before matching, so `/api/%61gents` or
        # `/api/agents/ns/./name` may reach a definition handler without memgov's decision.
        return RouteMatch(Traffic.CONTROLLER_NONCANONICAL, "/api/{collection}/{other}")
    for rx, template in _TEMPLATES:
        if rx.match(path):
            return RouteMatch(Traffic.PASSTHROUGH, template)
    return RouteMatch(Traffic.PASSTHROUGH, "/{unknown}")


def _definition_template(params: dict[str, str]) -> str:
    return "/api/{collection}/{ns}/{name}" if "name" in params else "/api/{collection}"


def _ungoverned_template(path: str) -> str:
    if path.startswith("/api/langgraph"):
        return "/api/langgraph/{rest}"
    return path
