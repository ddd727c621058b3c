"""Operations listener: ``/metrics``, ``/healthz`` (process alive) and ``/readyz``.

Readiness means "can serve traffic": the conjunction of registered checks (the policy pack loaded
and validated, …); each check reports a short code and, for the policy, the pack revision. The
state store's check reports whether it answers without failing readiness: without it memory
degrades (SPEC D6) and everything else is still served.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final

from aiohttp import web

from sidecar.metrics import exposition

ReadyCheck = Callable[[], Awaitable[tuple[bool, dict[str, object]]]]


@dataclass
class Readiness:
    """Named readiness checks; the gateway registers one per dependency."""

    checks: dict[str, ReadyCheck] = field(default_factory=dict)

    async def evaluate(self) -> tuple[bool, dict[str, object]]:
        report: dict[str, object] = {}
        ready = True
        for name, check in self.checks.items():
            try:
                ok, detail = await check()
            except Exception:  # noqa: BLE001 - a failing check means not ready, nothing more
                ok, detail = False, {}
            ready = ready and ok
            report[name] = {"ok": ok, **detail}
        return ready, report


READINESS: Final = web.AppKey("readiness", Readiness)


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=exposition(), content_type="text/plain", charset="utf-8", headers={"X-Content-Type-Options": "nosniff"}
    )


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    ready, report = await request.app[READINESS].evaluate()
    return web.json_response(
        {"ready": ready, "checks": report}, status=HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
    )


def create_ops_app(readiness: Readiness) -> web.Application:
    """Build the operations app around a shared readiness registry."""
    app = web.Application()
    app[READINESS] = readiness
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app
