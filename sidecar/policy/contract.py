"""What a change does to the pack's contract: properties.yaml and the data files, item by item.

``memgov policy diff`` lists every change to properties.yaml (a property added, removed, or with
other actions, codes or condition; the shared assumptions) and to the data (each limit with its
direction, each agent's caps, partner records, the classification, org lists, declared codes).
A limit that grows, an agent cap that grows or goes away, a partner record added or an assumption
changed is a loosening until a reviewer says otherwise; a removed or changed property is one too,
since nothing holds the pack to it any more (``prove --baseline`` still does).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Final

from sidecar.policy.model import AGENT_LIMIT_NAMES
from sidecar.policy.pack import Pack, is_complete
from sidecar.policy.properties import Properties, Property

LOOSER: Final = "looser"
STRICTER: Final = "stricter"
CHANGED: Final = "changed"


@dataclass(frozen=True)
class ContractChange:
    """One change to the contract: what, which way, and the detail a reviewer reads."""

    area: str
    item: str
    direction: str
    detail: str

    def __str__(self) -> str:
        return f"{self.area}: {self.item}: {self.detail}"


def _text_diff(before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return "; ".join(ln for ln in list(lines)[2:] if not ln.startswith("@@"))


def _property(old: Property | None, new: Property | None) -> ContractChange | None:
    if old == new:
        return None
    if old is None and new is not None:
        return ContractChange("properties.yaml", new.name, STRICTER, f"added ({', '.join(new.actions)})")
    if new is None and old is not None:
        return ContractChange("properties.yaml", old.name, LOOSER, "removed: nothing proves it any more")
    assert old is not None and new is not None
    parts = []
    if old.actions != new.actions:
        parts.append(f"actions {old.actions} -> {new.actions}")
    if old.enforced_by != new.enforced_by:
        parts.append(f"enforced_by {old.enforced_by} -> {new.enforced_by}")
    if old.allows_only_if != new.allows_only_if:
        parts.append("allows_only_if " + _text_diff(old.allows_only_if, new.allows_only_if))
    if old.description != new.description and not parts:
        return ContractChange("properties.yaml", new.name, CHANGED, "description reworded")
    return ContractChange("properties.yaml", new.name, LOOSER, "; ".join(parts) or "changed")


def properties_changes(old: Properties | None, new: Properties | None) -> list[ContractChange]:
    """Every change to properties.yaml; a dropped or rewritten property or assumption counts as looser."""
    old, new = old or Properties(), new or Properties()
    out = []
    if old.assume != new.assume:
        out.append(ContractChange("properties.yaml", "assume", LOOSER, _text_diff(old.assume, new.assume)))
    names = list(dict.fromkeys([p.name for p in old.properties] + [p.name for p in new.properties]))
    for name in names:
        found = _property(old.named(name), new.named(name))
        if found is not None:
            out.append(found)
    return out


def _direction(before: int | None, after: int | None) -> str:
    if before is None or after is None:
        return LOOSER if after is None else STRICTER
    return LOOSER if after > before else STRICTER


def data_changes(old: Pack, new: Pack) -> list[ContractChange]:
    """Every change to limits.yaml, federation.yaml, org.yaml and reasons.yaml, with its direction."""
    out = []
    for name in type(new.limits).model_fields:
        if name == "agent_limits":
            continue
        before, after = getattr(old.limits, name), getattr(new.limits, name)
        if before != after:
            out.append(ContractChange("data/limits.yaml", name, _direction(before, after), f"{before} -> {after}"))
    for name in AGENT_LIMIT_NAMES:
        caps_old, caps_new = old.limits.agent_caps(name, old.org), new.limits.agent_caps(name, new.org)
        for ref in sorted(set(caps_old) | set(caps_new)):
            before, after = caps_old.get(ref), caps_new.get(ref)
            if before != after:
                shown = f"{before if before is not None else 'global'} -> {after if after is not None else 'global'}"
                out.append(
                    ContractChange("data/limits.yaml", f"agent_limits {ref} {name}", _direction(before, after), shown)
                )
    fed_old, fed_new = old.federation, new.federation
    if fed_old.classification != fed_new.classification:
        out.append(
            ContractChange(
                "data/federation.yaml",
                "classification",
                CHANGED,
                f"{fed_old.classification} -> {fed_new.classification}",
            )
        )
    before_p = {p.model_dump_json() for p in fed_old.partners}
    after_p = {p.model_dump_json() for p in fed_new.partners}
    for p in fed_new.partners:
        if p.model_dump_json() not in before_p:
            kind = "complete" if is_complete(p) else "incomplete (admits nothing)"
            origins = ", ".join(o.value for o in p.origins)
            out.append(
                ContractChange(
                    "data/federation.yaml", f"partner {p.server_name}", LOOSER, f"added, {kind}, origins [{origins}]"
                )
            )
    for p in fed_old.partners:
        if p.model_dump_json() not in after_p:
            out.append(ContractChange("data/federation.yaml", f"partner {p.server_name}", STRICTER, "removed"))
    for name in sorted(set(old.org) | set(new.org)):
        if old.org.get(name) != new.org.get(name):
            added = sorted(set(new.org.get(name, [])) - set(old.org.get(name, [])))
            gone = sorted(set(old.org.get(name, [])) - set(new.org.get(name, [])))
            out.append(ContractChange("data/org.yaml", name, CHANGED, f"added {added}, removed {gone}"))
    codes_old = {d.code: d for d in old.reasons}
    codes_new = {d.code: d for d in new.reasons}
    for code in sorted(set(codes_old) | set(codes_new)):
        if codes_old.get(code) != codes_new.get(code):
            what = "added" if code not in codes_old else "removed" if code not in codes_new else "changed"
            out.append(ContractChange("data/reasons.yaml", code, CHANGED, what))
    return out
