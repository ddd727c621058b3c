#!/usr/bin/env bash
# Refresh the chart's copy of the policy pack (charts/memgov/files/policies) from policies/.
# Helm can only read files inside a chart, so the chart ships this copy; the chart tests fail
# whenever it differs from policies/ by a single byte.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/policies"
dst="$root/charts/memgov/files/policies"
[ -d "$src" ] || { echo "no policy pack at $src" >&2; exit 1; }
tmp=$(mktemp -d "$root/charts/memgov/files/.policies.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
# Hidden files and editor droppings are not part of the pack.
(cd "$src" && find . -type f ! -name '.*' ! -path '*/.*' ! -name '*~' -print0) |
  while IFS= read -r -d '' f; do
    mkdir -p "$tmp/$(dirname "$f")"
    cp -p "$src/$f" "$tmp/$f"
  done
rm -rf "$dst"
mv "$tmp" "$dst"
trap - EXIT
echo "synced $(find "$dst" -type f | wc -l) policy files into ${dst#"$root"/}"
