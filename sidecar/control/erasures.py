"""Erasure answers: the evidence record for success, a content-free error pointing to it on failure;
the operator's listing of erasures and the retry of a failed one."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from aiohttp import web

from sidecar.control.auth import Authenticator
from sidecar.control.http import ok, operation, page_limit
from sidecar.control.models import ErasureList, ErasureListed, ErasureRecord
from sidecar.erasure.evidence import build_evidence, iso
from sidecar.erasure.machine import ErasureEngine, NotRetryable
from sidecar.reasons import Reason, Refusal
from sidecar.state import codec
from sidecar.state.codec import from_us, to_us
from sidecar.state.types import Erasure, ErasureFilter, ErasureKind, ErasureState, ErasureSummary

if TYPE_CHECKING:
    from sidecar.state.audit import ErasureOps
    from sidecar.state.history import HistoryOps
    from sidecar.state.namespaces import NamespaceOps
    from sidecar.state.scopes import ScopeOps

_UPSTREAM = frozenset({Reason.UPSTREAM_ERROR.value, Reason.UPSTREAM_UNAVAILABLE.value})


async def named_erasure(erasures: ErasureOps, request: web.Request) -> Erasure:
    """The erasure the path names, or 404 not_found (also for an id of another shape)."""
    erasure_id = request.match_info["erasure_id"]
    try:
        codec.check_id(erasure_id, "erasure_id")
    except ValueError:
        raise Refusal(Reason.NOT_FOUND) from None
    erasure = await erasures.get_erasure(erasure_id)
    if erasure is None:
        raise Refusal(Reason.NOT_FOUND)
    return erasure


def location(erasure: Erasure) -> dict[str, str]:
    """Where the evidence of an erasure can be fetched."""
    return {"Location": f"/v1/erasures/{erasure.erasure_id}"}


class ErasureEvidence:
    """Erasure evidence as the control API answers it, built from the erasure's own rows."""

    __slots__ = ("_auth", "_erasures", "_history", "_namespaces", "_scopes")

    def __init__(
        self,
        auth: Authenticator,
        scopes: ScopeOps,
        erasures: ErasureOps,
        history: HistoryOps,
        namespaces: NamespaceOps,
    ) -> None:
        self._auth, self._scopes, self._erasures = auth, scopes, erasures
        self._history, self._namespaces = history, namespaces

    async def of(self, erasure: Erasure) -> ErasureRecord:
        """The evidence record of an erasure, built from its rows, its entries' ledger stamps and, for a
        whole-scope erasure or a rotation, the scope's namespaces; a forget-one also names the rotations since it."""
        ledger = await self._history.evidence_entries(erasure.erasure_id)
        forget_one = erasure.kind is ErasureKind.FORGET_ONE
        namespaces = [] if forget_one else await self._namespaces.namespaces_of_scope(erasure.scope_id)
        rotations = await self._erasures.rotations_after(erasure) if forget_one else []
        return ErasureRecord.model_validate(build_evidence(erasure, ledger, namespaces, rotations))

    async def answer(self, erasure: Erasure) -> ErasureRecord:
        """The evidence of an erasure; a failed one becomes an error carrying only its code.

        An erasure still waiting (a write of unknown outcome may land until ``not_before``) is
        answered with its evidence as it stands: state ``deleted``, verification pending. The engine has
        already audited a failure and disabled the scope; the ``Location`` header leads to the evidence.
        """
        if erasure.state is ErasureState.FAILED:
            reason = Reason(erasure.failure_reason or Reason.ERASURE_FAILED.value)
            # An erasure that failed is the gateway's failure: 502 when kagent failed it, else 500.
            status = HTTPStatus.BAD_GATEWAY if reason.value in _UPSTREAM else HTTPStatus.INTERNAL_SERVER_ERROR
            raise Refusal(reason, status=status, scope_id=erasure.scope_id, recorded=True, headers=location(erasure))
        return await self.of(erasure)

    async def get(self, request: web.Request) -> web.Response:
        """GET /v1/erasures/{erasure_id}: the evidence, for the scope's subject or an operator."""
        operation(request, "erasure.get")
        caller = self._auth.authenticate(request)
        erasure = await named_erasure(self._erasures, request)
        if caller.kind == "subject":
            scope = await self._scopes.get_scope(erasure.scope_id)
            if scope is None or scope.principal_mxid != caller.sub:
                raise Refusal(Reason.NOT_SUBJECT, scope_id=erasure.scope_id)
        record = await self.of(erasure)
        return ok(record, headers={"Content-Disposition": f'inline; filename="erasure-{erasure.erasure_id}.json"'})


_CURSOR = re.compile(r"^([0-9]{1,19})\.(e[0-9a-f]{24})$")


def _time(raw: str | None) -> datetime | None:
    """An RFC 3339 time with its offset (``Z`` or ``±hh:mm``); anything else is bad_request."""
    if raw is None:
        return None
    try:
        when = datetime.fromisoformat(raw) if len(raw) <= 40 else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise Refusal(Reason.BAD_REQUEST)
    return when.astimezone(UTC)


def _choice(raw: str | None, values: type[StrEnum]) -> str | None:
    if raw is None:
        return None
    if raw not in {v.value for v in values}:
        raise Refusal(Reason.BAD_REQUEST)
    return raw


def _flag(raw: str | None) -> bool | None:
    if raw is None:
        return None
    if raw not in ("true", "false"):
        raise Refusal(Reason.BAD_REQUEST)
    return raw == "true"


def _cursor(raw: str | None) -> tuple[datetime, str] | None:
    if raw is None:
        return None
    found = _CURSOR.fullmatch(raw)
    if found is None:
        raise Refusal(Reason.BAD_REQUEST)
    return from_us(int(found.group(1))), found.group(2)


def _listed(e: ErasureSummary) -> ErasureListed:
    return ErasureListed.model_validate(
        {
            "erasure_id": e.erasure_id,
            "scope_id": e.scope_id,
            "kind": e.kind,
            "state": e.state,
            "adapter": e.adapter,
            "requested_by": e.requested_by_kind,
            "failure_reason": e.failure_reason,
            "created_at": iso(e.created_at),
            "updated_at": iso(e.updated_at),
            "retry_of": e.retry_of,
            "superseded_by": e.superseded_by,
        }
    )


class ErasureAdmin:
    """The operator's erasure routes: a content-free listing, and the retry of a failed erasure."""

    __slots__ = ("_auth", "_engine", "_erasures", "_evidence")

    def __init__(
        self, auth: Authenticator, evidence: ErasureEvidence, engine: ErasureEngine, erasures: ErasureOps
    ) -> None:
        self._auth, self._evidence, self._engine, self._erasures = auth, evidence, engine, erasures

    async def list(self, request: web.Request) -> web.Response:
        """GET /v1/erasures: one page of erasures matching the query, newest first (operator only)."""
        operation(request, "erasure.list")
        self._auth.require_operator(request)
        q = request.query
        if set(q) - _LIST_PARAMS or any(len(q.getall(k)) > 1 for k in q):
            raise Refusal(Reason.BAD_REQUEST)  # an unknown filter must not silently list everything
        scope = q.get("scope")
        if scope is not None:
            try:
                codec.check_scope_id(scope)
            except ValueError:
                raise Refusal(Reason.BAD_REQUEST) from None
        state, kind = _choice(q.get("state"), ErasureState), _choice(q.get("kind"), ErasureKind)
        which = ErasureFilter(
            state=ErasureState(state) if state else None,
            kind=ErasureKind(kind) if kind else None,
            scope_id=scope,
            since=_time(q.get("since")),
            until=_time(q.get("until")),
            superseded=_flag(q.get("superseded")),
        )
        limit = page_limit(q.get("limit"))
        page = await self._erasures.list_erasures(which, limit, _cursor(q.get("cursor")))
        last = page[-1] if len(page) == limit else None
        cursor = f"{to_us(last.created_at)}.{last.erasure_id}" if last is not None else None
        return ok(ErasureList(erasures=[_listed(e) for e in page], next_cursor=cursor))

    async def retry(self, request: web.Request) -> web.Response:
        """POST /v1/erasures/{erasure_id}/retry: run a failed erasure again (operator only)."""
        operation(request, "erasure.retry")
        self._auth.require_operator(request)
        failed = await named_erasure(self._erasures, request)
        try:
            erasure = await self._engine.retry(failed, "operator")
        except NotRetryable as refused:
            raise Refusal(
                refused.reason or Reason.ERASURE_NOT_RETRYABLE, status=HTTPStatus.CONFLICT, scope_id=failed.scope_id
            ) from None
        return ok(await self._evidence.answer(erasure), headers=location(erasure))


_LIST_PARAMS: Final = frozenset({"state", "kind", "scope", "since", "until", "superseded", "cursor", "limit"})
