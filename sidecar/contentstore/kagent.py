"""kagent's memory API, spoken in one place: save, search, list and delete of one namespace.

Every call memgov makes to kagent's memory routes goes through :class:`KagentMemory`: the data
plane's governed saves and searches, the rotation's copies, the erasure adapter's deletions and
checks, and the control API's inspect listing. Bodies are built here only, from values the caller
already checked (the canonical agent name, the storage key); kagent's answer comes back as one of
four outcomes, never as an exception or an error body:

- :class:`Created` — a save answered 201 with the new row's id;
- :class:`Found` — a search or list answered with a JSON list (rows without a string id dropped);
- :class:`Rejected` — kagent answered, but not with what the call needs (its body is read and dropped:
  kagent's error texts can quote database errors);
- :class:`Unknown` — no complete answer arrived; ``sent`` is False only when the connection never
  opened, so a write certainly did not happen. A save answered 201 whose id cannot be read is
  ``Unknown(sent=True)`` too: the row exists, memgov does not know which it is.

The transport is an :class:`~sidecar.upstream.Upstream` (one pooled session, its timeouts from
``upstream`` settings, a client span and the upstream metrics per call); tests hand in one that
speaks real HTTP to kagent or its stand-in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final
from urllib.parse import urlencode

import aiohttp
import orjson
from multidict import CIMultiDict

from sidecar.upstream import Upstream, UpstreamUnavailable
from sidecar.wire import dumps

SAVE_PATH: Final = "/api/memories/sessions"
SEARCH_PATH: Final = "/api/memories/search"
LIST_PATH: Final = "/api/memories"
#: Headers the client sets itself on every call (the body or the query says everything kagent reads).
OWN_HEADERS: Final = (
    "Host",
    "Content-Length",
    "Content-Type",
    "Content-Encoding",
    "X-User-Id",
    "X-Agent-Name",
    "X-Share-Token",
)


@dataclass(frozen=True, slots=True)
class Created:
    id: str


#: One memory row as kagent answers it, relayed unchanged; memgov reads only its id (and, for
#: inspect and rotation, its content).
Row = dict[str, object]


@dataclass(frozen=True, slots=True)
class Found:
    """Rows kagent answered, each with a string id (``ids[i]`` is ``rows[i]``'s)."""

    rows: list[Row]
    ids: list[str]


@dataclass(frozen=True, slots=True)
class Deleted:
    pass


@dataclass(frozen=True, slots=True)
class Rejected:
    status: int


@dataclass(frozen=True, slots=True)
class Unknown:
    sent: bool
    timeout: bool = False

    def refusal(self) -> UpstreamUnavailable:
        """The 502/504 an agent's call ends with."""
        return UpstreamUnavailable(timeout=self.timeout, sent=self.sent)


def contents(found: Found) -> dict[str, str]:
    """Entry id → content of listed rows ("" where a row carries none); kept in memory only."""
    return {i: c if isinstance(c := r.get("content"), str) else "" for i, r in zip(found.ids, found.rows, strict=True)}


def namespace_query(agent_name: str, storage_key: str) -> str:
    """The path and query of kagent's list/delete of one (agent, user) namespace."""
    return LIST_PATH + "?" + urlencode({"agent_name": agent_name, "user_id": storage_key})


def _found(answer: object) -> Found | None:
    """The rows of a list answer that carry a string id; None when the answer is not a list."""
    if not isinstance(answer, list):
        return None
    rows: list[Row] = []
    ids: list[str] = []
    for r in answer:
        if isinstance(r, dict) and isinstance(row_id := r.get("id"), str):
            rows.append(r)
            ids.append(row_id)
    return Found(rows, ids)


class KagentMemory:
    """One kagent controller's memory routes over one upstream.

    ``headers`` gives memgov's own credentials (a bearer in kagent's trusted-proxy mode) for calls
    memgov makes on its own behalf; a governed call passes the agent's filtered headers instead.
    """

    __slots__ = ("_headers", "upstream")

    def __init__(self, upstream: Upstream, headers: Callable[[], Mapping[str, str]] = dict) -> None:
        self.upstream = upstream
        self._headers = headers

    def _with(self, given: Mapping[str, str] | None, names: tuple[str, str] | None = None) -> CIMultiDict[str]:
        """``given`` (else memgov's own) headers without those set here; a save or search also names
        its agent and user in the headers, as a runtime does."""
        out: CIMultiDict[str] = CIMultiDict(self._headers() if given is None else given)
        for name in OWN_HEADERS:
            out.popall(name, None)
        if names is not None:
            out.update({"X-Agent-Name": names[0], "X-User-Id": names[1]})
        return out

    async def _call(
        self, method: str, path: str, headers: CIMultiDict[str], body: bytes | None
    ) -> tuple[int, object] | Unknown:
        """(status, parsed JSON or None); error bodies are read and dropped, never parsed."""
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with self.upstream.request(method, path, headers=headers, data=body) as resp:
                try:
                    raw = await resp.read()
                except (aiohttp.ClientError, OSError, TimeoutError):
                    return Unknown(sent=True)
                if resp.status >= HTTPStatus.BAD_REQUEST:
                    return resp.status, None
                try:
                    return resp.status, orjson.loads(raw)
                except orjson.JSONDecodeError:
                    return resp.status, None  # an answer memgov cannot read is no answer
        except UpstreamUnavailable as exc:
            return Unknown(sent=exc.sent, timeout=exc.timeout)

    async def save(
        self,
        agent_name: str,
        storage_key: str,
        content: str,
        vector: list[float],
        ttl_days: int,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Created | Rejected | Unknown:
        """Save one row; ``Created(id)`` only for 201 with a string id."""
        # SECURITY: the body is built from checked values only: one agent name, the storage key.
        body = dumps(
            {
                "agent_name": agent_name,
                "user_id": storage_key,
                "content": content,
                "vector": vector,
                "ttl_days": ttl_days,
            }
        )
        got = await self._call("POST", SAVE_PATH, self._with(headers, (agent_name, storage_key)), body)
        if isinstance(got, Unknown):
            return got
        status, answer = got
        if status != HTTPStatus.CREATED:
            return Rejected(status)
        entry_id = answer.get("id") if isinstance(answer, dict) else None
        # A 201 names a row that exists; without its id memgov cannot account for it.
        return Created(entry_id) if isinstance(entry_id, str) else Unknown(sent=True)

    async def search(
        self,
        agent_name: str,
        storage_key: str,
        vector: list[float],
        limit: int,
        min_score: object,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Found | Rejected | Unknown:
        """Search one namespace; ``Found(rows)`` for a successful answer that is a JSON list."""
        body = dumps(
            {"agent_name": agent_name, "user_id": storage_key, "vector": vector, "limit": limit, "min_score": min_score}
        )
        got = await self._call("POST", SEARCH_PATH, self._with(headers, (agent_name, storage_key)), body)
        if isinstance(got, Unknown):
            return got
        status, answer = got
        found = _found(answer) if status < HTTPStatus.BAD_REQUEST else None
        return Rejected(status) if found is None else found

    async def list(self, agent_name: str, storage_key: str) -> Found | Rejected | Unknown:
        """Every row of one namespace, content included (callers keep what they need, in memory only)."""
        got = await self._call("GET", namespace_query(agent_name, storage_key), self._with(None), None)
        if isinstance(got, Unknown):
            return got
        status, answer = got
        found = _found(answer) if status == HTTPStatus.OK else None
        return Rejected(status) if found is None else found

    async def delete(self, agent_name: str, storage_key: str) -> Deleted | Rejected | Unknown:
        """Delete one whole namespace (kagent v0.9.11 has no per-row delete)."""
        got = await self._call("DELETE", namespace_query(agent_name, storage_key), self._with(None), None)
        if isinstance(got, Unknown):
            return got
        return Deleted() if got[0] == HTTPStatus.OK else Rejected(got[0])
