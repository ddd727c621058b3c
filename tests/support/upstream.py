"""Which kagent a test's gateway talks to: the stand-in, or kagent itself (one release, one auth mode).

A test opts in to the real kagent with ``@pytest.mark.kagent``; it then runs on the stand-in and on
each supported release of kagent itself through the ``upstream`` fixture: v0.9.11 in both of its
auth modes (``unsecure``, ``trusted-proxy``), v0.10.0-rc3 in ``trusted-proxy`` mode
(``DEFAULT_AUTH_MODES``); each parameter is named by what it runs (``standin``,
``kagent-v0.10.0-rc3-trusted-proxy``, ...). The marker's ``releases=("0.10",)`` narrows the
releases, ``auth_modes=(...)`` names the modes for every release; ``standins=("0.9", "0.10")``
also runs the stand-in's v0.10 model (``standin-v0.10.0-rc3``), ``standins=("0.10",)`` that model
alone. With the real
kagent the stack is a hybrid: kagent's own server answers every controller route and owns the
``memory`` table; the stand-in app only plays the agents kagent proxies A2A invocations to (and
their simulated Python runtime) and the embedding provider; the stand-in's store is opened on
kagent's database, so ``dev.store.rows()`` reads kagent's real rows.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import itertools
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jwt
import pytest

from sidecar.dev.devstack.pg import PgServer
from sidecar.dev.devstack.realkagent import AUTH_MODES, AuthMode, start_real_kagent
from sidecar.dev.devstack.releases import DEFAULT, RELEASES, KagentRelease
from sidecar.dev.devstack.stack import Devstack, start_devstack
from sidecar.dev.devstack.stores import open_memory_store

MARKER = "kagent"
_databases = itertools.count()
#: Carried by every test (or parameter) that runs kagent itself: ``make conformance`` selects it.
REAL_MARKER = "real_kagent"


@dataclass(frozen=True)
class Upstream:
    """One choice of kagent for a test: the stand-in modelling a release, or that release itself."""

    kind: Literal["standin", "kagent"]
    auth_mode: AuthMode = "unsecure"
    release: KagentRelease = DEFAULT

    @property
    def real(self) -> bool:
        return self.kind == "kagent"

    @property
    def id(self) -> str:
        if not self.real:
            return "standin" if self.release == DEFAULT else f"standin-{self.release.tag}"
        return f"kagent-{self.release.tag}-{self.auth_mode}"


STANDIN = Upstream("standin")
STANDINS = tuple(Upstream("standin", release=r) for r in RELEASES.values())
REAL = tuple(Upstream("kagent", mode, r) for r in RELEASES.values() for mode in AUTH_MODES)
UPSTREAMS = (STANDIN, *REAL)
#: The auth modes a marked test runs each release in unless its marker names them. Both for v0.9.11;
#: v0.10 changes nothing memgov's bearer handling depends on (its changes are proved in both modes by
#: the tests that name them), so the rest runs it in trusted-proxy mode, where memgov mints the bearer
#: of its own calls: the second release then costs half as much (docs/testing.md).
DEFAULT_AUTH_MODES: dict[str, tuple[AuthMode, ...]] = {"0.9": AUTH_MODES, "0.10": ("trusted-proxy",)}


_templates: dict[tuple[int, str], str] = {}
_template_lock = threading.Lock()


def kagent_database(pg_server: PgServer, release: KagentRelease = DEFAULT) -> str:
    """A fresh database as ``release`` leaves it after its migrations, copied from a template.

    kagent migrates the template once per PostgreSQL server, release (and test worker); every later
    database is a file copy of it, so a test's kagent starts without running its migrations again.
    """
    with _template_lock:
        template = _templates.get((pg_server.port, release.name))
        if template is None:
            template = f"kagent_template_{pg_server.port}_{release.name.replace('.', '_')}"
            url = pg_server.create_database(template)
            start_real_kagent(url, pg_server.datadir.parent / f"kagent-template-{release.name}", release=release).stop()
            _templates[(pg_server.port, release.name)] = template
    return pg_server.create_database(f"kagent_{next(_databases)}", template=template)


def upstream_params(upstreams: tuple[Upstream, ...], value: Any = None) -> list[Any]:
    """``pytest.param`` per upstream, named by its id; real ones carry the ``real_kagent`` marker."""
    return [
        pytest.param(
            u if value is None else value(u), id=u.id, marks=[getattr(pytest.mark, REAL_MARKER)] if u.real else []
        )
        for u in upstreams
    ]


def marked_upstreams(definition: pytest.Function) -> tuple[Upstream, ...]:
    """Every kagent a test asked for with its ``kagent`` marker: the stand-in models (by default the
    default one) and the real releases in their auth modes; none when unmarked."""
    marker = definition.get_closest_marker(MARKER)
    if marker is None:
        return ()
    releases = marker.kwargs.get("releases", tuple(RELEASES))
    standins = marker.kwargs.get("standins", (DEFAULT.name,))
    return (
        *(u for u in STANDINS if u.release.name in standins),
        *(
            u
            for u in REAL
            if u.release.name in releases
            and u.auth_mode in marker.kwargs.get("auth_modes", DEFAULT_AUTH_MODES[u.release.name])
        ),
    )


def sa_token(agent_ref: str) -> str:
    """A projected-service-account-shaped JWT (kagent's trusted-proxy mode parses it, never verifies it)."""
    ns, _, name = agent_ref.partition("/")

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    claims = {"sub": f"system:serviceaccount:{ns}:{name}", "iss": "https://kubernetes.default.svc"}
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def bridge_headers(upstream: Upstream, user: str) -> dict[str, str]:
    """What the bridge sends kagent for ``user`` in this auth mode (an OIDC-style bearer naming the user)."""
    if upstream.auth_mode != "trusted-proxy":
        return {}
    token = jwt.encode({"sub": user}, "bridge-oidc-signing-key-32-bytes!", algorithm="HS256")
    return {"Authorization": f"Bearer {token}"}


def runtime_headers(upstream: Upstream, agent_ref: str) -> dict[str, str]:
    """What an agent runtime adds on its own to every controller call in this auth mode."""
    return {"Authorization": f"Bearer {sa_token(agent_ref)}"} if upstream.auth_mode == "trusted-proxy" else {}


def a2a_agents(refs: Iterable[str], standin_port: int) -> dict[str, str]:
    """kagent's agent registry: each agent's A2A endpoint is the stand-in agent of that name."""
    return {ref: f"http://127.0.0.1:{standin_port}/api/a2a/{ref}/" for ref in refs}


async def start_stack(
    upstream: Upstream,
    *,
    pg_server: PgServer | None,
    log_dir: Path,
    agents: Iterable[str] = (),
    store_url: str | None = None,
    **devstack: Any,
) -> Devstack:
    """Start the stand-ins, or the hybrid around a real kagent on a fresh database of ``pg_server``."""
    if not upstream.real:
        return await start_devstack(store_url=store_url, release=upstream.release, **devstack)
    assert pg_server is not None, "the real kagent needs the session's PostgreSQL server"
    db_url = await asyncio.to_thread(kagent_database, pg_server, upstream.release)
    # The agents kagent proxies to; its store is replaced below.
    dev = await start_devstack(release=upstream.release, **devstack)
    try:
        standin_port = int(dev.kagent_url.rsplit(":", 1)[1])
        kagent = await asyncio.to_thread(
            functools.partial(
                start_real_kagent,
                db_url,
                log_dir,
                auth_mode=upstream.auth_mode,
                release=upstream.release,
                agents=a2a_agents(agents, standin_port),
            )
        )
        try:
            await dev.attach_real_kagent(kagent, await open_memory_store(db_url, now=dev.clock))
        except BaseException:
            kagent.stop()
            raise
    except BaseException:
        await dev.stop()
        raise
    return dev
