"""The pipeline's declarations: every governed class has its route, and a spec's refusals have a way to be answered."""

from __future__ import annotations

import pytest

from sidecar.enforce import governed_handlers
from sidecar.enforce.definitions import Definitions
from sidecar.enforce.embedding import Embeddings
from sidecar.enforce.invoke import Invocations
from sidecar.enforce.pipeline import RouteSpec
from sidecar.enforce.saves import Saves
from sidecar.enforce.searches import Searches
from sidecar.enforce.shares import Shares
from sidecar.policy.model import Operation
from sidecar.policy.outcome import deny_action
from sidecar.proxy import passthrough
from sidecar.reasons import Action
from sidecar.root import route_parts
from sidecar.routes import CONTENT_CLASSES, Traffic


async def _never(*_args: object) -> None:
    raise AssertionError("a declaration test runs no stage")


class TestDeclarations:
    async def test_every_governed_class_has_a_handler(self, stack) -> None:
        # Memory and embedding classes carry content, invocations carry memory, other runtimes' stores
        # are the policy's to refuse: none may fall back to the transparent relay once governance is on.
        handlers = governed_handlers(stack.parts.decider, *route_parts(stack.parts), passthrough=passthrough)
        assert set(handlers) == {
            *CONTENT_CLASSES,
            Operation.A2A_INVOKE,
            Operation.MEMORY_UNGOVERNED,
            Operation.CONTROLLER_WRITE,
            Operation.SESSION_SHARE,
            # Decided in front of the relay when a share token comes with the request.
            Traffic.PASSTHROUGH,
        }
        assert handlers[Traffic.PASSTHROUGH] is not passthrough

    async def test_a_spec_degrades_exactly_when_its_refusals_rewrite(self, stack) -> None:
        memory, invoke, embedding, definitions, shares = route_parts(stack.parts)
        specs: list[RouteSpec[object, object]] = [
            Invocations(invoke).spec(),  # type: ignore[list-item]
            Searches(memory).spec(),  # type: ignore[list-item]
            Embeddings(embedding).spec(),  # type: ignore[list-item]
            Saves(memory).spec(Operation.MEMORY_SAVE),  # type: ignore[list-item]
            Definitions(definitions).spec(),  # type: ignore[list-item]
            Shares(shares).spec(),  # type: ignore[list-item]
        ]
        for spec in specs:
            rewrites = deny_action(spec.operation) is Action.REWRITE_DISABLED
            assert (spec.degrade is not None) == rewrites

    def test_an_invocation_without_a_memory_free_answer_is_not_declarable(self) -> None:
        with pytest.raises(TypeError, match="degrade"):
            RouteSpec(Operation.A2A_INVOKE, _never, _never, _never)

    def test_a_route_that_does_not_rewrite_takes_no_degrade_stage(self) -> None:
        with pytest.raises(TypeError, match="degrade"):
            RouteSpec(Operation.MEMORY_SEARCH, _never, _never, _never, degrade=_never)


class TestRunner:
    async def test_a_save_the_policy_refuses_gives_back_what_admission_reserved(self, stack) -> None:
        """Admission reserved a slot and an in-flight record before the policy saw the fact's size;
        the refusal releases both, is recorded once, and nothing reaches kagent."""
        scope = await stack.scope()
        key = await stack.session_key()
        store = stack.parts.store
        status, body, headers = await stack.save(key, "a" * 513)
        assert (status, body["error"]) == (403, "fact_too_large")
        assert headers["X-Memgov-Decision"].startswith("deny; reason=fact_too_large")
        counts = await store.stats()
        assert (counts["inflight"], counts["ledger_pending"], counts["ledger_entries"]) == (0, 0, 0)
        assert await stack.rows() == []
        audited = [r for r in await store.audit_log.audit_rows(scope.scope_id) if r["reason"] == "fact_too_large"]
        assert len(audited) == 1
        # The slot really is free again: the scope's cap counts only what is live.
        assert (await stack.save(key, "fits"))[0] == 201
