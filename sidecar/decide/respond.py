"""Answering a decision: the decision header, content-free errors, and the refusal a policy made.

A refusal the policy made is raised as :class:`Denied`, carrying its decision (already recorded
by the decider); every governed answer carries ``X-Memgov-Decision``.
"""

from __future__ import annotations

from http import HTTPStatus

from aiohttp import web

from sidecar.policy.model import Decision
from sidecar.reasons import Code, Refusal, primary
from sidecar.relay import json_error
from sidecar.wire import dumps

DECISION_HEADER = "X-Memgov-Decision"


class Denied(Refusal):
    """The policy (engine and floor) refused: the decision is already recorded; 403 (SPEC D6) whatever the code."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(primary(decision.reasons), status=HTTPStatus.FORBIDDEN, recorded=True)
        self.decision = decision


def primary_reason(decision: Decision) -> Code:
    return primary(decision.reasons)


def header_value(decision: Decision) -> str:
    return f"{decision.action.value}; reason={primary_reason(decision).value}; id={decision.decision_id}"


def decision_headers(decision: Decision) -> dict[str, str]:
    """Response headers every governed answer carries."""
    return {DECISION_HEADER: header_value(decision)}


def stamp(resp: web.StreamResponse, decision: Decision) -> web.StreamResponse:
    resp.headers[DECISION_HEADER] = header_value(decision)
    return resp


def error(request: web.Request, refusal: Refusal, decision: Decision) -> web.Response:
    """A refusal's content-free error answer, carrying the decision header."""
    resp = json_error(
        request,
        refusal.status,
        primary_reason(decision),
        upstream_status=refusal.upstream_status,
        headers=refusal.headers,
    )
    stamp(resp, decision)
    return resp


def json_answer(status: int, payload: object, decision: Decision) -> web.Response:
    resp = web.Response(status=status, body=dumps(payload), content_type="application/json")
    stamp(resp, decision)
    return resp
