"""The floor (SPEC D5): permit-all packs in both languages still refuse every floor case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sidecar.policy.cases import load_cases
from sidecar.policy.floor import apply_floor, floor_reasons
from sidecar.policy.model import Decision, Federation, Obligations
from sidecar.policy.pack import read_pack
from sidecar.policy.runtime import PolicyRuntime
from sidecar.reasons import Action, Code, Reason
from tests.support.policy import CASES_DIR, PACK_DIR, MakeInput, policy_settings

REMOTE_BOB = {
    "principal": {
        "mxid": "@bob:partner.example",
        "localpart": "bob",
        "server_name": "partner.example",
        "origin": "remote",
    },
    "scope.principal_mxid": "@bob:partner.example",
    "scope.origin": "remote",
}

#: (base input, changes, action, reason the floor must give) — each a non-negotiable of D5.
FLOOR_CASES: list[tuple[str, dict[str, Any], Action, Reason]] = [
    ("save", {"scope": None}, Action.DENY, Reason.CONSENT_MISSING),
    ("invoke", {"scope": None}, Action.REWRITE_DISABLED, Reason.CONSENT_MISSING),
    ("inspect", {"scope": None}, Action.DENY, Reason.CONSENT_MISSING),
    ("search", {"scope.enabled": False}, Action.EMPTY_RESULT, Reason.CONSENT_DISABLED),
    ("invoke", {"scope.enabled": False}, Action.REWRITE_DISABLED, Reason.CONSENT_DISABLED),
    ("save", {"request.presented_generation": 2}, Action.DENY, Reason.STALE_GENERATION),
    ("search", {"request.presented_generation": 4}, Action.EMPTY_RESULT, Reason.STALE_GENERATION),
    ("delete_all", {"request.presented_generation": None}, Action.DENY, Reason.STALE_GENERATION),
    ("save", {"request.key_valid": False}, Action.DENY, Reason.KEY_INVALID),
    ("list", {"request.user_id_matches": False}, Action.DENY, Reason.KEY_INVALID),
    ("invoke", REMOTE_BOB, Action.REWRITE_DISABLED, Reason.ORIGIN_NOT_ALLOWED),
    ("save", {"principal.origin": "appservice", "scope.origin": "appservice"}, Action.DENY, Reason.ORIGIN_NOT_ALLOWED),
    ("save", {"principal": None, "scope.origin": "fediverse"}, Action.DENY, Reason.ORIGIN_NOT_ALLOWED),
    ("save", {"facts": ["{é*257}"]}, Action.DENY, Reason.FACT_TOO_LARGE),
    ("save_batch", {"facts": ["f"] * 11}, Action.DENY, Reason.BATCH_TOO_LARGE),
    ("save", {"entries.count": 100}, Action.DENY, Reason.ENTRY_CAP_REACHED),
    ("save", {"entries.count": 100, "entries.cap": 1000}, Action.DENY, Reason.ENTRY_CAP_REACHED),
    ("save_batch", {"entries.count": 97}, Action.DENY, Reason.ENTRY_CAP_REACHED),
    ("embedding", {"facts": ["{€*171}"]}, Action.DENY, Reason.EMBEDDING_ITEM_TOO_LARGE),
    ("save", {"budget.rate_ok": False}, Action.DENY, Reason.RATE_LIMITED),
    ("invoke", {"budget.hourly_ok": False}, Action.REWRITE_DISABLED, Reason.HOURLY_BUDGET_EXHAUSTED),
    ("embedding", {"budget.embedding_ok": False}, Action.DENY, Reason.HOURLY_BUDGET_EXHAUSTED),
    ("prefetch", {"budget.prefetch_ok": False}, Action.EMPTY_RESULT, Reason.PREFETCH_LIMIT),
    ("ungoverned", {}, Action.DENY, Reason.UNGOVERNED_STORE),
    ("controller_write", {"request.write.claims": ["label"]}, Action.DENY, Reason.BOUNDARY_CLAIMED),
    (
        "controller_write",
        {"request.write.operator": True, "request.write.claims": ["secret"]},
        Action.DENY,
        Reason.BOUNDARY_CLAIMED,
    ),
    ("controller_write", {"request.write": None}, Action.DENY, Reason.BOUNDARY_CLAIMED),
    ("session_share", {"request.share.owner": "session_key"}, Action.DENY, Reason.SHARE_REFUSED),
    (
        "session_share",
        {"request.share.verb": "use", "request.share.owner": "unknown"},
        Action.DENY,
        Reason.SHARE_REFUSED,
    ),
    ("session_share", {"request.share": None}, Action.DENY, Reason.SHARE_REFUSED),
]
FLOOR_IDS = [f"{base}:{reason.value}:{i}" for i, (base, _, _, reason) in enumerate(FLOOR_CASES)]


@pytest.fixture(params=["cedar", "opa"])
async def permit_all(request: pytest.FixtureRequest, permit_all_pack: Path) -> Any:
    """A runtime whose pack permits everything, in Cedar or in Rego on a real OPA server."""
    url = request.getfixturevalue("opa").serve(permit_all_pack) if request.param == "opa" else None
    runtime = await PolicyRuntime.start(policy_settings(permit_all_pack), engine=request.param, opa_url=url)
    assert runtime.ready
    yield runtime
    await runtime.close()


class TestFloorUnderPermitAll:
    async def test_permit_all_pack_forwards_a_valid_save(
        self, permit_all: PolicyRuntime, make_input: MakeInput
    ) -> None:
        """The permit-all pack really permits: a valid save is forwarded."""
        decision = await permit_all.decide(make_input("save"))
        assert decision.action is Action.FORWARD

    @pytest.mark.parametrize(("base", "changes", "action", "reason"), FLOOR_CASES, ids=FLOOR_IDS)
    async def test_floor_case_is_refused(
        self,
        permit_all: PolicyRuntime,
        make_input: MakeInput,
        base: str,
        changes: dict[str, Any],
        action: Action,
        reason: Reason,
    ) -> None:
        """Whatever the pack says, the floor refuses with the operation's deny action and the matching reason."""
        decision = await permit_all.decide(make_input(base, changes))
        assert decision.action is action
        assert reason in decision.reasons

    @pytest.mark.parametrize(
        ("base", "changes", "ttl", "limit"),
        [("save", {"request.ttl_days": 30}, 7, None), ("search", {"request.limit": 1000}, None, 10)],
    )
    async def test_obligations_never_exceed_limits(
        self,
        permit_all: PolicyRuntime,
        make_input: MakeInput,
        base: str,
        changes: dict[str, Any],
        ttl: int | None,
        limit: int | None,
    ) -> None:
        """A forwarded save keeps at most max_days and a search at most search_max_limit."""
        decision = await permit_all.decide(make_input(base, changes))
        assert (decision.obligations.ttl_days, decision.obligations.max_limit) == (ttl, limit)


class TestFloorOnlyNarrows:
    def test_reference_decisions_pass_the_floor_unchanged(self) -> None:
        """For every case table row, the floor agrees with the reference packs: it never widens or adds."""
        pack = read_pack(PACK_DIR)
        for case in load_cases(CASES_DIR, pack):
            dep = case.inp.deployment
            federation = Federation(classification=dep.classification, partners=dep.federation_partners)
            expected = set(case.reasons) - {Reason.ALLOWED.value}
            assert {r.value for r in floor_reasons(case.inp, dep.limits, federation, dep.org)} <= expected, case.id

    @pytest.mark.parametrize("action", [Action.FORWARD, Action.DENY])
    def test_a_floor_refusal_turns_any_answer_into_a_denial(self, make_input: MakeInput, action: Action) -> None:
        """A forward becomes a denial naming the floor's reason; a denial keeps the engine's reasons too."""
        inp = make_input("save", {"scope.enabled": False})
        engine_reasons: list[Code] = [Reason.ALLOWED] if action is Action.FORWARD else [Reason.RATE_LIMITED]
        pack = read_pack(PACK_DIR)
        out = apply_floor(Decision(action=action, reasons=engine_reasons), inp, pack.limits, pack.federation, pack.org)
        expected = [Reason.CONSENT_DISABLED] + ([] if action is Action.FORWARD else [Reason.RATE_LIMITED])
        assert (out.action, out.reasons, out.obligations) == (Action.DENY, expected, Obligations())

    def test_floor_uses_the_pack_partners_not_the_input(self, make_input: MakeInput) -> None:
        """A partner record smuggled into the input does not admit a remote principal past the floor."""
        partner = {
            "server_name": "partner.example",
            "origins": ["remote"],
            "controller": "A",
            "processor": "B",
            "purpose": "p",
            "classification": "private",
            "residency": "eu",
            "retention_days": 7,
            "erasure_owner": "A",
            "principal_binding": "mxid",
        }
        inp = make_input("save", {**REMOTE_BOB, "deployment.federation_partners": [partner]})
        pack = read_pack(PACK_DIR)
        assert floor_reasons(inp, pack.limits, pack.federation, pack.org) == {Reason.ORIGIN_NOT_ALLOWED}
