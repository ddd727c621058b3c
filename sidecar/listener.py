"""An aiohttp runner whose every answer is memgov's own, even for requests no route ever sees.

aiohttp answers a request its HTTP parser refuses (``GET *``, an authority-form target, a
malformed header) with a text body that can quote the request line. memgov's listeners answer
those too with the one content-free error shape (SPEC D7): a reason code and a fresh decision id.
Every connection is bounded by its listener's caps and the request-head deadline
(``sidecar/connections.py``).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from sidecar.connections import BoundedConnection
from sidecar.logs import get_logger
from sidecar.reasons import Reason, error_body, new_decision_id

log = get_logger("server")


class _ContentFreeErrors(BoundedConnection):
    """A connection handler whose parser-level and last-resort errors carry only a reason code."""

    __slots__ = ()

    def handle_error(
        self,
        request: Any,
        status: int = HTTPStatus.INTERNAL_SERVER_ERROR,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("the response was already started")
        reason = Reason.INTERNAL_ERROR if status >= HTTPStatus.INTERNAL_SERVER_ERROR else Reason.BAD_REQUEST
        decision_id = new_decision_id()
        # SECURITY: the parser's message and the exception may quote the request; neither is kept.
        log.info(
            "request.unparsable",
            status=status,
            decision_id=decision_id,
            error_type=type(exc).__name__ if exc is not None else None,
        )
        resp = web.Response(status=status, body=error_body(reason, decision_id), content_type="application/json")
        resp.force_close()
        return resp


class _Server(web.Server):
    def __call__(self) -> RequestHandler:
        return _ContentFreeErrors(self, loop=self._loop, **self._kwargs)


class ContentFreeRunner(web.AppRunner):
    """``web.AppRunner`` whose connection handlers never answer with aiohttp's text pages.

    Takes ``gate`` (a :class:`sidecar.connections.Gate`), ``max_head_bytes`` and
    ``keepalive_timeout`` (the head deadline) among the handler arguments.
    """

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the same object and state; only how it makes handlers differs
        return server
