"""The policy runtime: start, fail-closed answers, hot reload, readiness, metrics, logs, shadow mode."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY

from sidecar.logs import configure_logging
from sidecar.policy.model import Operation
from sidecar.policy.opa import opa_part
from sidecar.policy.pack import fingerprint
from sidecar.policy.runtime import PolicyRuntime
from sidecar.policy.shadow import ShadowEngine
from sidecar.reasons import Action, Reason, error_body, primary
from tests.support.policy import MakeInput, OpaServers, policy_settings

BROKEN = {
    "cedar": ("cedar/consent.cedar", "forbid (principal, action, resource"),
    "opa": ("rego/memgov/decision/consent.rego", "package memgov.decision\n\ndeny contains x if {\n"),
}


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Capture the sanitized JSON log lines."""
    buf = io.StringIO()
    configure_logging("debug", stream=buf)
    yield buf
    structlog.reset_defaults()


@pytest.fixture(params=["cedar", "opa"])
async def runtime(request: pytest.FixtureRequest, pack_copy: Path) -> AsyncIterator[PolicyRuntime]:
    """A started runtime on a private pack copy, Cedar in-process or Rego on a real OPA serving that copy."""
    url = request.getfixturevalue("opa").serve(pack_copy) if request.param == "opa" else None
    settings = policy_settings(pack_copy, reload_interval_s=0.05)
    rt = await PolicyRuntime.start(settings, engine=request.param, opa_url=url)
    yield rt
    await rt.close()


Edit = Callable[[Path], None]


@pytest.fixture
def roll_out(runtime: PolicyRuntime, pack_copy: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """Change the pack the way an operator rolls a change out: an OPA gets the new bundle first."""

    def roll(edit: Edit) -> None:
        engine = opa_part(runtime.engine)
        if engine is not None:
            staged = tmp_path / "staged"
            shutil.copytree(pack_copy, staged)
            edit(staged)
            servers: OpaServers = request.getfixturevalue("opa")
            servers.replace(engine.url, staged)
        edit(pack_copy)

    return roll


def _events(buf: io.StringIO, name: str) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, buf.getvalue().splitlines()) if e.get("event") == name]


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class TestStart:
    async def test_loaded_pack_is_ready_and_reports_its_revision(self, runtime: PolicyRuntime, pack_copy: Path) -> None:
        """/readyz sees ready with the engine and the pack's content hash."""
        revision = fingerprint(pack_copy)
        expected: dict[str, object] = {
            "engine": runtime.engine.name,
            "revision": revision,
            "last_reload": {"outcome": "loaded", "revision": revision},
        }
        if runtime.engine.name == "opa":
            expected["opa_revision"] = revision
        assert await runtime.ready_check() == (True, expected)

    async def test_decision_is_stamped(self, runtime: PolicyRuntime, make_input: MakeInput) -> None:
        """A decision carries the caller's decision id, the engine and the pack revision."""
        decision = await runtime.decide(make_input("save"), decision_id="d_0123456789abcdef")
        assert (decision.action, decision.decision_id) == (Action.FORWARD, "d_0123456789abcdef")
        assert (decision.engine, decision.revision) == (runtime.engine.name, runtime.revision)

    @pytest.mark.parametrize(
        ("base", "action"),
        [
            ("invoke", Action.REWRITE_DISABLED),
            ("search", Action.EMPTY_RESULT),
            ("save", Action.DENY),
            ("embedding", Action.DENY),
            ("inspect", Action.DENY),
        ],
    )
    async def test_broken_pack_at_start_fails_closed(
        self, pack_copy: Path, make_input: MakeInput, base: str, action: Action
    ) -> None:
        """Without a valid pack the runtime is not ready and answers policy_unavailable."""
        (pack_copy / "cedar" / "consent.cedar").write_text(BROKEN["cedar"][1])
        rt = await PolicyRuntime.start(policy_settings(pack_copy), engine="cedar")
        try:
            assert (rt.ready, rt.revision) == (False, None)
            decision = await rt.decide(make_input(base))
            assert (decision.action, decision.reasons) == (action, [Reason.POLICY_UNAVAILABLE])
        finally:
            await rt.close()

    async def test_sync_fast_path_is_cedar_only(self, runtime: PolicyRuntime, make_input: MakeInput) -> None:
        """decide_sync answers like decide on Cedar and is refused for other engines."""
        if runtime.engine.name == "cedar":
            assert runtime.decide_sync(make_input("save")).action is Action.FORWARD
        else:
            with pytest.raises(TypeError):
                runtime.decide_sync(make_input("save"))

    async def test_fan_out_decides_every_input(self, runtime: PolicyRuntime, make_input: MakeInput) -> None:
        """Eight prefetch searches decided together answer like eight single decisions."""
        inputs = [make_input("prefetch", {"budget.prefetch_ok": i < 6}) for i in range(8)]
        many = await runtime.decide_many(inputs)
        assert [d.action for d in many] == [Action.FORWARD] * 6 + [Action.EMPTY_RESULT] * 2
        assert len({d.decision_id for d in many}) == 8


class TestReload:
    async def test_broken_pack_keeps_the_old_one(
        self, runtime: PolicyRuntime, pack_copy: Path, make_input: MakeInput
    ) -> None:
        """A pack that fails to parse is rejected; the previous revision keeps deciding."""
        before = runtime.revision
        rel, text = BROKEN[runtime.engine.name]
        (pack_copy / rel).write_text(text)
        assert await runtime.reload() is False
        assert (runtime.ready, runtime.revision) == (True, before)
        assert (await runtime.decide(make_input("save", {"scope": None}))).reasons == [Reason.CONSENT_MISSING]

    async def test_broken_limits_keep_the_old_pack(self, runtime: PolicyRuntime, pack_copy: Path) -> None:
        """An invalid limits.yaml is rejected before anything is swapped."""
        before = runtime.revision
        (pack_copy / "data" / "limits.yaml").write_text("max_days: -1\n")
        assert await runtime.reload() is False
        assert runtime.revision == before

    async def test_valid_change_is_swapped_in(
        self, runtime: PolicyRuntime, roll_out: Any, make_input: MakeInput
    ) -> None:
        """A stricter limit takes effect on reload, with a new revision."""
        fact = make_input("save", {"facts": ["{a*300}"]})
        assert (await runtime.decide(fact)).action is Action.FORWARD

        def stricter(pack: Path) -> None:
            path = pack / "data" / "limits.yaml"
            path.write_text(path.read_text().replace("max_fact_bytes: 512", "max_fact_bytes: 256"))

        roll_out(stricter)
        before = runtime.revision
        assert await runtime.reload() is True
        assert runtime.revision != before
        assert (await runtime.decide(fact)).reasons == [Reason.FACT_TOO_LARGE]

    @pytest.mark.parametrize(
        ("rel", "text", "step", "at"),
        [
            ("cedar/consent.cedar", BROKEN["cedar"][1], "cedar", 1),
            ("rego/memgov/decision/consent.rego", BROKEN["opa"][1], "rego", 3),
            ("data/org.yaml", "memory_denied_agents: [kagent/finance-bot]\n", "cedar", None),
            ("data/reasons.yaml", "declare: [{code: consent_missing, after: allowed, description: d}]\n", "data", None),
        ],
        ids=["cedar", "rego", "org-list-not-in-schema", "builtin-code-redeclared"],
    )
    async def test_refusal_names_step_and_file_and_readyz_shows_it(
        self,
        runtime: PolicyRuntime,
        pack_copy: Path,
        log_lines: io.StringIO,
        rel: str,
        text: str,
        step: str,
        at: int | None,
    ) -> None:
        """Whatever engine is live, a broken half of the pack is refused; the log and /readyz say where and why."""
        before = runtime.revision
        original = (pack_copy / rel).read_bytes() if (pack_copy / rel).exists() else None
        (pack_copy / rel).write_text(text)
        assert await runtime.reload() is False
        assert runtime.revision == before
        ready, detail = await runtime.ready_check()
        assert ready and detail["revision"] == before
        last = detail["last_reload"]
        assert isinstance(last, dict)
        assert {k: v for k, v in last.items() if k != "message"} == {
            "outcome": "rejected",
            "revision": fingerprint(pack_copy),
            "step": step,
            "file": rel,
            **({"line": at} if at is not None else {}),
        }
        where = rf"{re.escape(rel)}:{at}(:\d+)?: " if at is not None else rf"{re.escape(rel)}: "
        assert re.match(where, last["message"]), last["message"]
        (line,) = _events(log_lines, "policy.reload_failed")
        assert (line["step"], line["pack_file"]) == (step, rel)
        # Undoing the edit is a recovery: /readyz no longer reports the refusal.
        if original is None:
            (pack_copy / rel).unlink()
        else:
            (pack_copy / rel).write_bytes(original)
        assert await runtime.reload() is True
        _, detail = await runtime.ready_check()
        assert detail["last_reload"] == {"outcome": "loaded", "revision": before}

    async def test_pack_missing_a_rule_file_is_refused(
        self, pack_copy: Path, log_lines: io.StringIO, make_input: MakeInput
    ) -> None:
        """Deleting room.cedar does not fail open: the pack is refused, naming the codes left without a rule."""
        (pack_copy / "cedar" / "room.cedar").unlink()
        rt = await PolicyRuntime.start(policy_settings(pack_copy), engine="cedar")
        try:
            assert not rt.ready
            (line,) = _events(log_lines, "policy.reload_failed")
            assert (line["step"], line["pack_file"]) == ("rules", "cedar/")
            decision = await rt.decide(make_input("invoke", {"room": None}))
            assert decision.reasons == [Reason.POLICY_UNAVAILABLE]
        finally:
            await rt.close()

    async def test_editing_a_rego_test_does_not_change_the_revision(
        self, runtime: PolicyRuntime, pack_copy: Path
    ) -> None:
        """Unit tests are not part of the pack: editing one reloads nothing."""
        before = runtime.revision
        path = pack_copy / "rego" / "memgov" / "decision" / "limits_test.rego"
        path.write_text(path.read_text() + "\n")
        assert fingerprint(pack_copy) == before

    async def test_declared_reason_code_reaches_the_decision(
        self, runtime: PolicyRuntime, roll_out: Any, make_input: MakeInput
    ) -> None:
        """A code declared in data/reasons.yaml, with a rule in both languages, is a decision's reason."""

        def declare_weekend(pack: Path) -> None:
            (pack / "data" / "reasons.yaml").write_text(
                "declare:\n  - code: weekend_closed\n    after: consent_disabled\n    description: Closed.\n"
            )
            (pack / "cedar" / "org.cedar").write_text(
                '@id("weekend-closed")\n@rationale("r")\nforbid (principal, action, resource)\n'
                'when { action == Action::"memory.list" };\n'
            )
            (pack / "rego" / "memgov" / "decision" / "org.rego").write_text(
                "package memgov.decision\n\n# METADATA\n# custom:\n#   reason: weekend_closed\n"
                'deny contains "weekend_closed" if input.operation == "memory.list"\n'
            )

        roll_out(declare_weekend)
        assert await runtime.reload() is True
        decision = await runtime.decide(make_input("list"))
        assert (decision.action, [r.value for r in decision.reasons]) == (Action.DENY, ["weekend_closed"])
        assert error_body(primary(decision.reasons), "d_1") == b'{"error":"weekend_closed","decision_id":"d_1"}'

    async def test_watcher_reloads_on_file_change(self, runtime: PolicyRuntime, roll_out: Any) -> None:
        """Editing a pack file is noticed without a restart."""
        before, reloaded = runtime.revision, runtime.next_reload()

        def touch(pack: Path) -> None:
            (pack / "cedar" / "routes.cedar").write_text((pack / "cedar" / "routes.cedar").read_text() + "\n")

        roll_out(touch)
        assert await asyncio.wait_for(reloaded, 30) is True
        assert runtime.revision not in (None, before)

    async def test_sighup_reloads(self, runtime: PolicyRuntime, pack_copy: Path, roll_out: Any) -> None:
        """SIGHUP makes the runtime re-read the pack."""
        runtime.install_sighup()
        roll_out(
            lambda pack: (pack / "data" / "federation.yaml").write_text(
                (pack / "data" / "federation.yaml").read_text() + "\n"
            )
        )
        reloaded = runtime.next_reload()
        os.kill(os.getpid(), signal.SIGHUP)
        assert await asyncio.wait_for(reloaded, 30) is True
        assert runtime.revision == fingerprint(pack_copy)


class TestObservability:
    async def test_pack_revision_is_a_metric(self, runtime: PolicyRuntime) -> None:
        """memgov_policy_pack_info names the live revision and engine."""
        labels = {"engine": runtime.engine.name, "revision": runtime.revision or ""}
        assert _sample("memgov_policy_pack_info", labels) == 1.0
        assert _sample("memgov_policy_ready", {}) == 1.0

    async def test_decisions_are_counted_by_reason(self, runtime: PolicyRuntime, make_input: MakeInput) -> None:
        """Each reason of a decision is counted with bounded labels."""
        labels = {
            "operation": "memory.search",
            "action": "empty_result",
            "reason": "consent_missing",
            "engine": runtime.engine.name,
        }
        before = _sample("memgov_policy_decisions_total", labels)
        await runtime.decide(make_input("search", {"scope": None}))
        assert _sample("memgov_policy_decisions_total", labels) == before + 1

    async def test_decision_log_line_is_content_free(
        self, runtime: PolicyRuntime, make_input: MakeInput, log_lines: io.StringIO
    ) -> None:
        """The decision line has id, operation, action, reasons, engine and revision, and no request text."""
        inp = make_input("save", {"request.caller_agent_name": "SENTINEL_agent_text"})
        decision = await runtime.decide(inp)
        (line,) = _events(log_lines, "policy.decision")
        assert line["decision_id"] == decision.decision_id
        assert (line["operation"], line["action"], line["reasons"]) == ("memory.save", "forward", ["allowed"])
        assert (line["engine"], line["revision"]) == (runtime.engine.name, runtime.revision)
        assert "SENTINEL" not in log_lines.getvalue()


class TestShadow:
    @pytest.fixture
    async def shadow(self, pack_copy: Path, opa: OpaServers) -> AsyncIterator[PolicyRuntime]:
        """Cedar enforcing, Rego on OPA compared; the Rego copy also denies memory.list."""
        (pack_copy / "rego" / "memgov" / "decision" / "extra.rego").write_text(
            "package memgov.decision\n\n# METADATA\n# custom:\n#   reason: rate_limited\n"
            'deny contains "rate_limited" if input.operation == "memory.list"\n'
        )
        rt = await PolicyRuntime.start(policy_settings(pack_copy), engine="shadow", opa_url=opa.serve(pack_copy))
        yield rt
        await rt.close()

    async def test_disagreement_is_counted_and_logged(
        self, shadow: PolicyRuntime, make_input: MakeInput, log_lines: io.StringIO
    ) -> None:
        """The enforcing engine decides; the other engine's different answer is counted and logged."""
        labels = {"operation": Operation.MEMORY_LIST.value}
        before = _sample("memgov_policy_shadow_disagreements_total", labels)
        decision = await shadow.decide(make_input("list"))
        assert isinstance(shadow.engine, ShadowEngine)
        await shadow.engine.drain()
        assert decision.action is Action.FORWARD
        assert _sample("memgov_policy_shadow_disagreements_total", labels) == before + 1
        (line,) = _events(log_lines, "policy.shadow_disagreement")
        assert (line["action"], line["shadow_action"], line["reasons"]) == ("forward", "deny", ["rate_limited"])
        assert line["decision_id"] == decision.decision_id
        assert line["revision"] == line["shadow_revision"] == shadow.revision

    async def test_agreement_is_not_counted(self, shadow: PolicyRuntime, make_input: MakeInput) -> None:
        """When both engines answer the same, nothing is reported."""
        labels = {"operation": Operation.MEMORY_SAVE.value}
        before = _sample("memgov_policy_shadow_disagreements_total", labels)
        await shadow.decide(make_input("save", {"scope": None}))
        assert isinstance(shadow.engine, ShadowEngine)
        await shadow.engine.drain()
        assert _sample("memgov_policy_shadow_disagreements_total", labels) == before


class _Exploding:
    """An engine with a bug: it loads, then raises something unexpected on every decision."""

    name = "exploding"
    stale = False

    def prepare(self, pack: Any) -> None:
        return None

    async def commit(self, prepared: Any) -> None:
        return None

    async def evaluate(self, inp: Any) -> Any:
        raise RuntimeError("engine bug")

    async def evaluate_many(self, inputs: Any) -> Any:
        raise RuntimeError("engine bug")

    async def close(self) -> None:
        return None


class TestUnexpectedFailure:
    async def test_engine_bug_fails_closed(self, pack_copy: Path, make_input: MakeInput) -> None:
        """An engine that raises anything at all yields policy_unavailable, never an exception or a forward."""
        rt = PolicyRuntime(policy_settings(pack_copy), _Exploding())
        assert await rt.reload()
        single = await rt.decide(make_input("invoke"))
        many = await rt.decide_many([make_input("search")] * 2)
        assert (single.action, single.reasons) == (Action.REWRITE_DISABLED, [Reason.POLICY_UNAVAILABLE])
        assert [(d.action, d.reasons) for d in many] == [(Action.EMPTY_RESULT, [Reason.POLICY_UNAVAILABLE])] * 2
        await rt.close()
