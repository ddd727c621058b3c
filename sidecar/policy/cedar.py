"""The in-process Cedar engine: parse and validate the pack once, then map each input to a request.

The pack's @id annotations are reason codes in kebab-case; a denial's reasons are the @ids of the
forbid policies that determined it. Any evaluation error fails closed, because Cedar skips an
erroring forbid instead of applying it.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass

import cedarpy

from sidecar.policy.cedar_input import entities, request
from sidecar.policy.engine import EngineUnavailable
from sidecar.policy.model import DecisionInput, Deployment
from sidecar.policy.outcome import Verdict
from sidecar.policy.pack import Pack, PackError
from sidecar.reasons import REASON_VALUES

_KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
#: Cedar line width used by ``memgov policy check`` to decide whether a file is formatted.
FORMAT_WIDTH = 100


class CedarEvalError(EngineUnavailable):
    """Cedar reported an error while evaluating; the decision fails closed."""

    def __init__(self, kind: str = "error") -> None:
        super().__init__(kind)


@dataclass(frozen=True)
class CedarPolicies:
    """Parsed, validated handles of one pack revision."""

    policies: cedarpy.PolicySet
    schema: cedarpy.Schema
    reasons: dict[str, str]


def _annotations(text: str) -> dict[str, dict[str, str]]:
    est = json.loads(cedarpy.policies_to_json_str(text))
    return {pid: body.get("annotations", {}) for pid, body in est.get("staticPolicies", {}).items()}


def compile_pack(pack: Pack) -> CedarPolicies:
    """Parse the schema and policies, validate them against the schema and check every @id."""
    schemas = pack.select("cedar", ".cedarschema")
    if len(schemas) != 1:
        raise PackError("cedar/: expected exactly one .cedarschema file")
    sources = pack.select("cedar", ".cedar")
    if not sources:
        raise PackError("cedar/: no .cedar policy files")
    text = "\n".join(sources[rel] for rel in sorted(sources))
    try:
        schema = cedarpy.Schema.from_str(next(iter(schemas.values())))
    except ValueError:
        raise PackError("cedar/: the schema does not parse") from None
    try:
        policies = cedarpy.PolicySet.from_str(text)
        annotations = _annotations(text)
    except ValueError:
        raise PackError("cedar/: the policies do not parse") from None
    result = cedarpy.validate_policies(text, schema)
    if not result.validation_passed:
        bad = sorted({result.id_annotations_by_policy_id.get(e.policy_id, e.policy_id) for e in result.errors})
        raise PackError("cedar/: policies fail schema validation: " + ", ".join(bad))
    return CedarPolicies(policies, schema, _reason_map(annotations))


def _reason_map(annotations: dict[str, dict[str, str]]) -> dict[str, str]:
    reasons: dict[str, str] = {}
    for pid, notes in annotations.items():
        ident = notes.get("id", "")
        code = ident.replace("-", "_")
        if not _KEBAB.fullmatch(ident) or code not in REASON_VALUES:
            raise PackError(f"cedar/: policy {pid} needs an @id that is a reason code in kebab-case")
        if not notes.get("rationale"):
            raise PackError(f"cedar/: policy {ident} needs a @rationale")
        if code in reasons.values():
            raise PackError(f"cedar/: @id {ident} is used twice")
        reasons[pid] = code
    return reasons


def _verdict(result: cedarpy.AuthzResult, reasons: dict[str, str]) -> Verdict:
    if result.diagnostics.errors:
        # SECURITY: Cedar ignores a forbid that errors; we refuse instead of permitting.
        raise CedarEvalError()
    if result.allowed:
        return Verdict(allowed=True, reasons=frozenset())
    return Verdict(allowed=False, reasons=frozenset(reasons.get(pid, "") for pid in result.diagnostics.reasons))


class CedarEngine:
    """Cedar in-process; entity handles are cached so a steady conversation parses only its context."""

    name = "cedar"
    stale = False
    _CACHE = 512

    def __init__(self) -> None:
        self._compiled: CedarPolicies | None = None
        self._handles: OrderedDict[tuple[object, object], tuple[Deployment, cedarpy.Entities]] = OrderedDict()

    def prepare(self, pack: Pack) -> CedarPolicies:
        """Compile a pack without touching the running one."""
        return compile_pack(pack)

    async def commit(self, compiled: CedarPolicies) -> None:
        """Swap in a compiled pack; one assignment, so a decision sees the old or the new pack."""
        self._handles = OrderedDict()
        self._compiled = compiled

    def _entities(self, compiled: CedarPolicies, inp: DecisionInput) -> cedarpy.Entities:
        # Keyed by the (hashable, frozen) principal and scope; the deployment is compared by value.
        key = (inp.principal, inp.scope)
        found = self._handles.get(key)
        if found is not None and (found[0] is inp.deployment or found[0] == inp.deployment):
            self._handles.move_to_end(key)
            return found[1]
        handle = cedarpy.Entities.from_json_str(json.dumps(entities(inp)), compiled.schema)
        self._handles[key] = (inp.deployment, handle)
        if len(self._handles) > self._CACHE:
            self._handles.popitem(last=False)
        return handle

    def decide_sync(self, inp: DecisionInput) -> Verdict:
        """Decide one input on the calling thread."""
        compiled = self._compiled
        if compiled is None:
            raise CedarEvalError("unloaded")
        try:
            handle = self._entities(compiled, inp)
            # The request is not re-validated against the schema: the entities were, and a type
            # error in the context makes evaluation fail, which denies.
            result = cedarpy.is_authorized(request(inp), compiled.policies, handle)
        except (ValueError, TypeError):
            raise CedarEvalError("malformed") from None
        return _verdict(result, compiled.reasons)

    def decide_many_sync(self, inputs: list[DecisionInput]) -> list[Verdict]:
        """Decide a fan-out in one call when the inputs share their entities (prefetch)."""
        compiled = self._compiled
        if compiled is None:
            raise CedarEvalError("unloaded")
        first = inputs[0]
        shared = (first.principal, first.scope, first.deployment)
        if any((i.principal, i.scope, i.deployment) != shared for i in inputs):
            return [self.decide_sync(inp) for inp in inputs]
        try:
            handle = self._entities(compiled, first)
            results = cedarpy.is_authorized_batch([request(i) for i in inputs], compiled.policies, handle)
        except (ValueError, TypeError):
            raise CedarEvalError("malformed") from None
        return [_verdict(r, compiled.reasons) for r in results]

    async def decide(self, inp: DecisionInput) -> Verdict:
        """Decide one input (in-process, no await inside)."""
        return self.decide_sync(inp)

    async def decide_many(self, inputs: list[DecisionInput]) -> list[Verdict]:
        """Decide several inputs."""
        return self.decide_many_sync(inputs) if inputs else []

    async def close(self) -> None:
        """Nothing to release."""
