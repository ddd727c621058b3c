#!/usr/bin/env bash
# Keep the chart of a landed release as the upgrade tests' starting point (docs/releases.md).
# usage: scripts/previous-chart.sh COMMIT
#   Writes tests/chart/fixtures/memgov-<its chart version>.tgz from charts/memgov at COMMIT (a chart
#   archive `helm install` takes as it is) and removes the fixture of the release before it. The file
#   is committed: the tests need neither git history (CI may clone shallow) nor a chart repository.
set -euo pipefail
commit=${1:?usage: scripts/previous-chart.sh COMMIT}
cd "$(dirname "$0")/.."
version=$(git show "$commit:charts/memgov/Chart.yaml" | sed -n 's/^version: *//p')
[ -n "$version" ] || { echo "no chart version at $commit" >&2; exit 1; }
out=tests/chart/fixtures/memgov-$version.tgz
mkdir -p tests/chart/fixtures
find tests/chart/fixtures -name 'memgov-*.tgz' ! -name "memgov-$version.tgz" -delete
git archive --format=tar.gz --prefix=memgov/ "$commit:charts/memgov" > "$out"
echo "$out: charts/memgov of $(git rev-parse --short "$commit") (chart $version)"
