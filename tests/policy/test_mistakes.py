"""A corpus of mistakes real policy changes make, each planted in a copy of the pack (and its tables),
and the gate of the reviewer's workflow that fails on it: ``check``, ``test`` or ``prove``.

The kinds follow a review of the workflow on planted mistakes: those ``check``, ``test`` and
``prove`` already caught, the nine that showed only in ``policy diff`` (most with the row that
showed them edited away), the three that slipped past every tool, and the data and rule mistakes
``check`` missed. Every mistake here makes its gate fail except the one that ``check`` only warns
about (an agent the gateway configuration does not name), which ``policy diff`` lists instead.
The prove gates run one property each (``--property``), which is what the corpus needs and keeps
the module's time down.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.policy.test_cli import run_cli, run_diff
from tests.policy.test_prove import PLANTED
from tests.support.policy import CASES_DIR, PACK_DIR

DECISION = "rego/memgov/decision"
PLAIN_INVOKE = '(action == Action::"a2a.invoke" && !context.agent.memoryEnabled)'
UNLESS = f"unless {{ {PLAIN_INVOKE.strip('()')} }};"
ROOM_TAIL = "    context.room.serverAcl.allowIpLiterals\n  else\n    true\n}\n"

#: The kinds of the review, and what each means.
KINDS = {
    "check": "caught by check before",
    "test": "caught by test before",
    "prove": "caught by prove before",
    "diff-only": "showed only in policy diff; every command passed",
    "slipped": "slipped past every tool",
    "check-miss": "a data or rule mistake check missed",
}


@dataclass(frozen=True)
class Mistake:
    """One planted mistake: edits to the pack and the tables, the gate that must fail and what it says."""

    name: str
    kind: str
    gate: str
    expect: str
    edits: list[tuple[str, str, str]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    #: Rows of the tables edited with the mistake: name -> new expectation (None: the row is deleted).
    rows: dict[str, dict[str, object] | None] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    #: False for the one mistake check only warns about ...
    fails: bool = True
    #: ... which ``policy diff --exit-code`` shows instead, with this line.
    diff: str = ""


MISTAKES = [
    # ---- caught by check before -------------------------------------------------------------
    Mistake(
        "Cedar policy missing its closing brace",
        "check",
        "check",
        "cedar/consent.cedar:14:1: unexpected token `unless`",
        [("cedar/consent.cedar", "when { !resource.exists }", "when { !resource.exists ")],
    ),
    Mistake(
        "Cedar attribute misspelt",
        "check",
        "check",
        "attribute `request.keyVald` not found; did you mean `keyValid`?",
        [("cedar/consent.cedar", "!context.request.keyValid", "!context.request.keyVald")],
    ),
    Mistake(
        "Cedar file not formatted",
        "check",
        "check",
        "FAIL cedar format",
        [("cedar/routes.cedar", "permit (principal, action, resource);", "permit(principal,action,resource);")],
    ),
    Mistake(
        "Rego reason code misspelt",
        "check",
        "check",
        "'agent_mismatc' is not a reason code",
        [(f"{DECISION}/consent.rego", 'deny contains "agent_mismatch"', 'deny contains "agent_mismatc"')],
    ),
    Mistake(
        "Rego input field misspelt",
        "check",
        "check",
        "presented_generaton",
        [
            (
                f"{DECISION}/consent.rego",
                "is_number(input.request.presented_generation)",
                "is_number(input.request.presented_generaton)",
            )
        ],
    ),
    Mistake(
        "Rego helper without METADATA",
        "check",
        "check",
        "missing metadata",
        [(f"{DECISION}/limits.rego", "hourly_ok if {", "weekend if input.now < 0\n\nhourly_ok if {")],
    ),
    Mistake(
        "room rules deleted from the Cedar pack",
        "check",
        "check",
        "cedar/: no rule for: room_state_invalid, context_missing",
        files={"cedar/room.cedar": ""},
    ),
    # ---- caught by test before --------------------------------------------------------------
    Mistake(
        "a row expecting the wrong reason",
        "test",
        "test",
        "FAIL [cedar] limits::automatic save of 11 facts is refused",
        rows={"automatic save of 11 facts is refused": {"action": "deny", "reasons": ["fact_too_large"]}},
    ),
    Mistake(
        "a Rego rule refusing every list",
        "test",
        "test",
        "DISAGREE consent::list at the current generation is forwarded",
        files={
            f"{DECISION}/extra.rego": "package memgov.decision\n\n# METADATA\n# custom:\n#   reason: rate_limited\n"
            'deny contains "rate_limited" if input.operation == "memory.list"\n'
        },
    ),
    Mistake(
        "a Cedar policy no row fires",
        "test",
        "test",
        "1 rule(s) no case fires",
        files={
            "cedar/extra.cedar": '@id("rate-limited/weekend")\n@rationale("r")\nforbid (\n  principal,\n  action,\n'
            "  resource\n)\nwhen { context.now < 0 };\n"
        },
    ),
    Mistake(
        "Rego fact size compared with <",
        "test",
        "test",
        "FAIL [opa] limits::fact of 512 ASCII bytes is forwarded",
        [
            (
                f"{DECISION}/limits.rego",
                "not input.request.max_item_bytes <= input.deployment.limits.max_fact_bytes",
                "not input.request.max_item_bytes < input.deployment.limits.max_fact_bytes",
            )
        ],
    ),
    Mistake(
        "Rego generation check dropped",
        "test",
        "test",
        "FAIL [opa] consent::",
        [
            (
                f"{DECISION}/consent.rego",
                "\tkeyed\n\thas_scope\n\tnot current_generation\n",
                "\tkeyed\n\thas_scope\n\tfalse\n",
            )
        ],
    ),
    Mistake(
        "Rego native principal of another homeserver admitted",
        "test",
        "test",
        "FAIL [opa] identity::native principal of another homeserver is refused",
        [(f"{DECISION}/federation.rego", "\tnot native_elsewhere\n", "")],
    ),
    Mistake(
        "Cedar audience classification not compared",
        "test",
        "test",
        "FAIL [cedar] identity::public classification is refused",
        [
            (
                "cedar/federation.cedar",
                "context.audience.classification != context.deployment.classification ||\n    ",
                "",
            )
        ],
    ),
    Mistake(
        "Rego localpart check that a null principal passes",
        "test",
        "test",
        "principal=null",
        [
            (
                f"{DECISION}/federation.rego",
                '\thas_principal\n\tinput.principal.localpart != ""\n\tinput.principal.server_name != ""\n',
                '\tnot input.principal.localpart == ""\n\tnot input.principal.server_name == ""\n',
            )
        ],
    ),
    Mistake(
        "Rego agent hourly cap compared with <",
        "test",
        "test",
        "FAIL [opa] limits::",
        [
            (
                f"{DECISION}/limits.rego",
                'input.budget.hourly_operations_used <= agent_cap("hourly_operations")',
                'input.budget.hourly_operations_used < agent_cap("hourly_operations")',
            )
        ],
    ),
    Mistake(
        "Cedar rate limit exempting every invoke",
        "test",
        "test",
        "DIFFER invoke ~ budget.rate_ok=false",
        [
            (
                "cedar/limits.cedar",
                "when { !context.budget.rateOk }\n" + UNLESS,
                "when { !context.budget.rateOk }\n"
                'unless { action == Action::"a2a.invoke" || !context.agent.memoryEnabled };',
            )
        ],
    ),
    # ---- caught by prove before -------------------------------------------------------------
    Mistake(
        "ops-bot exempt from room state, in both languages",
        "prove",
        "prove",
        "FAILS   room-state-valid: a2a.invoke, control.inspect",
        list(PLANTED[0][1]),
        args=("--property", "room-state-valid"),
    ),
    Mistake(
        "native principal's server matched by suffix, in both languages",
        "prove",
        "prove",
        "FAILS   federation-deny-by-default: a2a.invoke, control.inspect",
        [
            (
                "cedar/federation.cedar",
                "principal.serverName != context.deployment.serverName",
                '!(principal.serverName like "*example.org")',
            ),
            (
                f"{DECISION}/federation.rego",
                "\tinput.principal.server_name != input.deployment.server_name\n",
                '\tnot endswith(input.principal.server_name, "example.org")\n',
            ),
        ],
        args=("--property", "federation-deny-by-default"),
    ),
    Mistake(
        "audience check deleted, in both languages",
        "prove",
        "prove",
        "FAILS   audience-local-and-partners",
        list(PLANTED[2][1]),
        args=("--property", "audience-local-and-partners"),
    ),
    Mistake(
        "agent embedding cap dropped, in both languages",
        "prove",
        "prove",
        "FAILS   agent-caps",
        [
            ("cedar/limits.cedar", " ||\n  context.budget.embeddingUsed > context.agent.embeddingCap", ""),
            (
                f"{DECISION}/limits.rego",
                '\tinput.budget.embedding_items_used <= agent_cap("embedding_items_per_agent_hour")\n',
                "",
            ),
        ],
        args=("--property", "agent-caps"),
    ),
    Mistake(
        "entry cap written as a sum that overflows",
        "prove",
        "prove",
        "FAILS   never-errors: memory.save (@id entry-cap-reached)",
        [
            (
                "cedar/limits.cedar",
                "  context.entries.count < 0 ||\n  context.request.itemCount < 0 ||\n",
                "  context.entries.count + context.request.itemCount > context.entries.cap ||\n",
            )
        ],
        args=("--property", "never-errors"),
    ),
    Mistake(
        "encrypted public rooms exempted, in both languages",
        "prove",
        "prove",
        "FAILS   room-state-valid",
        [
            (
                "cedar/room.cedar",
                ROOM_TAIL + UNLESS,
                ROOM_TAIL + f"unless {{\n  {PLAIN_INVOKE} ||\n"
                '  (context has room && context.room.encrypted && context.room.joinRule == "public")\n};',
            ),
            (
                f"{DECISION}/room.rego",
                "\tattested\n\tnot room_ok\n}\n",
                "\tattested\n\tnot room_ok\n\tnot exempt_room\n}\n\n# METADATA\n# description: x\nexempt_room if {\n"
                '\tinput.room.encrypted == true\n\tinput.room.join_rule == "public"\n}\n',
            ),
        ],
        args=("--property", "room-state-valid"),
    ),
    Mistake(
        "a governed ModelConfig exempted from the operator token, in both languages",
        "prove",
        "prove",
        '    request.write.kind: "agents" -> "modelconfigs"',
        [
            (
                "cedar/definitions.cedar",
                "context.write.governed && !context.write.operator };",
                'context.write.governed && !context.write.operator && context.write.kind != "modelconfigs" };',
            ),
            (
                f"{DECISION}/definitions.rego",
                "\tnot is_true(input.request.write.operator)\n",
                '\tnot is_true(input.request.write.operator)\n\tinput.request.write.kind != "modelconfigs"\n',
            ),
        ],
        args=("--property", "governed-definitions-need-an-operator"),
    ),
    Mistake(
        "a share of a session whose owner kagent did not show allowed, in both languages, its rows edited",
        "prove",
        "prove",
        '    request.share.owner: "user" -> "unknown"',
        [
            (
                "cedar/sessions.cedar",
                'unless { context has share && context.share.owner == "user" };',
                'unless { context has share && context.share.owner != "session_key" };',
            ),
            (
                f"{DECISION}/sessions.rego",
                'shared_by_a_user if input.request.share.owner == "user"',
                'shared_by_a_user if input.request.share.owner != "session_key"',
            ),
        ],
        rows={
            "a session kagent did not show the caller is not shared": {"action": "forward"},
            "a token on a session kagent did not show is not used": {"action": "forward"},
        },
        args=("--property", "memory-sessions-are-never-shared"),
    ),
    # ---- showed only in policy diff ---------------------------------------------------------
    Mistake(
        'entry cap checking only "already full", its row edited',
        "diff-only",
        "prove",
        "FAILS   entry-cap: memory.save, memory.save_batch",
        [
            (
                "cedar/limits.cedar",
                "  context.entries.count > context.entries.cap ||\n"
                "  context.request.itemCount > context.entries.cap - context.entries.count ||\n"
                "  context.entries.count > context.deployment.limits.maxEntries ||\n"
                "  context.request.itemCount > context.deployment.limits.maxEntries - context.entries.count\n",
                "  context.entries.count >= context.entries.cap ||\n"
                "  context.entries.count >= context.deployment.limits.maxEntries\n",
            ),
            (
                f"{DECISION}/limits.rego",
                "\tinput.entries.count <= input.entries.cap\n"
                "\tinput.request.item_count <= input.entries.cap - input.entries.count\n"
                "\tinput.entries.count <= input.deployment.limits.max_entries\n"
                "\tinput.request.item_count <= input.deployment.limits.max_entries - input.entries.count\n",
                "\tinput.entries.count < input.entries.cap\n"
                "\tinput.entries.count < input.deployment.limits.max_entries\n",
            ),
        ],
        rows={"batch of 4 at 97 entries is refused, nothing is evicted": {"action": "forward"}},
        args=("--property", "entry-cap"),
    ),
    Mistake(
        "context expiry off by one, its row edited",
        "diff-only",
        "prove",
        "FAILS   context-fresh",
        [
            (
                "cedar/room.cedar",
                "context.now >= context.delegation.expiresAt",
                "context.now > context.delegation.expiresAt",
            ),
            (
                f"{DECISION}/room.rego",
                "input.now >= input.request.context.expires_at",
                "input.now > input.request.context.expires_at",
            ),
        ],
        rows={"context at exactly exp is expired": {"action": "forward"}},
        args=("--property", "context-fresh"),
    ),
    Mistake(
        "a partner record admitting every origin, its row edited",
        "diff-only",
        "prove",
        "FAILS   federation-deny-by-default: a2a.invoke, control.inspect, memory.delete_all, memory.list, memory.save,"
        " memory.save_batch, memory.search (holds for this pack's data, not for all valid data)",
        [
            (
                "cedar/federation.cedar",
                "!principal.partnerOrigins.contains(principal.origin)",
                "principal.partnerOrigins.isEmpty()",
            ),
            (f"{DECISION}/federation.rego", "\tinput.principal.origin in partner.origins\n", ""),
        ],
        rows={"partner record for OAuth clients does not admit remote users": {"action": "forward"}},
        args=("--property", "federation-deny-by-default"),
    ),
    Mistake(
        "a two-condition search exemption letting a mismatched user id through",
        "diff-only",
        "prove",
        "FAILS   key-valid: memory.search",
        [
            (
                "cedar/consent.cedar",
                "when { !context.request.keyValid || !context.request.userIdMatches };",
                "when { !context.request.keyValid || !context.request.userIdMatches }\n"
                'unless { action == Action::"memory.search" && context.request.keyValid };',
            ),
            (
                f"{DECISION}/consent.rego",
                "\tkeyed\n\tnot key_ok\n",
                "\tkeyed\n\tnot key_ok\n\tnot search_with_valid_key\n",
            ),
        ],
        files={
            f"{DECISION}/search.rego": "package memgov.decision\n\n"
            "# METADATA\n# description: A search whose key verified.\n"
            'search_with_valid_key if {\n\tinput.operation == "memory.search"\n\tis_true(input.request.key_valid)\n}\n'
        },
        args=("--property", "key-valid"),
    ),
    Mistake(
        "replay allowed on inspect, its row edited",
        "diff-only",
        "prove",
        "FAILS   context-single-use: control.inspect",
        [
            (
                "cedar/room.cedar",
                "when { context.delegation.present && context.delegation.replayed }\n" + UNLESS,
                "when { context.delegation.present && context.delegation.replayed }\n"
                f'unless {{ {PLAIN_INVOKE} || action == Action::"control.inspect" }};',
            ),
            (
                f"{DECISION}/room.rego",
                'deny contains "context_replayed" if {\n\tattested\n',
                'deny contains "context_replayed" if {\n\tattested\n\tinput.operation != "control.inspect"\n',
            ),
        ],
        rows={"replayed context on an inspect page is refused": None},
        args=("--property", "context-single-use"),
    ),
    Mistake(
        "embedding batch cap dropped",
        "diff-only",
        "prove",
        "FAILS   batch-size: embedding",
        [
            (
                "cedar/limits.cedar",
                'action in [Action::"memory.save_batch", Action::"embedding"],',
                'action == Action::"memory.save_batch",',
            ),
            (
                f"{DECISION}/limits.rego",
                'input.operation in {"memory.save_batch", "embedding"}',
                'input.operation == "memory.save_batch"',
            ),
        ],
        rows={"one embedding call of 11 inputs is refused": None},
        args=("--property", "batch-size"),
    ),
    Mistake(
        "a loosening and the weakening of its property in the same change",
        "diff-only",
        "prove",
        "FAILS   room-state-valid@baseline: a2a.invoke, control.inspect (the baseline's property",
        [
            *PLANTED[0][1],
            (
                "properties.yaml",
                f"    allows_only_if: |\n      {PLAIN_INVOKE} ||\n      (context has room &&",
                f'    allows_only_if: |\n      {PLAIN_INVOKE} || context.agent.ref == "kagent/ops-bot" ||\n'
                "      (context has room &&",
            ),
        ],
        args=("--property", "room-state-valid", "--baseline", str(PACK_DIR)),
    ),
    Mistake(
        "a bad signature tolerated while fresh (two conditions), its rows edited",
        "diff-only",
        "prove",
        "FAILS   context-valid: a2a.invoke, control.inspect",
        [
            (
                "cedar/room.cedar",
                "when { context.delegation.present && !context.delegation.valid }\n" + UNLESS,
                "when { context.delegation.present && !context.delegation.valid }\n"
                f"unless {{\n  {PLAIN_INVOKE} ||\n"
                "  (context.delegation has expiresAt && context.now < context.delegation.expiresAt)\n};",
            ),
            (
                f"{DECISION}/room.rego",
                "\tnot is_true(input.request.context.valid)\n",
                "\tnot is_true(input.request.context.valid)\n\tnot fresh_context\n",
            ),
        ],
        files={
            f"{DECISION}/fresh.rego": "package memgov.decision\n\n# METADATA\n# description: Before its exp claim.\n"
            "fresh_context if {\n\tis_number(input.request.context.expires_at)\n"
            "\tinput.now < input.request.context.expires_at\n}\n"
        },
        rows={
            "context with a bad signature is refused": {"action": "forward"},
            "forged context whose claims look right is still refused": {"action": "forward"},
        },
        args=("--property", "context-valid"),
    ),
    Mistake(
        "the scope-origin comparison dropped, its rows edited",
        "diff-only",
        "prove",
        "FAILS   scope-match",
        [
            (
                "cedar/consent.cedar",
                "(principal.mxid != resource.principalMxid || principal.origin != resource.origin)",
                "principal.mxid != resource.principalMxid",
            ),
            (f"{DECISION}/consent.rego", "\tinput.principal.origin == input.scope.origin\n", ""),
        ],
        rows={
            "appservice identity presenting a native scope is refused": {
                "action": "rewrite_disabled",
                "reasons": ["origin_not_allowed"],
            },
            "native claim on a scope consented by an appservice identity is refused": {"action": "forward"},
        },
        args=("--property", "scope-match"),
    ),
    # ---- slipped past every tool ------------------------------------------------------------
    Mistake(
        "an agent_limits entry naming an agent without its namespace",
        "slipped",
        "check",
        "agent_limits[0] names 'indexer', which is not an agent reference namespace/name",
        [
            (
                "data/limits.yaml",
                "agent_limits: []",
                "agent_limits:\n  - {agents: [indexer], embedding_items_per_agent_hour: 50}",
            )
        ],
    ),
    Mistake(
        "a Rego-only endswith drift",
        "slipped",
        "test",
        'DIFFER invoke ~ principal.server_name="evilexample.org"',
        [
            (
                f"{DECISION}/federation.rego",
                "\tinput.principal.server_name != input.deployment.server_name\n",
                "\tnot endswith(input.principal.server_name, input.deployment.server_name)\n",
            )
        ],
    ),
    Mistake(
        "the embedding size check reading the fact limit's key, latent while both are 512",
        "slipped",
        "check",
        "@id embedding-item-too-large reads limit max_fact_bytes, but embedding_item_too_large reads only"
        " embedding_item_bytes",
        [
            (
                "cedar/limits.cedar",
                "context.deployment.limits.embeddingItemBytes",
                "context.deployment.limits.maxFactBytes",
            ),
            (
                f"{DECISION}/limits.rego",
                "input.deployment.limits.embedding_item_bytes",
                "input.deployment.limits.max_fact_bytes",
            ),
        ],
    ),
    # ---- data and rule mistakes check missed ------------------------------------------------
    Mistake(
        "a permit carrying a deny code",
        "check-miss",
        "check",
        "@id 'rate-limited/ops' carries a reason code on a permit",
        files={
            "cedar/ops.cedar": '@id("rate-limited/ops")\n@rationale("Ops bot.")\npermit (principal, action, resource)\n'
            'when { context.agent.ref == "kagent/ops-bot" };\n'
        },
    ),
    Mistake(
        "a global limit above the ADR's value",
        "check-miss",
        "check",
        "data/limits.yaml: max_fact_bytes 5120 is above the ADR's 512",
        [("data/limits.yaml", "max_fact_bytes: 512", "max_fact_bytes: 5120")],
    ),
    Mistake(
        "an agent_limits entry naming an agent no gateway configuration has",
        "check-miss",
        "check",
        "warn agent_limits name configured agents",
        [
            (
                "data/limits.yaml",
                "agent_limits: []",
                "agent_limits:\n  - {agents: [kagent/indexr], embedding_items_per_agent_hour: 50}",
            )
        ],
        fails=False,
        diff="stricter data/limits.yaml: agent_limits kagent/indexr embedding_items_per_agent_hour: global -> 50",
    ),
    Mistake(
        "a second Rego allow exempting ops-bot",
        "check-miss",
        "check",
        "allow is defined by something other than an empty deny set",
        files={
            f"{DECISION}/ops.rego": "package memgov.decision\n\n# METADATA\n# description: Ops bot.\n"
            'allow if input.agent.ref == "kagent/ops-bot"\n'
        },
    ),
    Mistake(
        "a property deleted with nothing else",
        "check-miss",
        "check",
        "properties.yaml: no property is enforced_by context_replayed",
        [
            (
                "properties.yaml",
                "  - name: context-single-use\n    description: A delegation context whose jti was seen before admits"
                " nothing.\n    actions: [attested]\n    enforced_by: [context_replayed]\n",
                "  - name: context-single-use\n    description: A delegation context whose jti was seen before admits"
                " nothing.\n    actions: [attested]\n    enforced_by: []\n",
            )
        ],
    ),
    Mistake(
        "a Rego-only exemption of inspect from replay, no row touched",
        "check-miss",
        "prove",
        "FAILS   rego replay:",
        [
            (
                f"{DECISION}/room.rego",
                'deny contains "context_replayed" if {\n\tattested\n',
                'deny contains "context_replayed" if {\n\tattested\n\tinput.operation != "control.inspect"\n',
            )
        ],
        args=("--property", "context-single-use"),
    ),
]


def _plant(mistake: Mistake, pack: Path, tables: Path) -> None:
    for rel, old, new in mistake.edits:
        path = pack / rel
        text = path.read_text()
        assert old in text, f"{mistake.name}: {rel} has no {old!r}"
        path.write_text(text.replace(old, new, 1))
    for rel, text in mistake.files.items():
        (pack / rel).write_text(text)
    if not mistake.rows:
        return
    left = dict(mistake.rows)
    for table in sorted(tables.glob("*.yaml")):
        doc = yaml.safe_load(table.read_text())
        if table.name == "base.yaml" or not doc:
            continue
        kept = []
        for row in doc["cases"]:
            if row["name"] in left:
                expect = left.pop(row["name"])
                if expect is None:
                    continue
                row = {**row, "expect": expect}
            kept.append(row)
        table.write_text(yaml.safe_dump({**doc, "cases": kept}, sort_keys=False, allow_unicode=True))
    assert not left, f"{mistake.name}: no rows named {sorted(left)}"


def _gate(capsys: pytest.CaptureFixture[str], mistake: Mistake, pack: Path, tables: Path) -> tuple[int, str]:
    where = ("--dir", str(pack))
    if mistake.gate == "check":
        return run_cli(capsys, "check", *where, *mistake.args)
    return run_cli(capsys, mistake.gate, *where, "--cases", str(tables), *mistake.args)


class TestCorpus:
    def test_the_corpus_covers_every_kind(self) -> None:
        """At least 35 mistakes, every kind of the review among them, at least 33 failing a gate (each one's
        failure is its own test below); the one that fails none shows in policy diff."""
        assert len(MISTAKES) >= 35
        assert {m.kind for m in MISTAKES} == set(KINDS)
        failing = Counter(m.gate for m in MISTAKES if m.fails)
        assert failing == {"check": 13, "test": 11, "prove": 18}
        assert sum(failing.values()) >= 33
        assert [m.name for m in MISTAKES if not m.fails] == [m.name for m in MISTAKES if m.diff]
        assert sum(m.kind == "diff-only" for m in MISTAKES) == 9
        assert sum(m.kind == "slipped" for m in MISTAKES) == 3
        assert len({m.name for m in MISTAKES}) == len(MISTAKES)

    @pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
    def test_the_gate_fails(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, tmp_path: Path, mistake: Mistake
    ) -> None:
        """The planted mistake makes its gate exit 1 and say what is wrong (the agent check only warns)."""
        tables = tmp_path / "tables"
        shutil.copytree(CASES_DIR, tables, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        _plant(mistake, pack_copy, tables)
        code, out = _gate(capsys, mistake, pack_copy, tables)
        assert code == (1 if mistake.fails else 0), out
        assert mistake.expect in out, out
        assert "Traceback" not in out

    @pytest.mark.parametrize(
        "mistake", [m for m in MISTAKES if not m.fails], ids=[m.name for m in MISTAKES if not m.fails]
    )
    def test_what_no_gate_fails_on_shows_in_the_diff(
        self, capsys: pytest.CaptureFixture[str], pack_copy: Path, tmp_path: Path, mistake: Mistake
    ) -> None:
        """A mistake check only warns about is a contract change policy diff lists, and --exit-code fails on."""
        tables = tmp_path / "tables"
        shutil.copytree(CASES_DIR, tables, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        _plant(mistake, pack_copy, tables)
        code, out = run_diff(capsys, pack_copy, "--exit-code", cases=tables)
        assert code == 1, out
        assert mistake.diff in out, out
