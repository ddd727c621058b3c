"""An async client for every control API endpoint (used by ``memgov scope``, ``memgov drill`` and tests).

Every method returns the answer read with its response model (:mod:`sidecar.control.models`, the
same models the server answers with). A refusal raises :class:`ControlError` with the HTTP status,
the reason code, the decision id and, for a failed erasure, the evidence location; an answer of
another shape raises it too, as ``internal_error``. An erasure record can also be fetched exactly as the
server sent it, for export (:meth:`ControlClient.erasure_document`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal, TypeVar, overload
from urllib.parse import quote

import aiohttp
from pydantic import BaseModel, ValidationError

from sidecar.control import models as a
from sidecar.reasons import REASON_VALUES, Reason
from sidecar.upstream import CONTEXT_HEADER


class ControlError(Exception):
    """The control API refused a call; ``reason`` is its code (``internal_error`` if unreadable)."""

    def __init__(self, status: int, reason: str, decision_id: str | None, location: str | None) -> None:
        super().__init__(f"{status} {reason}")
        self.status, self.reason, self.decision_id, self.location = status, reason, decision_id, location


T = TypeVar("T", bound=BaseModel)

#: A bearer token, or something that mints a fresh one per call (subject tokens are single-use
#: for consent changes and erasures).
Token = str | Callable[[], str] | None
#: The two erasures the control API runs only with a confirmation token from a first call.
Confirmed = Literal["forget-all", "off"]


class ControlClient:
    """Calls one control API base URL as one caller."""

    def __init__(
        self,
        base_url: str,
        token: Token = None,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self._own = session is None
        self._session = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))

    def as_caller(self, token: Token) -> ControlClient:
        """The same endpoint and connection pool with another caller's token."""
        return ControlClient(self.base_url, token, session=self._session)

    async def close(self) -> None:
        if self._own:
            await self._session.close()

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[int, object]:
        """One request; returns (status, decoded body) for 2xx, raises ControlError otherwise."""
        sent = dict(headers or {})
        token = self.token() if callable(self.token) else self.token
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        async with self._session.request(method, self.base_url + path, json=json, headers=sent, params=params) as resp:
            try:
                body: object = await resp.json(content_type=None)
            except ValueError:
                body = None
            if resp.status >= 400:
                fields = body if isinstance(body, dict) else {}
                reason, decision_id = fields.get("error"), fields.get("decision_id")
                raise ControlError(
                    resp.status,
                    reason if isinstance(reason, str) and reason in REASON_VALUES else "internal_error",
                    decision_id if isinstance(decision_id, str) else None,
                    resp.headers.get("Location"),
                )
            return resp.status, body

    async def _json(self, shape: type[T], method: str, path: str, **how: Any) -> T:
        return (await self._checked(shape, method, path, **how))[0]

    async def _checked(
        self,
        shape: type[T],
        method: str,
        path: str,
        *,
        json: object = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> tuple[T, Mapping[str, object]]:
        """The answer read with ``shape``, and the JSON object it was read from."""
        status, body = await self.call(method, path, json=json, headers=headers, params=params)
        try:
            if isinstance(body, dict):
                return shape.model_validate(body), body
        except ValidationError:
            pass
        # An answer of another shape than the control API documents is the server's failure.
        raise ControlError(status, Reason.INTERNAL_ERROR.value, None, None)

    async def openapi(self) -> dict[str, object]:
        body = (await self.call("GET", "/v1/openapi.json"))[1]
        return body if isinstance(body, dict) else {}

    async def create_scope(
        self, mxid: str, agent: str, room_id: str, *, origin: str = "native", kind: str = "control_room"
    ) -> a.ScopeCreated:
        body = {
            "principal": {"mxid": mxid, "origin": origin},
            "agent": agent,
            "scope": {"kind": kind, "room_id": room_id},
        }
        return await self._json(a.ScopeCreated, "POST", "/v1/scopes", json=body)

    async def status(self, scope_id: str) -> a.ScopeStatus:
        return await self._json(a.ScopeStatus, "GET", f"/v1/scopes/{scope_id}")

    async def grant(self, scope_id: str, purpose: str, policy_version: str) -> a.ConsentChange:
        body = {"purpose": purpose, "policy_version": policy_version}
        return await self._json(a.ConsentChange, "PUT", f"/v1/scopes/{scope_id}/consent", json=body)

    async def withdraw(self, scope_id: str) -> a.ConsentChange:
        return await self._json(a.ConsentChange, "DELETE", f"/v1/scopes/{scope_id}/consent")

    async def inspect(
        self, scope_id: str, context: str, *, cursor: str | None = None, limit: int | None = None
    ) -> a.InspectPage:
        """One page; ``context`` is a fresh signed context for this page (each is single use)."""
        params = {k: str(v) for k, v in (("cursor", cursor), ("limit", limit)) if v is not None}
        return await self._json(
            a.InspectPage, "GET", f"/v1/scopes/{scope_id}/entries", headers={CONTEXT_HEADER: context}, params=params
        )

    async def inspect_all(
        self, scope_id: str, contexts: AsyncIterator[str], *, limit: int | None = None
    ) -> list[a.EntryOut]:
        """Every page, each with the next context from ``contexts``."""
        entries: list[a.EntryOut] = []
        cursor = None
        async for context in contexts:
            page = await self.inspect(scope_id, context, cursor=cursor, limit=limit)
            entries.extend(page.entries)
            cursor = page.next_cursor
            if cursor is None:
                break
        return entries

    async def forget(self, scope_id: str, entry_id: str) -> a.ErasureRecord:
        path = f"/v1/scopes/{scope_id}/entries/{quote(entry_id, safe='')}"
        return await self._json(a.ErasureRecord, "DELETE", path)

    @overload
    async def confirmed(self, scope_id: str, action: Confirmed, confirm: None = None) -> a.ConfirmationIssued: ...
    @overload
    async def confirmed(self, scope_id: str, action: Confirmed, confirm: str) -> a.ErasureRecord: ...
    async def confirmed(
        self, scope_id: str, action: Confirmed, confirm: str | None = None
    ) -> a.ConfirmationIssued | a.ErasureRecord:
        """Forget-all (``forget-all``) or off (``off``): without ``confirm``, the confirmation token; with
        it, the erasure record."""
        path = f"/v1/scopes/{scope_id}/{action}"
        if confirm is None:
            return await self._json(a.ConfirmationIssued, "POST", path, json=None)
        return await self._json(a.ErasureRecord, "POST", path, json={"confirm": confirm})

    async def confirm_and_run(self, scope_id: str, action: Confirmed) -> a.ErasureRecord:
        """Both calls of forget-all (``forget-all``) or off (``off``)."""
        issued = await self.confirmed(scope_id, action)
        return await self.confirmed(scope_id, action, issued.confirm_token)

    async def offboard(self, mxid: str) -> a.OffboardResult:
        return await self._json(a.OffboardResult, "POST", f"/v1/principals/{quote(mxid, safe='')}/offboard")

    async def erasure(self, erasure_id: str) -> a.ErasureRecord:
        """The evidence record."""
        return await self._json(a.ErasureRecord, "GET", f"/v1/erasures/{quote(erasure_id, safe='')}")

    async def erasures(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        scope: str | None = None,
        since: str | None = None,
        until: str | None = None,
        superseded: bool | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> a.ErasureList:
        """One page of the erasures matching every filter given (operator token), newest first."""
        given = {
            "state": state,
            "kind": kind,
            "scope": scope,
            "since": since,
            "until": until,
            "superseded": None if superseded is None else str(superseded).lower(),
            "cursor": cursor,
            "limit": limit,
        }
        params = {k: str(v) for k, v in given.items() if v is not None}
        return await self._json(a.ErasureList, "GET", "/v1/erasures", params=params)

    async def retry_erasure(self, erasure_id: str) -> a.ErasureRecord:
        """Run a failed erasure again (operator token); the record of the retry that ran."""
        return await self._json(a.ErasureRecord, "POST", f"/v1/erasures/{quote(erasure_id, safe='')}/retry")

    async def erasure_document(self, erasure_id: str) -> Mapping[str, object]:
        """The evidence record exactly as the server sent it (checked to be one), to export as is."""
        return (await self._checked(a.ErasureRecord, "GET", f"/v1/erasures/{quote(erasure_id, safe='')}"))[1]


def _as_json(value: object) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    return value


class JsonAnswers:
    """The same calls as a :class:`ControlClient`, each answer as the JSON object its model read (the
    model's own dump): the drill writes evidence bundles of them, and scripts compare them as JSON."""

    __slots__ = ("client",)

    def __init__(self, client: ControlClient) -> None:
        self.client = client

    def as_caller(self, token: Token) -> JsonAnswers:
        return JsonAnswers(self.client.as_caller(token))

    @property
    def token(self) -> Token:
        return self.client.token

    @token.setter
    def token(self, token: Token) -> None:
        self.client.token = token

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        call = getattr(self.client, name)

        async def as_json(*args: Any, **kwargs: Any) -> Any:
            return _as_json(await call(*args, **kwargs))

        return as_json
