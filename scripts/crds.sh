#!/usr/bin/env bash
# The prometheus-operator CRDs the chart's ServiceMonitor and PrometheusRule are checked against on
# the tests' API server: taken from the pinned Go module through the module proxy (Go's module cache
# keeps the download), copied once into the tools cache and linked as .tools/crds/prometheus-operator.
# usage: scripts/prometheus-crds.sh VERSION
set -euo pipefail
version=$1
module=github.com/prometheus-operator/prometheus-operator
. "$(dirname "$0")/tool-cache.sh"
dest="$cache/prometheus-operator-crds-$version"
mkdir -p .tools/crds
# Two checkouts may fetch at once: one copies, the other waits on the lock and finds the copy.
exec 9>"$dest.lock"
flock 9
if [ ! -d "$dest" ]; then
  command -v go >/dev/null || { echo "go is required to fetch $module $version" >&2; exit 1; }
  dir=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { echo "could not download $module $version" >&2; exit 1; }
  mkdir -p "$dest.tmp"
  for kind in servicemonitors prometheusrules; do
    cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$dest.tmp/"
  done
  chmod -R u+w "$dest.tmp" && mv "$dest.tmp" "$dest"
fi
ln -sfn "$dest" .tools/crds/prometheus-operator
