"""``memgov policy prove``: the pack's declared properties, proved for every request.

Examples only show what they try. Cedar's symbolic compiler (cedar-policy-symcc, run by the
``memgov-symcc`` helper of tools/symcc/ on the cvc5 solver) decides a property for all requests
of an action at once. A property of ``properties.yaml`` says: every request the pack allows, of
these actions, meets this condition. It is checked as an implication between two policy sets:
the pack plus a forbid of every unrealistic request (the file's ``assume``, the pack's own data,
the decision input's bounds), and a single permit of the condition. A failure comes back as a
concrete Cedar request, which is turned into a memgov decision input and replayed on both
engines, so the Rego pack is checked on exactly the case that matters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sidecar.identity.mxid import Origin
from sidecar.policy.cedar_input import limits_record
from sidecar.policy.counterexample import Finding, replay
from sidecar.policy.model import AgentLimitName
from sidecar.policy.pack import Pack, PackError, is_complete
from sidecar.policy.symcc import Verdict, run_helper, verdicts
from sidecar.policy.tree import load_yaml

PROPERTIES_FILE: Final = "properties.yaml"
SCHEMA_FILE: Final = "cedar/memgov.cedarschema"
NEVER_ERRORS: Final = "never-errors"
#: The decision input's bound on every count and time (model._BIG).
_BIG: Final = 2**53


class Property(BaseModel):
    """One entry of properties.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., pattern=r"^[a-z][a-z0-9-]{1,47}$", description="Kebab-case name, printed in reports.")
    description: str = Field(..., min_length=1, max_length=200, description="What the property guarantees.")
    actions: list[str] = Field(..., min_length=1, description="Action ids or action groups of the schema.")
    allows_only_if: str = Field(..., min_length=1, description="Cedar condition every allowed request meets.")


class Properties(BaseModel):
    """properties.yaml: shared assumptions and the properties."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    assume: str = Field("true", description="Cedar condition every realistic request meets.")
    properties: list[Property] = Field(default_factory=list, description="The properties to prove.")


def load_properties(root: Path) -> Properties:
    """The pack's properties.yaml; PackError names the file and the fields at fault."""
    path = root / PROPERTIES_FILE
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
        props = Properties.model_validate(raw)
    except FileNotFoundError:
        raise PackError(f"{PROPERTIES_FILE}: not found in {root}", file=PROPERTIES_FILE) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise PackError(f"{PROPERTIES_FILE}{line}: not YAML", file=PROPERTIES_FILE) from None
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors())
        raise PackError(f"{PROPERTIES_FILE}: invalid ({where})", file=PROPERTIES_FILE) from None
    names = [p.name for p in props.properties]
    if len(set(names)) != len(names) or NEVER_ERRORS in names:
        raise PackError(f"{PROPERTIES_FILE}: property names must be unique and not {NEVER_ERRORS}")
    return props


def _str(value: str) -> str:
    return json.dumps(value)


def _set(values: list[str]) -> str:
    return "[" + ", ".join(_str(v) for v in values) + "]"


def _bounded(expr: str) -> str:
    return f"(0 <= {expr} && {expr} <= {_BIG})"


def _bounded_optional(record: str, attr: str) -> str:
    # Cedar's typechecker follows `has` through `if` and `&&`, not through `!... ||`.
    return f"(if {record} has {attr} then {_bounded(f'{record}.{attr}')} else true)"


#: The agent caps memgov joins into context.agent for Cedar, by limits.yaml name.
_CAPS: Final[tuple[tuple[AgentLimitName, str], ...]] = (
    ("embedding_items_per_agent_hour", "embeddingCap"),
    ("hourly_operations", "hourlyCap"),
)


def _agent_cap(pack: Pack, name: AgentLimitName, attr: str) -> str:
    """The agent's own cap as memgov joins it from agent_limits (cedar_input): per named agent, else global."""
    cap = f"context.agent.{attr} == {getattr(pack.limits, name)}"
    for ref, value in sorted(pack.limits.agent_caps(name, pack.org).items(), reverse=True):
        named = f"context.agent.known && context.agent.ref == {_str(ref)}"
        cap = f"(if {named} then context.agent.{attr} == {value} else {cap})"
    return cap


def data_assumptions(pack: Pack) -> str:
    """The pack's data and the decision input's bounds as one Cedar condition."""
    fed = pack.federation
    complete = [p for p in fed.partners if is_complete(p)]
    audience = sorted({p.server_name for p in complete if p.classification == fed.classification})
    origins = _set([o.value for o in Origin])
    # Each principal's partner origins are the ones complete records admit for its server.
    by_server: dict[str, set[str]] = {}
    for rec in complete:
        by_server.setdefault(rec.server_name, set()).update(o.value for o in rec.origins)
    partner = "principal.partnerOrigins.isEmpty()"
    for server, admitted in sorted(by_server.items(), reverse=True):
        partner = (
            f"(if principal.serverName == {_str(server)} "
            f"then principal.partnerOrigins == {_set(sorted(admitted))} else {partner})"
        )
    limits = ", ".join(f"{k}: {v}" for k, v in limits_record(pack.limits).items())
    caps = [_agent_cap(pack, name, attr) for name, attr in _CAPS]
    org = [f"context.deployment.org.{name} == {_set(items)}" for name, items in sorted(pack.org.items())]
    parts = [
        f"context.deployment.limits == {{{limits}}}",
        f"context.deployment.classification == {_str(fed.classification)}",
        "context.deployment.audienceServers == "
        + "["
        + ", ".join(["context.deployment.serverName", *map(_str, audience)])
        + "]",
        *org,
        *caps,
        f"(!principal.known || ({origins}.contains(principal.origin) && {partner}))",
        f'(!resource.exists || ({origins}.contains(resource.origin) && resource.kind == "control_room"'
        f" && {_bounded('resource.generation')}))",
        _bounded("context.entries.count"),
        _bounded("context.entries.cap"),
        _bounded("context.request.itemCount"),
        _bounded("context.request.maxItemBytes"),
        _bounded("context.budget.embeddingUsed"),
        _bounded("context.budget.hourlyUsed"),
        _bounded("context.now"),
        _bounded_optional("context.request", "presentedGeneration"),
        _bounded_optional("context.delegation", "expiresAt"),
    ]
    return " &&\n  ".join(parts)


def _policies(pack: Pack) -> str:
    return "\n".join(text for _, text in sorted(pack.select("cedar", ".cedar").items()))


def _assume_forbid(condition: str) -> str:
    return f'@id("prove-assumption")\nforbid (principal, action, resource)\nunless {{\n  {condition}\n}};\n'


def _assumed(pack: Pack, props: Properties) -> str:
    """Every realistic request of ``pack``: the file's assumptions and the pack's data, as one forbid."""
    return _assume_forbid(f"({props.assume}) &&\n  {data_assumptions(pack)}")


def job(pack: Pack, props: Properties) -> dict[str, Any]:
    """The helper's job: one implication per property, and never-errors over every policy."""
    policies = _policies(pack)
    assumed = policies + "\n" + _assumed(pack, props)
    checks: list[dict[str, Any]] = [
        {
            "name": p.name,
            "kind": "implies",
            "actions": p.actions,
            "lhs": assumed,
            "rhs": f'@id("{p.name}")\npermit (principal, action, resource)\nwhen {{\n{p.allows_only_if}\n}};\n',
        }
        for p in props.properties
    ]
    checks.append({"name": NEVER_ERRORS, "kind": "never_errors", "actions": [], "lhs": policies})
    return {"schema": pack.files[SCHEMA_FILE], "checks": checks}


def equivalence_job(old: Pack, new: Pack, props: Properties) -> dict[str, Any]:
    """The helper's job for ``diff --semantic``: both packs decide every realistic request alike, per action.

    Realistic is judged by the new pack's data and assumptions, on both sides.
    """
    assumed = _assumed(new, props)
    return {
        "schema": new.files[SCHEMA_FILE],
        "checks": [
            {
                "name": "equivalent",
                "kind": "equivalent",
                "actions": [],
                "lhs": _policies(old) + "\n" + assumed,
                "rhs": _policies(new) + "\n" + assumed,
            }
        ],
    }


def _yaml(data: Any) -> list[str]:
    return yaml.safe_dump(data, sort_keys=False, width=120).splitlines()


def _example(f: Finding, where: Path | None) -> list[str]:
    """A counterexample as its decision input (the deployment block left out) and each answer to it."""
    if f.inp is None:
        return [
            f"    counterexample outside the decision input's bounds ({f.problem}); Cedar request:",
            *("      " + ln for ln in _yaml((f.raw or {}).get("request"))),
        ]
    head = f" ({where}; replay: memgov policy explain --input {where})" if where else " (decision input):"
    width = max(len(k) for k in f.answers) + 1
    return [
        "    counterexample" + head,
        *("      " + ln for ln in _yaml(f.inp.model_dump(mode="json", exclude={"deployment"}))),
        *(f"    {k + ':':<{width}} {a}" for k, a in f.answers.items()),
    ]


def render_proof(props: Properties, results: list[Verdict], findings: list[Finding], files: dict[int, Path]) -> str:
    """Per property: proved for which actions, or each counterexample with both engines' answers."""
    lines = []
    order = [p.name for p in props.properties] + [NEVER_ERRORS]
    by_prop = {name: [v for v in results if v.prop == name] for name in order}
    for name in order:
        mine = by_prop[name]
        failed = [v for v in mine if not v.proved]
        actions = sorted({v.action for v in mine})
        if not failed:
            lines.append(f"proved  {name}: {', '.join(actions) or 'no action'}")
            continue
        for v in failed:
            what = f"{v.action}" + (f" (@id {v.policy})" if v.policy else "")
            lines.append(f"FAILS   {name}: {what}")
            f = next(x for x in findings if x.verdict is v)
            lines += _example(f, files.get(id(v)))
    proved = sum(1 for name in order if all(v.proved for v in by_prop[name]))
    lines.append(f"{proved} of {len(order)} properties proved")
    return "\n".join(lines)


def write_counterexamples(findings: list[Finding], out: Path) -> dict[int, Path]:
    """Each counterexample as ``OUT/<property>-<action>[-<policy>].yaml``, ready for explain --input."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for f in findings:
        if f.inp is None:
            continue
        v = f.verdict
        stem = "-".join(x for x in (v.prop, v.action.replace(".", "_"), v.policy or "") if x)
        path = out / f"{stem}.yaml"
        path.write_text(yaml.safe_dump(f.inp.model_dump(mode="json"), sort_keys=False), encoding="utf-8")
        files[id(v)] = path
    return files


async def prove(pack: Pack, props: Properties) -> tuple[list[Verdict], list[Finding]]:
    """Every verdict, and each failure's counterexample replayed on both engines of the pack."""
    results = verdicts(run_helper(job(pack, props)))
    return results, await replay(pack, [v for v in results if not v.proved], {"": pack})


async def semantic_diff(old: Pack, new: Pack, props: Properties) -> tuple[list[Verdict], list[Finding]]:
    """Per action, whether the packs decide alike; each request they do not, replayed on both packs."""
    results = verdicts(run_helper(equivalence_job(old, new, props)))
    changed = [v for v in results if not v.proved]
    return results, await replay(new, changed, {"old ": old, "new ": new})


def render_semantic(results: list[Verdict], findings: list[Finding]) -> str:
    """One line per action: equivalent, or the changed request with both packs' answers."""
    lines = []
    for v in sorted(results, key=lambda r: r.action):
        if v.proved:
            lines.append(f"equivalent  {v.action}")
            continue
        lines.append(f"CHANGED     {v.action}")
        f = next(x for x in findings if x.verdict is v)
        lines += _example(f, None)
    changed = sum(1 for v in results if not v.proved)
    lines.append(f"{len(results) - changed} of {len(results)} actions decide every request alike")
    return "\n".join(lines)
