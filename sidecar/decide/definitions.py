"""What a kagent definition names and what it claims of memgov's boundary, read as kagent reads it (pure).

kagent decodes a definition with Go's ``encoding/json``: a key matches a struct field whatever its
letter case, the last of two keys for one field wins, and a map (labels, annotations) keeps keys
exactly. A body reaches this module only after ``wire.StrictJSON`` refused duplicates and keys
equal up to case in every object, and :func:`readable` refused keys outside ASCII (Go folds
``ſ``, ``ı`` and the Kelvin sign onto ASCII letters); every object then holds at most one key per
field, so looking a field up by its lower-case spelling finds exactly the value kagent reads.
The gateway forwards a body it serialized from this same value.

The walk is deliberately wider than kagent's structs, so a field kagent adds later cannot slip
past it:

- every map under a key ending in ``labels`` or ``annotations`` (deployment, pod template,
  service account, a tool server's deployment, ``deploymentAnnotations``, the object's own
  metadata), at any depth, is read as labels;
- every ``serviceAccountName`` (and the older ``serviceAccount``) string, at any depth;
- every string anywhere that names one of memgov's Secrets, alone or as ``namespace/name`` (a
  volume, ``secretKeyRef``, ``envFrom``, ``imagePullSecrets``, ``systemMessageFrom``,
  ``headersFrom``, ``apiKeySecret``, companion ``secrets``, ...);
- every ``hostPath`` volume source: the node's files hold the kubelet's copy of every pod's
  Secrets, whatever namespace memgov runs in;
- the definition's own name, after which kagent names the Deployment, Service, ServiceAccount,
  Secret and ConfigMap it creates, and which it copies into ``app.kubernetes.io/name``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from sidecar.policy.model import BoundaryClaim, DefinitionKind, WriteVerb
from sidecar.settings import BoundarySettings
from sidecar.wire import BadBody, StrictJSON

#: Carried by every memgov pod, whatever the configuration says.
NAME_LABEL: Final = "app.kubernetes.io/name"
MEMGOV: Final = "memgov"
#: Label and annotation keys under this prefix are memgov's (boundary markers, exceptions).
MEMGOV_PREFIX: Final = "memgov/"
#: kagent's own selector label of an agent's pods and Service: it names the agent.
AGENT_LABEL: Final = "kagent"
_AGENT_KINDS: Final = frozenset({"agents", "sandboxagents", "agentharnesses"})
VERBS: Final[Mapping[str, WriteVerb]] = {"POST": "create", "PUT": "update", "PATCH": "update", "DELETE": "delete"}


#: Every key is checked against every other in the same object (duplicates and case variants are
#: refused everywhere); no field name is special at the top level.
_PARSER: Final = StrictJSON(())


class Unreadable(ValueError):
    """A definition memgov will not decide: a body it cannot read exactly as kagent does, or a
    target kagent would resolve in a way memgov cannot follow (fixed message, never the input)."""


#: Deeper than any kagent definition nests (its deepest field, an affinity term's values under
#: spec.byo.deployment, is 13 levels down).
MAX_DEPTH: Final = 48


def readable(value: object, depth: int = 0) -> bool:
    """True when every object key in ``value`` is ASCII (Go's case folding of them is then ASCII's)
    and nothing nests deeper than :data:`MAX_DEPTH` (so the walks below are bounded)."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(k.isascii() for k in value) and all(readable(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return all(readable(v, depth + 1) for v in value)
    return True


def field(obj: object, name: str) -> object:
    """The value kagent's decoder puts into the struct field ``name`` of ``obj`` (None when absent)."""
    if not isinstance(obj, dict):
        return None
    for key, value in obj.items():
        if key.lower() == name:
            return value
    return None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class Target:
    """A definition's namespace and name as kagent resolves them."""

    namespace: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def _resolve(name: str, namespace: str, default_ns: str) -> Target:
    """kagent's ``ParseRefString``: ``ns/name`` in the name field wins over the namespace field."""
    if name.count("/") > 1 or not name:
        raise Unreadable("target")
    if "/" in name:
        namespace, name = name.split("/")
        if not namespace or not name:
            raise Unreadable("target")
    return Target(namespace or default_ns, name)


def _metadata_target(obj: object, default_ns: str) -> Target | None:
    meta = field(obj, "metadata")
    if meta is None:
        return None
    return _resolve(_text(field(meta, "name")), _text(field(meta, "namespace")), default_ns)


def targets(kind: DefinitionKind, params: Mapping[str, str], body: object, default_ns: str) -> list[Target]:
    """Every definition a write names: the path's and the body's (kagent acts on the latter on
    ``PUT /api/agents`` and checks them equal elsewhere). Raises Unreadable where kagent would
    resolve a name memgov cannot read (two slashes, an empty name)."""
    found: list[Target] = []
    if "name" in params:
        found.append(Target(params["ns"], params["name"]))
    if body is None:
        return found
    body_targets: list[Target | None]
    if kind in _AGENT_KINDS:
        body_targets = [_metadata_target(body, default_ns)]
    elif kind == "modelconfigs":
        ref = field(body, "ref")
        body_targets = [_resolve(_text(ref), "", default_ns)] if ref is not None else []
    elif kind == "toolservers":
        body_targets = [_metadata_target(field(body, f), default_ns) for f in ("remotemcpserver", "mcpserver")]
    else:  # prompttemplates: a ConfigMap named by the body's own namespace and name
        name = field(body, "name")
        body_targets = [_resolve(_text(name), _text(field(body, "namespace")), default_ns)] if name is not None else []
    for target in body_targets:
        if target is not None and target not in found:
            found.append(target)
    return found


@dataclass(frozen=True, slots=True)
class Definition:
    """A definition write as read: what it does, to which definitions, and the body to forward."""

    kind: DefinitionKind
    verb: WriteVerb
    targets: list[Target]
    #: The parsed body (None for a delete, whose body kagent never reads and memgov never forwards).
    body: dict[str, object] | None


def read(
    kind: DefinitionKind, method: str, params: Mapping[str, str], raw: bytes | None, default_ns: str
) -> Definition:
    """Read a definition write (``raw``: its body, ignored for a delete); raises Unreadable."""
    verb = VERBS[method.upper()]
    body: dict[str, object] | None = None
    if verb != "delete":
        try:
            body = _PARSER.parse_object(raw or b"")
        except BadBody:
            raise Unreadable("body") from None
        if not readable(body):
            # SECURITY: a key outside ASCII may fold onto a field name in Go (`ſpec`, `ımage`).
            raise Unreadable("body")
    return Definition(kind, verb, targets(kind, params, body, default_ns), body)


@dataclass(frozen=True, slots=True)
class Boundary:
    """memgov's identity as configuration states it (``boundary`` settings), plus the markers every
    memgov carries; :meth:`claims` names what a definition takes of it."""

    pairs: frozenset[tuple[str, str]]
    marker_keys: frozenset[str]
    service_accounts: frozenset[str]
    secrets: frozenset[str]
    names: frozenset[str]
    name_prefixes: tuple[str, ...]
    kagent_namespace: str

    @classmethod
    def of(cls, settings: BoundarySettings) -> Boundary:
        pairs = {(k, v) for labels in settings.selectors for k, v in labels.items()} | {(NAME_LABEL, MEMGOV)}
        # kagent labels an agent's pods app.kubernetes.io/name=<agent name>: a definition named like
        # memgov's name label takes that label without writing it.
        named = {v for k, v in pairs if k == NAME_LABEL}
        return cls(
            pairs=frozenset(pairs),
            marker_keys=frozenset(settings.marker_keys),
            service_accounts=frozenset(settings.service_accounts),
            secrets=frozenset(settings.secrets),
            names=frozenset({*settings.names, *settings.secrets, *settings.service_accounts, *named, MEMGOV}),
            name_prefixes=tuple(settings.name_prefixes),
            kagent_namespace=settings.kagent_namespace,
        )

    def claims(self, body: object, own: Iterable[Target]) -> list[BoundaryClaim]:
        """The kinds of field of ``body`` (and of its own names ``own``) that claim memgov's identity."""
        found: set[BoundaryClaim] = set()
        names = {t.name for t in own}
        if names & self.names or any(n.startswith(self.name_prefixes) for n in names if self.name_prefixes):
            found.add("name")
        self._walk(body, names, found)
        return sorted(found)

    def _labels(self, labels: dict[str, object], kind: Literal["label", "annotation"], own: set[str]) -> bool:
        for key, value in labels.items():
            if key.lower().startswith(MEMGOV_PREFIX) or key in self.marker_keys:
                return True
            if isinstance(value, str) and (
                (key, value) in self.pairs or (kind == "label" and key == AGENT_LABEL and value not in own)
            ):
                # SECURITY: `kagent: <another agent>` on a pod makes it an endpoint of that agent's Service.
                return True
        return False

    def _secret(self, value: str) -> bool:
        if value in self.secrets:
            return True
        ns, sep, name = value.partition("/")
        return bool(sep) and bool(ns) and name in self.secrets

    def _walk(self, value: object, own: set[str], found: set[BoundaryClaim]) -> None:
        if isinstance(value, str):
            if self._secret(value):
                found.add("secret")
        elif isinstance(value, list):
            for item in value:
                self._walk(item, own, found)
        elif isinstance(value, dict):
            for key, item in value.items():
                folded = key.lower()
                if isinstance(item, dict):
                    if folded.endswith("labels") and self._labels(item, "label", own):
                        found.add("label")
                    elif folded.endswith("annotations") and self._labels(item, "annotation", own):
                        found.add("annotation")
                if folded == "hostpath" and item is not None:
                    # SECURITY: the node's own files hold every pod's mounted Secrets, memgov's included.
                    found.add("host_path")
                if (
                    folded in ("serviceaccountname", "serviceaccount")
                    and isinstance(item, str)
                    and item in self.service_accounts
                ):
                    found.add("service_account")
                self._walk(item, own, found)
