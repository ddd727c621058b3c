"""Family 1: erasure evidence that cannot lie (SPEC D1, D4).

The attack: save with a valid session key under another spelling of the agent's name. kagent
stores and searches the name exactly, while its List and Delete only normalise their query, so
such a row escaped inspect, forget-all and the sweepers while the evidence read "verified,
physically absent".
"""

from __future__ import annotations

import pytest

from sidecar.dev.devstack.store import NewMemory
from sidecar.dev.devstack.vectors import embed_text
from tests.support.adversarial import CANONICAL, K8S_AGENT, RAW, Launch, Target
from tests.support.harness import install_role, role_url


@pytest.fixture(params=["rest", "kagent-db"])
async def either(request: pytest.FixtureRequest, launch: Launch) -> Target:
    """A gateway with each erasure adapter (kagent-db: the stand-in on PostgreSQL, the least-privilege role)."""
    if request.param == "rest":
        return await launch()
    owner: str = request.getfixturevalue("pg_url")
    target = await launch(store_url=owner, adapter="kagent-db", kagent_db_url=role_url(owner))
    await install_role(owner)
    return target


class TestOneCanonicalName:
    async def test_a_save_in_another_spelling_is_stored_canonical_and_erased(self, either: Target) -> None:
        """Whatever spelling the runtime uses, kagent stores the one canonical app_name; inspect shows the
        entry, forget-all clears it, and the evidence's read-back is honest."""
        t = either
        scope_id = await t.consented_scope(agent=K8S_AGENT)
        key = await t.session_key(agent=K8S_AGENT)
        status, body, _ = await t.save(key, "likes green tea", agent_name=RAW)
        assert status == 201, body
        (row,) = [r for r in await t.rows() if r.id == body["id"]]
        assert row.agent_name == CANONICAL
        status, found, _ = await t.search(key, "green tea", agent_name=RAW)
        assert status == 200 and [r["id"] for r in found] == [body["id"]]

        status, page = await t.control(
            "GET", f"/v1/scopes/{scope_id}/entries", headers={"X-Memgov-Context": t.context(agent=K8S_AGENT)}
        )
        assert status == 200 and [e["id"] for e in page["entries"]] == [body["id"]]

        status, record = await t.confirmed(scope_id, "forget-all")
        assert status == 200, record
        assert record["state"] == "verified" and record["verification"]["physically_absent"] is True
        assert [r for r in await t.rows() if r.id == body["id"]] == []

    async def test_rows_an_earlier_version_stored_under_the_raw_spelling_are_cleared(self, either: Target) -> None:
        """A row already stored in the scope's namespace under the other spelling (as earlier gateways
        forwarded it) is found and cleared by a whole-scope erasure, with any adapter."""
        t = either
        scope_id = await t.consented_scope(agent=K8S_AGENT)
        key = await t.session_key(agent=K8S_AGENT)
        status, body, _ = await t.save(key, "likes green tea", agent_name=RAW)
        assert status == 201
        (row,) = [r for r in await t.rows() if r.id == body["id"]]
        legacy = await t.dev.store.insert(NewMemory(RAW, row.user_id, "old spelling", embed_text("old"), "{}", None))
        status, record = await t.confirmed(scope_id, "off")
        assert status == 200 and record["state"] == "verified", record
        assert {r.id for r in await t.rows()} & {legacy, body["id"]} == set()


class TestReadBack:
    async def test_a_delete_that_kagent_only_pretends_is_never_verified(self, launch: Launch) -> None:
        """When kagent answers 200 to a delete but keeps the rows, the erasure fails verification; no
        evidence ever claims physical absence from the request alone."""
        t = await launch(gated=True)
        assert t.gate is not None
        scope_id = await t.consented_scope()
        key = await t.session_key()
        status, body, _ = await t.save(key, "likes green tea")
        assert status == 201
        t.gate.pretend = lambda r: r.method == "DELETE"
        status, issued = await t.control("POST", f"/v1/scopes/{scope_id}/forget-all")
        status, refused, headers = await t.control_full(
            "POST", f"/v1/scopes/{scope_id}/forget-all", json={"confirm": issued["confirm_token"]}
        )
        assert (status, refused["error"]) == (500, "verification_failed")
        status, evidence = await t.control("GET", headers["Location"])
        assert status == 200 and evidence["state"] == "failed"
        assert evidence["verification"]["physically_absent"] is not True
        assert [r.id for r in await t.rows()] == [body["id"]]
