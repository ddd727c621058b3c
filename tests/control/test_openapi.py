"""The published OpenAPI 3.1 document matches what the control API serves and routes."""

from __future__ import annotations

from pathlib import Path

from sidecar.control.http import SWEEPERS
from sidecar.control.openapi import openapi_text
from tests.support.harness import Harness

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


class TestOpenApi:
    async def test_served_document_is_the_checked_in_one(self, sh: Harness) -> None:
        """GET /v1/openapi.json needs no token and equals docs/openapi.json byte for byte."""
        async with sh.http.get(sh.gw.control_url + "/v1/openapi.json") as resp:
            assert resp.status == 200
            served = await resp.text()
        assert served == DOC.read_text() == openapi_text()

    async def test_every_route_is_documented_and_nothing_else(self, sh: Harness) -> None:
        """The document lists exactly the routes the running app's router serves (OpenAPI 3.1)."""
        doc = await sh.client().openapi()
        documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
        control = next(r.app for r in sh.gw.runners if SWEEPERS in r.app)
        served = {(route.method, route.resource.canonical) for route in control.router.routes() if route.resource}
        assert doc["openapi"] == "3.1.0"
        assert documented == served
