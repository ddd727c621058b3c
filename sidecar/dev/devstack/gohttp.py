"""Responses spelled the way kagent's Go server writes them."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sidecar.dev.devstack.gojson import go_dumps


def go_json(status: int, payload: Any) -> web.Response:
    """``RespondWithJSON``: json.Marshal output, ``Content-Type: application/json``, no newline."""
    return web.Response(status=status, body=go_dumps(payload).encode(), content_type="application/json")


def go_error(status: int, message: str) -> web.Response:
    """``RespondWithError``: ``{"error": "<message>"}``."""
    return go_json(status, {"error": message})


def http_error(status: int, text: str) -> web.Response:
    """net/http's ``http.Error``: plain text plus a newline, nosniff."""
    resp = web.Response(status=status, text=text + "\n", content_type="text/plain", charset="utf-8")
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def not_found() -> web.Response:
    """gorilla/mux's default 404 (``http.NotFound``)."""
    return http_error(404, "404 page not found")


def method_not_allowed() -> web.Response:
    """gorilla/mux's default 405: status only, empty body."""
    return web.Response(status=405)


def moved(location: str) -> web.Response:
    """gorilla/mux's redirect to the cleaned path: 301, Location, empty body."""
    return web.Response(status=301, headers={"Location": location})
