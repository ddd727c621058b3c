"""Shared fixtures: a real PostgreSQL server per test session, fresh databases per test, kagent, spans.

``real_kagent`` is kagent's own controller HTTP server on a fresh database, once per supported release
and auth mode. Tests marked ``@pytest.mark.kagent`` that use the ``upstream`` fixture run against the
stand-in and against each release of the real kagent in both auth modes (see tests/support/upstream.py).
``spans`` records every finished trace span in memory (traces are a sink, R-14).
``kube`` is a real Kubernetes API server (etcd and kube-apiserver, no kubelet) per worker session.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar import tracing
from sidecar.dev.devstack.pg import PORT_RANGE_ENV
from sidecar.dev.devstack.realkagent import AUTH_MODES, AuthMode, RealKagent, start_real_kagent
from sidecar.dev.devstack.releases import RELEASES, KagentRelease
from tests.support.hangs import tasks_dumped_before
from tests.support.kube import KubeApi, kube_api
from tests.support.pg import PgServer, start_pg
from tests.support.upstream import (
    MARKER,
    REAL_MARKER,
    STANDIN,
    Upstream,
    kagent_database,
    marked_upstreams,
    upstream_params,
)

_db_names = itertools.count(1)


def pytest_configure(config: pytest.Config) -> None:
    # Each parallel worker (pytest-xdist) picks its servers' ports from its own slice, below the kernel's
    # ephemeral range: no worker, and no outgoing connection, can take a port between its pick and its bind.
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    low = 20_000 + 1_000 * worker
    os.environ[PORT_RANGE_ENV] = f"{low}-{low + 999}"
    config.addinivalue_line(
        "markers",
        f"{MARKER}(releases=, auth_modes=, standins=): also run against kagent itself, each release in both auth modes",
    )
    config.addinivalue_line("markers", f"{REAL_MARKER}: runs kagent itself (selected by make conformance)")
    config.addinivalue_line("markers", f"{SLOW}: left out of `make check` (see SLOW_FIXTURES and SLOW_MODULES)")


#: ``make check`` leaves out the tests marked ``slow``: every test that uses one of these fixtures (each
#: starts a gateway process or an API server, or builds or unpacks the wheel, the image or a benchmark run) ...
SLOW = "slow"
SLOW_FIXTURES = frozenset({"launch", "target", "image", "wheel", "venv", "smoke", "kube"})
#: ... and every test of these modules (processes killed and restarted, races between processes, the
#: fuzz sample, the supervisor and serve's start-up, listeners and outage processes, OPA and Helm runs, the
#: policy CLI run end to end (OPA, Regal, an OPA server) and its worked example, proofs and pack diffs, the
#: corpus of planted policy mistakes, the drill, the doctor's CLI, the history benchmark).
SLOW_MODULES = frozenset(
    {
        "tests/erasure/test_crash.py",
        "tests/erasure/test_rotation_crash.py",
        "tests/erasure/test_race.py",
        "tests/erasure/test_rotation_race.py",
        "tests/erasure/test_procs.py",
        "tests/fuzz/test_sample.py",
        "tests/test_serve.py",
        "tests/test_shutdown.py",
        "tests/test_demo.py",
        "tests/chart/test_opa_run.py",
        "tests/policy/test_worked_example.py",
        "tests/policy/test_cli.py",
        "tests/policy/test_prove.py",
        "tests/policy/test_diff.py",
        "tests/policy/test_mistakes.py",
        "tests/drill/test_drill.py",
        "tests/boundary/test_doctor.py",
        "tests/test_startup.py",
        "tests/test_network.py",
        "tests/enforce/test_outage.py",
        "tests/bench/test_history.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        module = item.path.relative_to(root).as_posix()
        if module in SLOW_MODULES or SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(SLOW)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test about to time out prints where its asyncio tasks wait (tests/support/hangs.py)."""
    marker = item.get_closest_marker("timeout")
    timeout = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)
    with tasks_dumped_before(timeout):
        return (yield)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marked = marked_upstreams(metafunc.definition)
    if "upstream" in metafunc.fixturenames and marked:
        metafunc.parametrize("upstream", upstream_params(marked), indirect=True)


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Upstream:
    """The kagent behind the test's gateway: the stand-in unless the test is marked ``kagent``."""
    return getattr(request, "param", STANDIN)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A real PostgreSQL server on loopback for the whole session."""
    server = start_pg()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    """A real Kubernetes API server for the whole session: admission and defaulting, nothing runs."""
    with kube_api(tmp_path_factory.mktemp("kube")) as api:
        yield api


@pytest.fixture
def own_pg() -> Iterator[PgServer]:
    """A PostgreSQL server of one test alone, for a test that stops it and starts it again."""
    server = start_pg(max_connections=60)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """URL of a fresh, empty database on the session's PostgreSQL server."""
    return pg_server.create_database(f"t{next(_db_names)}")


@pytest.fixture(params=AUTH_MODES)
def kagent_auth_mode(request: pytest.FixtureRequest) -> AuthMode:
    """kagent's --auth-mode."""
    mode: AuthMode = request.param
    return mode


@pytest.fixture(params=[pytest.param(r, id=r.tag) for r in RELEASES.values()])
def kagent_release(request: pytest.FixtureRequest) -> KagentRelease:
    """A supported kagent release."""
    release: KagentRelease = request.param
    return release


@pytest.fixture
def real_kagent(
    pg_server: PgServer, tmp_path: Path, kagent_auth_mode: AuthMode, kagent_release: KagentRelease
) -> Iterator[RealKagent]:
    """kagent's own server (pgvector, a 1 s cleanup loop) on a fresh, migrated database; its log is a sink."""
    db_url = kagent_database(pg_server, kagent_release)
    kagent = start_real_kagent(
        db_url, tmp_path / "kagent", auth_mode=kagent_auth_mode, release=kagent_release, cleanup_interval_s=1
    )
    try:
        yield kagent
    finally:
        kagent.stop()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for one test, every finished span kept in memory."""
    exporter = InMemorySpanExporter()
    tracing.export_to(exporter)
    yield exporter
    tracing.shutdown()
