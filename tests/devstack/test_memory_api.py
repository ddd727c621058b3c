"""The five memory routes answer exactly like kagent v0.9.11, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest

from sidecar.dev.devstack import DevClock, Devstack
from tests.support.devstack import START, Api, axis, save_body, vec

MISSING = "Missing required fields (agent_name, user_id, vector)"
INVALID = "Invalid request body"
DAY = timedelta(days=1)


async def _rows(stack: Devstack, **kw: Any) -> list[Any]:
    return await stack.store.rows(**kw)


class TestAddSession:
    async def test_returns_201_with_a_new_uuid(self, api: Api, stack: Devstack) -> None:
        """A save answers 201 {"id": uuid} and stores the row with access_count 0 and metadata {}."""
        status, body = await api.json("POST", "/api/memories/sessions", save_body())
        assert status == 201 and list(body) == ["id"]
        assert str(uuid.UUID(body["id"])) == body["id"]
        [row] = await _rows(stack)
        assert (row.id, row.content, row.metadata, row.access_count) == (body["id"], "likes tea", "{}", 0)
        assert row.created_at == START and len(row.embedding) == 768

    @pytest.mark.parametrize(("ttl", "days"), [(None, 15), (0, 15), (-3, 15), (1, 1), (30, 30), (4000, 4000)])
    async def test_expiry_is_now_plus_ttl_days_with_15_as_default(
        self, api: Api, stack: Devstack, ttl: Any, days: int
    ) -> None:
        """expires_at is now + ttl_days days; a missing, zero or negative ttl means 15 days, with no upper bound."""
        extra = {} if ttl is None else {"ttl_days": ttl}
        assert (await api.json("POST", "/api/memories/sessions", save_body(**extra)))[0] == 201
        [row] = await _rows(stack)
        assert row.expires_at == START + timedelta(days=days)

    async def test_huge_ttl_wraps_into_the_past_like_a_go_duration(self, api: Api, stack: Devstack) -> None:
        """ttl_days large enough to overflow Go's int64 nanoseconds yields an expiry before the creation time."""
        assert (await api.json("POST", "/api/memories/sessions", save_body(ttl_days=200_000)))[0] == 201
        [row] = await _rows(stack)
        assert row.expires_at < row.created_at

    async def test_metadata_is_kept_as_raw_json_and_echoed_compacted(self, api: Api) -> None:
        """Metadata keeps key order and number spelling; search echoes it compacted and HTML-escaped."""
        body = json.dumps(save_body()).removesuffix("}") + ', "metadata": { "b" : 2, "a": [1.0, "<x>"] } }'
        assert (await api.call("POST", "/api/memories/sessions", raw=body.encode()))[0] == 201
        query = {"agent_name": "kagent__NS__helper", "user_id": "alice", "vector": vec("likes tea")}
        _s, _c, raw = await api.call("POST", "/api/memories/search", query)
        assert b'"metadata":{"b":2,"a":[1.0,"\\u003cx\\u003e"]}' in raw

    @pytest.mark.parametrize(
        "raw",
        [
            b'{"agent_name":"a","user_id":"u","vector":VEC} trailing words',
            b'{"AGENT_NAME":"a","User_Id":"u","vector":VEC,"unknown":{"x":[1]}}',
            b'{"agent_name":"a","user_id":"u","vector":VEC,"content":null}',
        ],
    )
    async def test_go_decoder_leniencies_are_accepted(self, api: Api, raw: bytes) -> None:
        """Trailing bytes, case-insensitive keys, unknown fields and null content all still save."""
        raw = raw.replace(b"VEC", json.dumps(axis(0)).encode())
        assert (await api.call("POST", "/api/memories/sessions", raw=raw))[0] == 201

    @pytest.mark.parametrize(
        ("body", "error"),
        [
            (b"", INVALID),
            (b"not json", INVALID),
            (b"[]", INVALID),
            (b'{"agent_name": 5, "user_id": "u", "vector": [1]}', INVALID),
            (b'{"agent_name": "a", "user_id": "u", "vector": [1], "ttl_days": 1.5}', INVALID),
            (b'{"agent_name": "a", "user_id": "u", "vector": [1e39]}', INVALID),
            (b'{"agent_name": "a", "user_id": "u", "vector": "x"}', INVALID),
            (b'{"agent_name": "a", "user_id": "u", "vector": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", INVALID),
            (b"null", MISSING),
            (b'{"user_id": "u", "vector": [1]}', MISSING),
            (b'{"agent_name": "a", "user_id": "", "vector": [1]}', MISSING),
            (b'{"agent_name": "a", "user_id": "u", "vector": []}', MISSING),
            (b'{"agent_name": "a", "user_id": "u", "vector": null}', MISSING),
            (
                b'{"agent_name": "a", "user_id": "u", "vector": [1, 2, 3]}',
                "vector must have exactly 768 dimensions, got 3",
            ),
        ],
    )
    async def test_invalid_bodies_get_kagents_400_texts(
        self, api: Api, stack: Devstack, body: bytes, error: str
    ) -> None:
        """Each kind of bad body gets kagent's exact 400 error text and stores nothing."""
        status, ctype, raw = await api.call("POST", "/api/memories/sessions", raw=body)
        assert (status, ctype, json.loads(raw)) == (400, "application/json", {"error": error})
        assert await stack.store.count() == 0

    @pytest.mark.parametrize("dims", [767, 769, 1536])
    async def test_vector_must_have_768_dimensions(self, api: Api, dims: int) -> None:
        """Vectors of any other length are refused with the length named."""
        status, body = await api.json("POST", "/api/memories/sessions", save_body(vector=[0.1] * dims))
        assert (status, body) == (400, {"error": f"vector must have exactly 768 dimensions, got {dims}"})


class TestAddSessionBatch:
    async def test_returns_201_with_the_count_and_no_ids(self, api: Api, stack: Devstack) -> None:
        """A batch answers 201 {"count": n} and stores every item."""
        items = [save_body(content=f"fact {i}") for i in range(3)]
        assert await api.json("POST", "/api/memories/sessions/batch", {"items": items}) == (201, {"count": 3})
        assert sorted(r.content for r in await _rows(stack)) == ["fact 0", "fact 1", "fact 2"]

    async def test_fifty_items_pass_and_fifty_one_are_refused_whole(self, api: Api, stack: Devstack) -> None:
        """50 items are the maximum; 51 get kagent's size error and nothing is stored."""
        many = [save_body(content=f"f{i}", vector=axis(i)) for i in range(51)]
        status, body = await api.json("POST", "/api/memories/sessions/batch", {"items": many})
        assert (status, body) == (400, {"error": "batch size 51 exceeds maximum allowed size of 50"})
        assert await stack.store.count() == 0
        assert await api.json("POST", "/api/memories/sessions/batch", {"items": many[:50]}) == (201, {"count": 50})

    @pytest.mark.parametrize(
        ("body", "error"),
        [
            ({"items": []}, "Empty batch"),
            ({"items": None}, "Empty batch"),
            ({}, "Empty batch"),
            ({"items": [save_body(), save_body(user="")]}, "Missing required fields in batch item"),
            ({"items": [save_body(), None]}, "Missing required fields in batch item"),
            ({"items": [save_body(), save_body(vector=[1.0])]}, "vector must have exactly 768 dimensions, got 1"),
            ({"items": {"a": 1}}, INVALID),
        ],
    )
    async def test_one_bad_item_refuses_the_whole_batch(self, api: Api, stack: Devstack, body: Any, error: str) -> None:
        """Every item is validated before any write: one bad item means 400 and no rows."""
        assert await api.json("POST", "/api/memories/sessions/batch", body) == (400, {"error": error})
        assert await stack.store.count() == 0

    async def test_a_database_error_mid_batch_rolls_everything_back(self, api: Api, stack: Devstack) -> None:
        """A row the database refuses (NUL in text) fails the batch with the raw DB error and keeps nothing."""
        items = [save_body(content="fine"), save_body(content="bad\u0000byte")]
        status, body = await api.json("POST", "/api/memories/sessions/batch", {"items": items})
        assert status == 500
        assert body == {
            "error": "failed to save memory batch: failed to store memory: ERROR: invalid byte sequence "
            'for encoding "UTF8": 0x00 (SQLSTATE 22021)'
        }
        assert await stack.store.count() == 0


async def _seed(
    api: Api, contents: list[str], agent: str = "kagent__NS__helper", user: str = "alice", **extra: Any
) -> list[str]:
    ids = []
    for i, content in enumerate(contents):
        status, body = await api.json(
            "POST", "/api/memories/sessions", save_body(agent, user, content, vector=axis(i), **extra)
        )
        assert status == 201
        ids.append(body["id"])
    return ids


def _search(vector: list[float], agent: str = "kagent__NS__helper", user: str = "alice", **extra: Any) -> Any:
    return {"agent_name": agent, "user_id": user, "vector": vector, **extra}


class TestSearch:
    async def test_answers_a_bare_array_nearest_first(self, api: Api) -> None:
        """Search answers a bare array of {id, content, score, metadata, created_at}, best score first."""
        ids = await _seed(api, ["zero", "one"])
        query = [0.6, 0.8] + [0.0] * 766
        status, body = await api.json("POST", "/api/memories/search", _search(query))
        assert status == 200 and [h["id"] for h in body] == [ids[1], ids[0]]
        assert list(body[0]) == ["id", "content", "score", "metadata", "created_at"]
        assert body[0]["score"] == pytest.approx(0.8) and body[1]["score"] == pytest.approx(0.6)
        assert body[0]["metadata"] == {} and body[0]["created_at"] == "2026-03-01T12:00:00.25Z"

    async def test_no_hits_is_an_empty_array(self, api: Api) -> None:
        """Nothing stored for that agent and user gives exactly `[]`."""
        assert await api.call("POST", "/api/memories/search", _search(axis(0))) == (200, "application/json", b"[]")

    @pytest.mark.parametrize(
        ("limit", "hits"), [(None, 5), (0, 5), (-4, 5), (2, 2), (7, 7), (1_000_000, 7), (2**32 + 3, 3), (2**32, 0)]
    )
    async def test_limit_defaults_to_5_has_no_maximum_and_wraps_at_int32(self, api: Api, limit: Any, hits: int) -> None:
        """limit <= 0 means 5, large limits return everything, and values wrap like Go's int32()."""
        await _seed(api, [f"m{i}" for i in range(7)])
        extra = {} if limit is None else {"limit": limit}
        status, body = await api.json("POST", "/api/memories/search", _search(axis(0), **extra))
        assert status == 200 and len(body) == hits

    async def test_a_limit_wrapping_negative_is_a_database_error(self, api: Api) -> None:
        """A limit of 2^31 becomes negative in int32 and PostgreSQL's refusal comes back as a 500."""
        status, body = await api.json("POST", "/api/memories/search", _search(axis(0), limit=2**31))
        assert (status, body) == (
            500,
            {
                "error": "search failed: failed to search agent memory: ERROR: LIMIT must "
                "not be negative (SQLSTATE 2201W)"
            },
        )

    async def test_access_count_grows_before_min_score_filters(self, api: Api, stack: Devstack) -> None:
        """Rows below min_score are not returned but are still counted as accessed."""
        await _seed(api, ["near", "far"])
        status, body = await api.json("POST", "/api/memories/search", _search(axis(0), min_score=0.5))
        assert status == 200 and [h["content"] for h in body] == ["near"]
        assert sorted((r.content, r.access_count) for r in await _rows(stack)) == [("far", 1), ("near", 1)]

    async def test_min_score_zero_filters_nothing(self, api: Api) -> None:
        """min_score 0 keeps orthogonal rows (score 0)."""
        await _seed(api, ["near", "far"])
        _status, body = await api.json("POST", "/api/memories/search", _search(axis(0), min_score=0))
        assert [h["score"] for h in body] == [1, 0]

    async def test_expired_rows_stay_searchable_until_pruned(self, api: Api, clock: DevClock) -> None:
        """A row past its expiry is still returned by search."""
        await _seed(api, ["old"], ttl_days=1)
        clock.advance((3 * DAY).total_seconds())
        _status, body = await api.json("POST", "/api/memories/search", _search(axis(0)))
        assert [h["content"] for h in body] == ["old"]

    @pytest.mark.parametrize(
        ("saved", "searched", "found"),
        [
            ("kagent__NS__my-agent", "kagent__NS__my-agent", 1),
            ("kagent__NS__my-agent", "kagent__NS__my_agent", 0),
            ("kagent__NS__my_agent", "kagent__NS__my-agent", 0),
        ],
    )
    async def test_agent_name_is_matched_exactly(self, api: Api, saved: str, searched: str, found: int) -> None:
        """Search does not normalise '-' and '_' (unlike list and delete)."""
        await _seed(api, ["x"], agent=saved)
        _status, body = await api.json("POST", "/api/memories/search", _search(axis(0), agent=searched))
        assert len(body) == found

    async def test_a_zero_query_vector_fails_after_counting(self, api: Api, stack: Devstack) -> None:
        """A zero query vector makes every score NaN: 500 "Error marshalling JSON response", rows still counted."""
        await _seed(api, ["x"])
        assert await api.json("POST", "/api/memories/search", _search([0.0] * 768)) == (
            500,
            {"error": "Error marshalling JSON response"},
        )
        assert [r.access_count for r in await _rows(stack)] == [1]

    async def test_a_stored_zero_vector_breaks_its_namespace(self, api: Api) -> None:
        """One all-zero row among the results fails the whole search, even with min_score set."""
        await _seed(api, ["x"])
        await api.json(
            "POST",
            "/api/memories/sessions",
            {"agent_name": "kagent__NS__helper", "user_id": "alice", "content": "zero", "vector": [0.0] * 768},
        )
        assert await api.json("POST", "/api/memories/search", _search(axis(0), min_score=0.5)) == (
            500,
            {"error": "Error marshalling JSON response"},
        )

    @pytest.mark.parametrize(
        ("body", "error"),
        [
            ({"agent_name": "a", "user_id": "u"}, MISSING),
            (
                {"agent_name": "a", "user_id": "u", "vector": [1.0] * 10},
                "vector must have exactly 768 dimensions, got 10",
            ),
            ({"agent_name": "a", "user_id": "u", "vector": axis(0), "min_score": "high"}, INVALID),
        ],
    )
    async def test_invalid_searches_get_kagents_400_texts(self, api: Api, body: Any, error: str) -> None:
        """Bad searches get the same 400 texts as saves."""
        assert await api.json("POST", "/api/memories/search", body) == (400, {"error": error})


class TestList:
    async def test_lists_every_row_busiest_first_with_second_precision(self, api: Api) -> None:
        """List returns {id, content, access_count, created_at, expires_at} ordered by access_count."""
        ids = await _seed(api, ["a", "b"])
        await api.json("POST", "/api/memories/search", _search(axis(1), limit=1))
        status, body = await api.json("GET", "/api/memories?agent_name=kagent__NS__helper&user_id=alice")
        assert status == 200 and [i["id"] for i in body] == [ids[1], ids[0]]
        assert body[0] == {
            "id": ids[1],
            "content": "b",
            "access_count": 1,
            "created_at": "2026-03-01T12:00:00Z",
            "expires_at": "2026-03-16T12:00:00Z",
        }

    async def test_listing_does_not_count_as_access(self, api: Api) -> None:
        """Listing twice leaves access_count at 0."""
        await _seed(api, ["a"])
        for _ in range(2):
            _status, body = await api.json("GET", "/api/memories?agent_name=kagent__NS__helper&user_id=alice")
        assert body[0]["access_count"] == 0

    async def test_expired_rows_are_listed(self, api: Api, clock: DevClock) -> None:
        """Rows past their expiry are still listed."""
        await _seed(api, ["old"], ttl_days=1)
        clock.advance((2 * DAY).total_seconds())
        _status, body = await api.json("GET", "/api/memories?agent_name=kagent__NS__helper&user_id=alice")
        assert [i["content"] for i in body] == ["old"]

    async def test_a_row_without_expiry_omits_the_field(self, api: Api, stack: Devstack) -> None:
        """expires_at is left out when the column is NULL."""
        from sidecar.dev.devstack.store import NewMemory

        await stack.store.insert(NewMemory("kagent__NS__helper", "alice", "x", axis(0), "{}", None))
        _status, body = await api.json("GET", "/api/memories?agent_name=kagent__NS__helper&user_id=alice")
        assert "expires_at" not in body[0]

    @pytest.mark.parametrize(
        ("asked", "contents"),
        [
            ("kagent__NS__my-agent", ["hyphen", "underscore"]),
            ("kagent__NS__my_agent", ["underscore"]),
        ],
    )
    async def test_the_hyphen_spelling_also_lists_the_underscore_one(
        self, api: Api, asked: str, contents: list[str]
    ) -> None:
        """List matches the name as sent or with '-' replaced by '_'."""
        await _seed(api, ["hyphen"], agent="kagent__NS__my-agent")
        await _seed(api, ["underscore"], agent="kagent__NS__my_agent")
        _status, body = await api.json("GET", f"/api/memories?agent_name={asked}&user_id=alice")
        assert sorted(i["content"] for i in body) == contents

    @pytest.mark.parametrize(
        "query",
        [
            "",
            "?agent_name=a",
            "?user_id=u",
            "?agent_name=&user_id=u",
            "?agent_name=a;x&user_id=u",
            "?agent_name=%zz&user_id=u",
        ],
    )
    async def test_missing_query_parameters_are_400(self, api: Api, query: str) -> None:
        """Missing parameters, including pairs Go's query parser drops (';', bad escapes), give 400."""
        expected = (400, {"error": "Missing required query parameters (agent_name, user_id)"})
        assert await api.json("GET", "/api/memories" + query) == expected
        assert await api.json("DELETE", "/api/memories" + query) == expected


class TestDelete:
    async def test_deletes_both_spellings_for_that_user_only(self, api: Api, stack: Devstack) -> None:
        """Delete with the hyphen spelling removes both spellings' rows, and never another user's."""
        await _seed(api, ["h"], agent="kagent__NS__my-agent")
        await _seed(api, ["u"], agent="kagent__NS__my_agent")
        await _seed(api, ["bob's"], agent="kagent__NS__my-agent", user="bob")
        status, body = await api.json("DELETE", "/api/memories?agent_name=kagent__NS__my-agent&user_id=alice")
        assert (status, body) == (200, {"status": "deleted"})
        assert [r.content for r in await _rows(stack)] == ["bob's"]

    async def test_the_underscore_spelling_leaves_the_hyphen_rows(self, api: Api, stack: Devstack) -> None:
        """Delete with the underscore spelling only removes that spelling."""
        await _seed(api, ["h"], agent="kagent__NS__my-agent")
        await _seed(api, ["u"], agent="kagent__NS__my_agent")
        await api.json("DELETE", "/api/memories?agent_name=kagent__NS__my_agent&user_id=alice")
        assert [r.content for r in await _rows(stack)] == ["h"]

    async def test_deleting_nothing_still_answers_200(self, api: Api) -> None:
        """No matching rows still gives 200 {"status":"deleted"}."""
        assert await api.json("DELETE", "/api/memories?agent_name=nobody&user_id=x") == (200, {"status": "deleted"})


SENTINEL = "SENTINEL-db-9f2c"


class TestDatabaseErrors:
    @pytest.mark.parametrize(
        ("op", "method", "path", "body", "error"),
        [
            ("insert", "POST", "/api/memories/sessions", save_body(), "failed to save memory: "),
            (
                "insert_batch",
                "POST",
                "/api/memories/sessions/batch",
                {"items": [save_body()]},
                "failed to save memory batch: failed to store memory: ",
            ),
            (
                "search",
                "POST",
                "/api/memories/search",
                _search(axis(0)),
                "search failed: failed to search agent memory: ",
            ),
            (
                "list",
                "GET",
                "/api/memories?agent_name=a&user_id=u",
                None,
                "failed to list memories: failed to list agent memories: ",
            ),
            (
                "delete",
                "DELETE",
                "/api/memories?agent_name=a&user_id=u",
                None,
                "failed to delete memory: failed to delete agent memory: ",
            ),
        ],
    )
    async def test_the_raw_database_error_is_returned_in_the_500(
        self, api: Api, op: str, method: str, path: str, body: Any, error: str
    ) -> None:
        """A failing database surfaces kagent's prefixes plus the DB error text verbatim."""
        assert await api.json("POST", "/__devstack/db-fault", {"message": SENTINEL, "ops": [op]}) == (
            200,
            {"status": "set"},
        )
        assert await api.json(method, path, body) == (500, {"error": error + SENTINEL})

    async def test_the_default_fault_is_a_missing_memory_table(self, api: Api) -> None:
        """Without a message the fault mimics a default Helm install (no vector table)."""
        await api.json("POST", "/__devstack/db-fault", {})
        status, body = await api.json("POST", "/api/memories/sessions", save_body())
        assert (status, body) == (
            500,
            {"error": 'failed to save memory: ERROR: relation "memory" does not exist (SQLSTATE 42P01)'},
        )

    async def test_a_counted_fault_fails_only_the_chosen_calls(self, api: Api) -> None:
        """after/times let the first save pass, fail the second, and pass again once cleared."""
        await api.json("POST", "/__devstack/db-fault", {"message": SENTINEL, "ops": ["insert"], "after": 1, "times": 1})
        statuses = [(await api.json("POST", "/api/memories/sessions", save_body()))[0] for _ in range(3)]
        assert statuses == [201, 500, 201]
        await api.json("POST", "/__devstack/db-fault", {"message": SENTINEL})
        assert (await api.json("DELETE", "/__devstack/db-fault"))[0] == 200
        assert (await api.json("POST", "/api/memories/sessions", save_body()))[0] == 201


class TestPrune:
    async def test_prune_extends_popular_rows_and_deletes_the_rest(
        self, api: Api, stack: Devstack, clock: DevClock
    ) -> None:
        """Expired rows with 10+ accesses get now+15 days and a zero count; other expired rows are deleted."""
        await _seed(api, ["popular", "ignored"], ttl_days=1)
        for _ in range(10):
            await api.json("POST", "/api/memories/search", _search(axis(0), limit=1))
        await api.json("POST", "/api/memories/sessions", save_body(content="fresh", vector=axis(5), ttl_days=30))
        assert (await api.json("POST", "/__devstack/clock", {"advance_s": (2 * DAY).total_seconds()}))[0] == 200
        assert await api.json("POST", "/__devstack/prune") == (200, {"status": "pruned"})
        rows = {r.content: r for r in await _rows(stack)}
        assert sorted(rows) == ["fresh", "popular"]
        assert rows["popular"].expires_at == START + 2 * DAY + timedelta(days=15)
        assert rows["popular"].access_count == 0

    async def test_rows_without_expiry_and_rows_expiring_now_survive(
        self, api: Api, stack: Devstack, clock: DevClock
    ) -> None:
        """Prune only touches expires_at strictly before now; NULL expiry is never touched."""
        from sidecar.dev.devstack.store import NewMemory

        await stack.store.insert(NewMemory("a", "u", "forever", axis(0), "{}", None))
        await _seed(api, ["edge"], ttl_days=1)
        clock.advance(DAY.total_seconds())
        await api.json("POST", "/__devstack/prune")
        assert sorted(r.content for r in await _rows(stack)) == ["edge", "forever"]

    async def test_admin_rows_dump_includes_content(self, api: Api) -> None:
        """The admin row dump shows every column but the embedding, filtered by agent and user."""
        await _seed(api, ["mine"])
        await _seed(api, ["bob's"], user="bob")
        status, body = await api.json("GET", "/__devstack/rows?user_id=alice")
        assert status == 200 and [(r["content"], r["embedding_dims"]) for r in body] == [("mine", 768)]
        assert re.fullmatch(r"2026-03-01T12:00:00\.25\d*\+00:00", body[0]["created_at"])
