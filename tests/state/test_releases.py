"""Every release is its own version: the package, the chart and its image tag agree, and the state
schema never changes without a new version recorded in RELEASES (docs/releases.md)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import replace

import pytest
import yaml

import sidecar
from sidecar.state.migrations import LATEST, MIGRATIONS, RELEASES, Dialect, Migration, Release, digest
from tests.chart.helm import CHART, REPO, previous_chart_file

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def _key(version: str) -> tuple[int, ...]:
    match = _VERSION.match(version)
    assert match, f"{version} is not MAJOR.MINOR.PATCH"
    return tuple(int(x) for x in match.groups())


def package_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def released() -> tuple[str, int | None]:
    """The last released version, and the schema its chart names (charts name it from 0.2.0 on)."""
    chart = yaml.safe_load(previous_chart_file("Chart.yaml"))
    schema = (chart.get("annotations") or {}).get("memgov/schema-version")
    return str(chart["version"]), None if schema is None else int(schema)


def problems(
    releases: tuple[Release, ...],
    migrations: tuple[Migration, ...],
    package: str,
    released: str,
    released_schema: int | None = None,
) -> list[str]:
    """Why this record of releases does not fit these migrations and versions (empty when it does)."""
    found: list[str] = []
    if [m.version for m in migrations] != list(range(1, len(migrations) + 1)):
        found.append("migration versions are not 1, 2, 3, ... in order")
    versions = [r.version for r in releases]
    if [_key(v) for v in versions] != sorted({_key(v) for v in versions}):
        found.append(f"release versions do not strictly increase: {versions}")
    if versions[-1] != package:
        found.append(f"the package is {package} but the newest release recorded is {versions[-1]}: add its row")
    if releases[-1].schema != migrations[-1].version:
        found.append(
            f"the migrations reach schema {migrations[-1].version} but {versions[-1]} records {releases[-1].schema}:"
            " a schema change needs a version of its own, recorded in RELEASES"
        )
    for r in releases:
        if r.schema > len(migrations) or digest(migrations[: r.schema]) != r.migrations:
            found.append(f"{r.version}: migrations 1..{r.schema} are not what it shipped (never edit a migration)")
    rows = {r.version: r for r in releases}
    if released not in rows:
        found.append(f"the released {released} has no row")
    elif released_schema is not None and rows[released].schema != released_schema:
        found.append(f"{released} shipped schema {released_schema} but its row says {rows[released].schema}")
    elif _key(package) <= _key(released):
        found.append(f"{package} is already released: a change after a release needs a new version")
    return found


def _extra(d: Dialect) -> list[str]:
    return [d.table("next_table", d.i("x") + " PRIMARY KEY")]


_NEXT = Migration(LATEST + 1, "next", _extra, compatible_from=LATEST)
_EDITED = (replace(MIGRATIONS[0], statements=lambda d: [*MIGRATIONS[0].statements(d), "SELECT 1"]), *MIGRATIONS[1:])


class TestVersions:
    def test_package_chart_and_image_tag_name_one_version(self) -> None:
        """pyproject.toml, sidecar.__version__, the chart's version and its appVersion (the default image tag) agree,
        and the chart names the schema version its binary migrates to."""
        chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
        assert {package_version(), sidecar.__version__, chart["version"], chart["appVersion"]} == {package_version()}
        assert chart["annotations"]["memgov/schema-version"] == str(LATEST)

    def test_the_record_fits_this_checkout(self) -> None:
        """RELEASES ends with this version on these migrations, every earlier row still matches what it shipped,
        and this version is newer than the last released chart."""
        assert problems(RELEASES, MIGRATIONS, package_version(), *released()) == []

    @pytest.mark.parametrize(
        ("releases", "migrations", "package", "released_schema", "wanted"),
        [
            (RELEASES, (*MIGRATIONS, _NEXT), "0.2.0", None, "a schema change needs a version of its own"),
            (RELEASES, _EDITED, "0.2.0", None, "never edit a migration"),
            (RELEASES, MIGRATIONS, "0.3.0", None, "add its row"),
            (
                (*RELEASES[:-1], replace(RELEASES[-1], version="0.1.0")),
                MIGRATIONS,
                "0.1.0",
                None,
                "do not strictly increase",
            ),
            (RELEASES[:1], MIGRATIONS, "0.1.0", None, "is already released"),
            (RELEASES, MIGRATIONS, "0.2.0", RELEASES[0].schema - 1, "shipped schema"),
        ],
        ids=[
            "new-migration-no-version",
            "edited-migration",
            "bump-without-row",
            "same-version-twice",
            "no-bump",
            "released-row-rewritten",
        ],
    )
    def test_the_check_refuses(
        self,
        releases: tuple[Release, ...],
        migrations: tuple[Migration, ...],
        package: str,
        released_schema: int | None,
        wanted: str,
    ) -> None:
        """A schema change without a new version, an edited shipped migration, a version without its row,
        a repeated version, an unbumped package after a release and a released row rewritten are each
        refused, saying why."""
        found = problems(releases, migrations, package, "0.1.0", released_schema)
        assert any(wanted in p for p in found), found

    def test_a_new_schema_with_a_new_version_passes(self) -> None:
        """The way to change the schema: a new migration and a new release row for a new version."""
        migrations = (*MIGRATIONS, _NEXT)
        releases = (*RELEASES, Release("0.3.0", LATEST + 1, digest(migrations)))
        assert problems(releases, migrations, "0.3.0", "0.1.0") == []
