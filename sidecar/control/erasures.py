"""Erasure answers: the evidence record for success, a content-free error pointing to it on failure."""

from __future__ import annotations

from http import HTTPStatus
from typing import TYPE_CHECKING

from aiohttp import web

from sidecar.control.auth import Authenticator
from sidecar.control.http import ok, operation
from sidecar.control.models import ErasureRecord
from sidecar.erasure.evidence import build_evidence
from sidecar.reasons import Reason, Refusal
from sidecar.state import codec
from sidecar.state.types import Erasure, ErasureKind, ErasureState

if TYPE_CHECKING:
    from sidecar.state.audit import ErasureOps
    from sidecar.state.history import HistoryOps
    from sidecar.state.namespaces import NamespaceOps
    from sidecar.state.scopes import ScopeOps

_UPSTREAM = frozenset({Reason.UPSTREAM_ERROR.value, Reason.UPSTREAM_UNAVAILABLE.value})


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
        erasure_id = request.match_info["erasure_id"]
        try:
            codec.check_id(erasure_id, "erasure_id")
        except ValueError:
            raise Refusal(Reason.NOT_FOUND) from None
        erasure = await self._erasures.get_erasure(erasure_id)
        if erasure is None:
            raise Refusal(Reason.NOT_FOUND)
        if caller.kind == "subject":
            scope = await self._scopes.get_scope(erasure.scope_id)
            if scope is None or scope.principal_mxid != caller.sub:
                raise Refusal(Reason.NOT_SUBJECT, scope_id=erasure.scope_id)
        record = await self.of(erasure)
        return ok(record, headers={"Content-Disposition": f'inline; filename="erasure-{erasure.erasure_id}.json"'})
