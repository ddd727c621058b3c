"""What memgov accepts it can forward: an unpaired surrogate is refused in the parse (SPEC R-18).

The attack: ``"\\ud800"`` (a UTF-16 surrogate escape with no partner) in a governed body. orjson
refuses it and the stdlib decoder reads it, but nothing can write it back as UTF-8; had the parse
let it through, the refusal would have come after budgets were reserved and, on a save, after the
save was counted as possibly sent. The state an attacker could charge is compared before and after.
"""

from __future__ import annotations

import json

import pytest

from tests.support.adversarial import Target
from tests.support.harness import APP
from tests.support.sentinel import assert_absent, make_sentinel

EMBEDDINGS = "/embeddings/team/helper/v1/embeddings"
#: The tables a governed call charges or holds: budgets, ledger slots, in-flight writes, namespaces.
CHARGED = ("budgets", "ledger", "inflight", "namespaces")


def charged(t: Target) -> list[str]:
    """The rows of every table a governed call could charge, as the state store holds them."""
    return [
        line for line in t.state_dump().splitlines() if line.startswith(tuple(f'INSERT INTO "{n}"' for n in CHARGED))
    ]


def lone(text: str, escape: str = "\\ud800") -> str:
    """A JSON string literal of ``text`` followed by an unpaired surrogate escape."""
    return json.dumps(text)[:-1] + escape + '"'


def assert_refused_before_work(status: int, body: dict[str, str], headers: dict[str, str]) -> None:
    assert (status, body["error"], set(body)) == (400, "bad_request", {"error", "decision_id"})
    assert headers["X-Memgov-Decision"].startswith("deny; reason=bad_request")


class TestLoneSurrogate:
    @pytest.mark.parametrize(
        "raw",
        [
            '{"model": "text-embedding-3-small", "input": ' + lone("what did I say") + "}",
            '{"model": "text-embedding-3-small", "input": ["fine", ' + lone("", "\\udc00") + "]}",
            '{"model": ' + lone("text-embedding-3-small") + ', "input": "what did I say"}',
            '{"model": "text-embedding-3-small", "input": "a", "dimensions": 768, ' + lone("x") + ": 1}",
        ],
    )
    async def test_embedding_without_a_credential(self, target: Target, raw: str) -> None:
        """An anonymous embedding call with a lone surrogate is refused 400 before any budget is charged."""
        t = target
        await t.consented_scope()
        before = charged(t)
        status, body, headers = await t.post(
            EMBEDDINGS, None, raw=raw.encode(), headers={"Content-Type": "application/json"}
        )
        assert_refused_before_work(status, body, headers)
        assert charged(t) == before
        assert t.dev.embedding.calls == []

    @pytest.mark.parametrize("batch", [False, True], ids=["save", "batch"])
    async def test_save_holds_no_slot_and_defers_no_erasure(self, target: Target, batch: bool) -> None:
        """A save or batch with a lone surrogate in its content is refused 400: no slot, no in-flight write."""
        t = target
        scope_id = await t.consented_scope()
        key = await t.session_key()
        secret = make_sentinel("surrogate")
        fact = t.fact(key, "x")
        fact_text = json.dumps(fact).replace(json.dumps("x"), lone(f"likes green tea {secret}"), 1)
        raw = '{"items": [' + fact_text + "]}" if batch else fact_text
        before = charged(t)
        status, body, headers = await t.post(
            "/api/memories/sessions/batch" if batch else "/api/memories/sessions",
            None,
            raw=raw.encode(),
            headers={"Content-Type": "application/json", "X-Agent-Name": APP, "X-User-Id": key},
        )
        assert_refused_before_work(status, body, headers)
        assert charged(t) == before
        assert await t.rows() == []

        # Nothing is outcome-unknown, so forgetting everything right away needs no wait.
        status, withdrawn, _ = await t.control_full("DELETE", f"/v1/scopes/{scope_id}/consent")
        assert status == 200 and withdrawn["erasure"]["not_before"] is None

        async with t.http.get(t.gw.ops_url + "/metrics") as resp:
            metrics = await resp.text()
        assert_absent(secret, t.gateway_log(), metrics, t.state_dump(), repr(body), repr(headers))
