#!/usr/bin/env bash
# CustomResourceDefinitions the chart's tests install on their API server, taken from a pinned Go
# module through the module proxy (Go's module cache keeps the download), copied once into the tools
# cache and linked as .tools/crds/NAME: prometheus-operator's ServiceMonitor and PrometheusRule,
# Cilium's network policies.
# usage: scripts/crds.sh NAME MODULE VERSION FOLDER FILE...   (FOLDER and FILEs inside the module)
set -euo pipefail
name=$1 module=$2 version=$3 folder=$4
shift 4
. "$(dirname "$0")/tool-cache.sh"
dest="$cache/$name-crds-$version"
mkdir -p .tools/crds
# Two checkouts may fetch at once: one copies, the other waits on the lock and finds the copy.
exec 9>"$dest.lock"
flock 9
if [ ! -d "$dest" ]; then
  command -v go >/dev/null || { echo "go is required to fetch $module $version" >&2; exit 1; }
  dir=$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] || { echo "could not download $module $version" >&2; exit 1; }
  mkdir -p "$dest.tmp"
  for file in "$@"; do
    cp "$dir/$folder/$file" "$dest.tmp/"
  done
  chmod -R u+w "$dest.tmp" && mv "$dest.tmp" "$dest"
fi
ln -sfn "$dest" ".tools/crds/$name"
