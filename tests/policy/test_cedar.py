"""The Cedar engine: what a pack must satisfy to load, and failing closed at evaluation."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.policy.cedar import CedarEngine, CedarEvalError, compile_pack
from sidecar.policy.model import Operation
from sidecar.policy.pack import PackError, read_pack
from tests.support.policy import MakeInput


def _with_policy(pack: Path, text: str) -> Path:
    (pack / "cedar" / "extra.cedar").write_text(text)
    return pack


class TestCompile:
    def test_reference_pack_maps_every_policy_to_a_reason(self) -> None:
        """Each policy's @id becomes a reason code; the permit is 'allowed'."""
        compiled = compile_pack(read_pack(Path(__file__).resolve().parents[2] / "policies"))
        assert "allowed" in compiled.reasons.values()
        assert len(set(compiled.reasons.values())) == len(compiled.reasons) == 26

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ('@rationale("r")\npermit (principal, action, resource);', r"extra.cedar:1: @id '\(no @id\)'"),
            ('@id("no-such-reason")\n@rationale("r")\nforbid (principal, action, resource);', "extra.cedar:1: @id"),
            ('@id("Consent_Missing")\n@rationale("r")\nforbid (principal, action, resource);', "extra.cedar:1: @id"),
            ('@id("consent-missing")\n@rationale("r")\nforbid (principal, action, resource);', "used twice"),
            ('@id("rate-limited/x_y")\n@rationale("r")\nforbid (principal, action, resource);', "extra.cedar:1: @id"),
            ('@id("rate-limited")\nforbid (principal, action, resource);', "extra.cedar:1: policy needs a @rationale"),
            (
                '@id("rate-limited/2")\n@rationale("r")\nforbid (principal, action, resource) when { context.nope };',
                r"extra.cedar:3:53 \(@id rate-limited/2\): attribute `nope` not found",
            ),
            (
                '// first\n\n@id("rate-limited/2")\n@rationale("r")\nforbid (principal, action, resource',
                "extra.cedar:5:36: unexpected end of input",
            ),
            (
                '@id("rate-limited/2")\n@rationale("r")\nforbid (principal, action, resource)\n'
                "when { context.now == 1 && context.now = 2 };",
                "extra.cedar:4:40: '=' is not a valid operator in Cedar",
            ),
            (
                '@id("rate-limited/2")\n@rationale("r")\nforbid (principal, action, resource)\n'
                "when { context.budget..rateOk };",
                "extra.cedar:4:23: unexpected token `.`",
            ),
        ],
        ids=[
            "no-id",
            "unknown-code",
            "not-kebab",
            "duplicate",
            "bad-suffix",
            "no-rationale",
            "schema",
            "syntax",
            "syntax-column",
            "token-column",
        ],
    )
    def test_bad_policies_are_refused(self, pack_copy: Path, text: str, message: str) -> None:
        """A pack loads only when it parses, validates and every @id is a unique reason; errors give file:line."""
        with pytest.raises(PackError, match=message):
            compile_pack(read_pack(_with_policy(pack_copy, text)))

    def test_several_policies_may_share_a_code(self, pack_copy: Path) -> None:
        """An @id with a /suffix is another policy for the same reason code."""
        text = '@id("rate-limited/finance")\n@rationale("r")\nforbid (principal, action, resource) when { false };\n'
        compiled = compile_pack(read_pack(_with_policy(pack_copy, text)))
        assert list(compiled.reasons.values()).count("rate_limited") == 2

    def test_org_lists_must_be_declared_in_the_schema(self, pack_copy: Path) -> None:
        """A list in data/org.yaml the Cedar schema does not type is refused at load, naming the file."""
        (pack_copy / "data" / "org.yaml").write_text("memory_denied_agents: [kagent/finance-bot]\n")
        with pytest.raises(PackError, match="data/org.yaml: does not match type Org") as err:
            compile_pack(read_pack(pack_copy))
        assert err.value.file == "data/org.yaml"

    def test_two_schemas_are_refused(self, pack_copy: Path) -> None:
        """One .cedarschema describes the model; a second one is ambiguous."""
        (pack_copy / "cedar" / "other.cedarschema").write_text("entity Other;")
        with pytest.raises(PackError, match="exactly one"):
            compile_pack(read_pack(pack_copy))


class TestEvaluation:
    async def test_evaluation_error_fails_closed(self, pack_copy: Path, make_input: MakeInput) -> None:
        """A forbid that errors at runtime (overflow) denies instead of being skipped as Cedar would."""
        overflow = (
            '@id("rate-limited/overflow")\n@rationale("r")\n'
            "forbid (principal, action, resource) when { context.now * 10000000000 > 0 };\n"
        )
        engine = CedarEngine()
        await engine.commit(engine.prepare(read_pack(_with_policy(pack_copy, overflow))))
        with pytest.raises(CedarEvalError):
            engine.evaluate_sync(make_input("save"))

    async def test_unloaded_engine_raises(self, make_input: MakeInput) -> None:
        """Before a pack is committed the engine cannot answer."""
        with pytest.raises(CedarEvalError):
            await CedarEngine().evaluate(make_input("save"))

    async def test_batch_matches_single_decisions(self, pack_copy: Path, make_input: MakeInput) -> None:
        """A prefetch fan-out of 8 decided in one call answers like 8 single calls."""
        engine = CedarEngine()
        await engine.commit(engine.prepare(read_pack(pack_copy)))
        inputs = [make_input("prefetch", {"budget.prefetch_ok": i < 6}) for i in range(8)]
        assert await engine.evaluate_many(inputs) == [engine.evaluate_sync(i) for i in inputs]

    async def test_mixed_batch_matches_single_decisions(self, pack_copy: Path, make_input: MakeInput) -> None:
        """Inputs of different scopes in one batch are still decided one by one, correctly."""
        engine = CedarEngine()
        await engine.commit(engine.prepare(read_pack(pack_copy)))
        inputs = [make_input("search"), make_input("search", {"scope": None}), make_input("invoke")]
        verdicts = await engine.evaluate_many(inputs)
        assert [v.allowed for v in verdicts] == [True, False, True]
        assert inputs[1].operation is Operation.MEMORY_SEARCH and verdicts[1].reasons == {"consent_missing"}
