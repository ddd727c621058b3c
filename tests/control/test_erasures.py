"""The operator's erasure routes: a content-free listing, and the retry of a failed erasure."""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from sidecar.control.client import Confirmed, ControlError
from sidecar.dev.devstack import DbFault
from sidecar.erasure.evidence import iso
from sidecar.identity.tokens import mint_operator
from sidecar.sampler import sample_once
from sidecar.state.gauges import read_gauges
from tests.support.harness import BOB, BOB_ROOM, Harness, harness, kagent_refuses
from tests.support.sentinel import capture_sinks, make_sentinel
from tests.support.wait import until


async def _failed(h: Harness, action: str, fault: DbFault | None = None) -> tuple[str, str]:
    """A scope whose ``action`` (forget-all, off or withdraw) failed in kagent: (scope id, erasure id)."""
    scope_id = await h.scope()
    await h.saved(scope_id, "likes green tea")
    h.stack.store.fault = fault or DbFault(ops=frozenset({"delete"}))
    with pytest.raises(ControlError) as err:
        if action == "withdraw":
            await h.client().withdraw(scope_id)
        else:
            await h.client().confirm_and_run(scope_id, action)
    assert err.value.status == 500 and err.value.location is not None
    return scope_id, err.value.location.rsplit("/", 1)[1]


async def _failed_count(h: Harness) -> int:
    return (await read_gauges(h.parts.store.db, h.parts.clock())).erasures["failed"]


class TestRetry:
    @pytest.mark.parametrize("action", ["forget-all", "off", "withdraw"])
    async def test_a_retried_failure_is_superseded_and_consent_may_follow(self, sh: Harness, action: str) -> None:
        """Retry runs a new erasure of the same kind to verified; the failure stops counting and stops blocking."""
        scope_id, failed_id = await _failed(sh, action)
        ops = sh.client(sh.operator_token())
        assert await _failed_count(sh) == 1
        sh.stack.store.fault = None
        retried = await ops.retry_erasure(failed_id)
        assert (retried["state"], retried["scope_id"]) == ("verified", scope_id)
        assert retried["erasure_id"] != failed_id and await sh.rows(scope_id) == []
        listed = {e["erasure_id"]: e for e in (await ops.erasures(scope=scope_id))["erasures"]}
        assert listed[retried["erasure_id"]]["retry_of"] == failed_id
        assert (listed[failed_id]["state"], listed[failed_id]["superseded_by"]) == ("failed", retried["erasure_id"])
        assert listed[retried["erasure_id"]]["requested_by"] == "operator"
        assert (await sh.client().erasure(failed_id))["state"] == "failed"  # its evidence never changes
        assert await _failed_count(sh) == 0
        assert await sample_once(sh.parts.store, sh.parts.clock())
        # The scope stays off until its subject consents again, which the verified retry allows.
        assert (await sh.client().status(scope_id))["enabled"] is False
        assert (await sh.client().grant(scope_id, "remember my preferences", "v2"))["enabled"] is True
        rows = await sh.parts.store.audit_log.audit_rows(scope_id)
        assert any(r["operation"] == "erasure.retry" and r["erasure_id"] == failed_id for r in rows)

    @pytest.mark.kagent
    @pytest.mark.parametrize("action", ["forget-all", "off"])
    async def test_a_delete_kagent_refused_is_retried_to_verified(self, h: Harness, action: Confirmed) -> None:
        """kagent failing to delete fails the erasure (500 erasure_failed, its evidence failed, the row
        still there); once kagent deletes again, the operator's retry erases it, verified, and supersedes it.
        (A forget-one under the rest adapter does not fail this way: it is verified unreadable and its row
        waits for the namespace to be cleared, evidence pending_namespace_clear.)"""
        scope_id = await h.scope()
        entry_id = await h.saved(scope_id, "likes green tea")
        async with kagent_refuses(h, "delete"):
            with pytest.raises(ControlError) as err:
                await h.client().confirm_and_run(scope_id, action)
            assert (err.value.status, err.value.reason) == (500, "erasure_failed")
            assert err.value.location is not None
            failed_id = err.value.location.rsplit("/", 1)[1]
            assert (await h.client().erasure(failed_id))["state"] == "failed"
            assert [r.id for r in await h.rows(scope_id)] == [entry_id]
        ops = h.client(h.operator_token())
        retried = await ops.retry_erasure(failed_id)
        assert (retried["state"], retried["scope_id"], retried["kind"]) == (
            "verified",
            scope_id,
            action.replace("-", "_"),
        )
        assert await h.rows(scope_id) == []
        listed = {e["erasure_id"]: e for e in (await ops.erasures(scope=scope_id))["erasures"]}
        assert (listed[failed_id]["superseded_by"], listed[retried["erasure_id"]]["retry_of"]) == (
            retried["erasure_id"],
            failed_id,
        )

    async def test_retry_is_idempotent_and_follows_the_chain(self, h: Harness) -> None:
        """A retry that fails again is retried by naming either failure; a verified chain is answered as it is."""
        scope_id, failed_id = await _failed(h, "forget-all")
        ops = h.client(h.operator_token())
        with pytest.raises(ControlError) as again:
            await ops.retry_erasure(failed_id)  # kagent still fails
        assert (again.value.status, again.value.reason) == (500, "erasure_failed")
        second_id = again.value.location.rsplit("/", 1)[1] if again.value.location else ""
        assert second_id not in ("", failed_id) and await _failed_count(h) == 2
        h.stack.store.fault = None
        done = await ops.retry_erasure(failed_id)
        assert done["state"] == "verified" and await _failed_count(h) == 0
        assert (await ops.retry_erasure(second_id))["erasure_id"] == done["erasure_id"]
        assert (await ops.retry_erasure(failed_id))["erasure_id"] == done["erasure_id"]
        chain = (await ops.erasures(scope=scope_id, state="failed"))["erasures"]
        assert {e["erasure_id"]: e["superseded_by"] for e in chain} == {
            failed_id: done["erasure_id"],
            second_id: done["erasure_id"],
        }
        assert len((await ops.erasures(scope=scope_id))["erasures"]) == 3

    async def test_a_failure_a_later_erasure_covers_is_not_retried(self, h: Harness) -> None:
        """Once re-consented after a whole-scope erasure, a retry of the old failure would erase new memory: 409."""
        scope_id, failed_id = await _failed(h, "forget-all")
        h.stack.store.fault = None
        await h.client().confirm_and_run(scope_id, "off")
        await h.client().grant(scope_id, "remember my preferences", "v2")
        kept = await h.saved(scope_id, "lives in Lisbon")
        with pytest.raises(ControlError) as err:
            await h.client(h.operator_token()).retry_erasure(failed_id)
        assert (err.value.status, err.value.reason) == (409, "erasure_not_retryable")
        assert (await h.client().status(scope_id))["enabled"] is True
        assert [e["id"] for e in (await h.client().inspect(scope_id, h.context()))["entries"]] == [kept]

    async def test_only_an_operator_retries_a_failed_erasure(self, sh: Harness) -> None:
        """No token 401; the subject 403 route_denied; an unknown id 404; a verified erasure 409."""
        scope_id, failed_id = await _failed(sh, "off")
        sh.stack.store.fault = None
        with pytest.raises(ControlError) as anonymous:
            await sh.client(lambda: "").retry_erasure(failed_id)
        with pytest.raises(ControlError) as subject:
            await sh.client().retry_erasure(failed_id)
        ops = sh.client(sh.operator_token())
        with pytest.raises(ControlError) as unknown:
            await ops.retry_erasure("e" + "0" * 24)
        done = await ops.retry_erasure(failed_id)
        with pytest.raises(ControlError) as verified:
            await ops.retry_erasure(done["erasure_id"])
        assert [(e.value.status, e.value.reason) for e in (anonymous, subject, unknown, verified)] == [
            (401, "auth_required"),
            (403, "route_denied"),
            (404, "not_found"),
            (409, "erasure_not_retryable"),
        ]
        assert (await sh.client().status(scope_id))["enabled"] is False


class TestList:
    async def test_filters_and_pages(self, h: Harness) -> None:
        """State, kind, scope and time filters combine; pages follow the cursor newest first, each erasure once."""
        alice, failed_id = await _failed(h, "off")
        h.stack.store.fault = None
        bob = await h.scope(BOB, BOB_ROOM)
        bob_api = h.client(lambda: h.subject_token(BOB))
        await bob_api.confirm_and_run(bob, "forget-all")
        await bob_api.confirm_and_run(bob, "off")
        ops = h.client(h.operator_token())
        everything = (await ops.erasures())["erasures"]
        assert len(everything) == 3
        assert [e["created_at"] for e in everything] == sorted((e["created_at"] for e in everything), reverse=True)
        assert [e["erasure_id"] for e in (await ops.erasures(state="failed"))["erasures"]] == [failed_id]
        assert [e["kind"] for e in (await ops.erasures(scope=bob))["erasures"]] == ["off", "forget_all"]
        assert [e["scope_id"] for e in (await ops.erasures(kind="off", state="verified"))["erasures"]] == [bob]
        assert (await ops.erasures(state="failed", superseded=False))["erasures"][0]["erasure_id"] == failed_id
        assert (await ops.erasures(state="failed", superseded=True))["erasures"] == []
        future = iso(h.parts.clock() + timedelta(hours=1))
        assert (await ops.erasures(since=future))["erasures"] == []
        assert len((await ops.erasures(until=future))["erasures"]) == 3
        seen: list[str] = []
        cursor = None
        while True:
            page = await ops.erasures(limit=1, cursor=cursor)
            seen += [e["erasure_id"] for e in page["erasures"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [e["erasure_id"] for e in everything]
        assert {e["scope_id"] for e in everything} == {alice, bob}

    @pytest.mark.parametrize(
        "params",
        [
            {"state": "gone"},
            {"kind": "all"},
            {"scope": "alice"},
            {"since": "yesterday"},
            {"since": "2026-01-01T00:00:00"},
            {"superseded": "maybe"},
            {"cursor": "x"},
            {"limit": "0"},
            {"limit": "51"},
            {"who": "alice"},
        ],
        ids=["state", "kind", "scope", "since", "naive-time", "superseded", "cursor", "limit-0", "limit-51", "unknown"],
    )
    async def test_a_malformed_filter_is_refused(self, sh: Harness, params: dict[str, str]) -> None:
        """Every filter is checked; an unknown one is refused rather than ignored (it would list everything)."""
        with pytest.raises(ControlError) as err:
            await sh.client(sh.operator_token()).client.call("GET", "/v1/erasures", params=params)
        assert (err.value.status, err.value.reason) == (400, "bad_request")

    async def test_only_an_operator_lists(self, sh: Harness) -> None:
        """The listing spans every subject: no token 401, a subject token 403 route_denied."""
        refused: list[Any] = []
        for token in (lambda: "", None):
            with pytest.raises(ControlError) as err:
                await sh.client(token).erasures()
            refused.append((err.value.status, err.value.reason))
        assert refused == [(401, "auth_required"), (403, "route_denied")]

    async def test_listing_and_retry_carry_no_content(self, sh: Harness) -> None:
        """Stored text and kagent's failing error text reach no answer, log line, metric or audit row."""
        stored, upstream = make_sentinel("listed"), make_sentinel("kagent")
        with capture_sinks() as sinks:
            scope_id = await sh.scope()
            await sh.saved(scope_id, f"secret {stored}")
            sh.stack.store.fault = DbFault(message=f"delete failed: {upstream}", ops=frozenset({"delete"}))
            with pytest.raises(ControlError) as err:
                await sh.client().confirm_and_run(scope_id, "off")
            failed_id = err.value.location.rsplit("/", 1)[1] if err.value.location else ""
            ops = sh.client(sh.operator_token())
            listed = await ops.client.call("GET", "/v1/erasures", params={"state": "failed"})
            with pytest.raises(ControlError):
                await ops.retry_erasure(failed_id)
            sh.stack.store.fault = None
            retried = await ops.client.call("POST", f"/v1/erasures/{failed_id}/retry")
            for answer in (listed, retried):
                sinks.record(answer[0], [], repr(answer[1]))
            sinks.extra.append(await sh.audit_text())
        assert failed_id in repr(listed) and retried[0] == 200
        sinks.assert_clean(stored, upstream)


RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"


class TestRunbookRequests:
    async def test_the_runbooks_requests_answer_as_it_says(self, sh: Harness) -> None:
        """`GET /v1/erasures?…`, `GET /v1/erasures/<id>` and `POST /v1/erasures/<id>/retry`, sent as the
        MemgovErasureFailed section writes them, list the failure, show its evidence and retry it."""
        section = RUNBOOK.read_text().split("## MemgovErasureFailed\n", 1)[1].split("\n## ", 1)[0]
        requests = re.findall(r"`((?:GET|POST) /v1/erasures[^`]*)`", section)
        assert len(requests) == 3
        scope_id, failed_id = await _failed(sh, "off")
        sh.stack.store.fault = None
        ops = sh.client(sh.operator_token()).client
        answers = []
        for request in requests:
            method, path = request.replace("<id>", failed_id).split(" ", 1)
            answers.append(await ops.call(method, path))
        (_, listed), (_, evidence), (_, retried) = answers
        assert [e["erasure_id"] for e in listed["erasures"]] == [failed_id]
        assert (evidence["erasure_id"], evidence["state"]) == (failed_id, "failed")
        assert (retried["scope_id"], retried["state"]) == (scope_id, "verified")


class TestOperatorKeyRotation:
    async def test_an_operator_key_added_in_place_is_used_without_a_restart(self, tmp_path: Path) -> None:
        """A key file added under a new id to trust.operator_keys_dir verifies tokens naming it (kid) once it is
        read again; each verification is counted under its id; removed, the key verifies nothing."""
        folder = tmp_path / "operators"
        folder.mkdir()
        (folder / "2026-a").write_bytes(secrets.token_hex(32).encode())
        new = secrets.token_hex(32).encode()
        trust = {"operator_key_file": None, "operator_keys_dir": str(folder)}
        async with harness(tmp_path, store_url=None, trust=trust, secrets={"reload_interval_s": 0.05}) as h:
            api = h.client(lambda: mint_operator("ops-oncall", new, "HS256", now=h.now(), kid="2026-b"))

            async def answers() -> int:
                try:
                    await api.erasures()
                except ControlError as err:
                    return err.status
                return 200

            assert await answers() == 401
            (folder / "2026-b").write_bytes(new)
            await until(lambda: _status_is(answers, 200), timeout_s=30)
            counted = REGISTRY.get_sample_value(
                "memgov_key_verifications_total", {"purpose": "operator", "slot": "2026-b"}
            )
            assert counted is not None and counted >= 1
            (folder / "2026-b").unlink()
            await until(lambda: _status_is(answers, 401), timeout_s=30)


async def _status_is(answers: Callable[[], Awaitable[int]], status: int) -> bool:
    return await answers() == status
