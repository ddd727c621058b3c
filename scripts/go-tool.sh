#!/usr/bin/env bash
# Build one pinned Go tool into the shared cache (once per version) and link it into .tools/bin.
# usage: scripts/go-tool.sh NAME MODULE VERSION PACKAGE
#   MODULE may be a folder of this repository (./scripts/…) holding its own go.mod; VERSION then
#   names its content so an edit rebuilds it. GO_TOOL_TAGS adds Go build tags (part of the cache name);
#   GO_TOOL_LDFLAGS passes linker flags (derive them from VERSION, which names the cached binary).
set -euo pipefail
name=$1 module=$2 version=$3 pkg=$4
tags=${GO_TOOL_TAGS:-}
. "$(dirname "$0")/tool-cache.sh"
bin="$cache/$name-$version${tags:++$tags}"
if tool_wanted "$bin" "$bin.lock"; then
  command -v go >/dev/null || { echo "go is required to build $name $version" >&2; exit 1; }
  echo "building $name $version (cached in $cache)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  flags=()
  [ -n "$tags" ] && flags=(-tags "$tags")
  [ -n "${GO_TOOL_LDFLAGS:-}" ] && flags+=(-ldflags "$GO_TOOL_LDFLAGS")
  if [[ $module == ./* ]]; then
    (cd "$module" && go build "${flags[@]}" -o "$work/$name" "$pkg")
  elif ! GOBIN="$work" go install "${flags[@]}" "$pkg@$version" 2>"$work/err"; then
    # Some proxies refuse the version list that `go install pkg@version` reads for deprecation
    # notices; resolving the pinned version inside a throwaway module avoids that request.
    (cd "$work" && go mod init memgov.local/tools >/dev/null 2>&1 \
      && go get "$module@$version" >/dev/null 2>&1 && GOBIN="$work" go install "${flags[@]}" "$pkg") \
      || { cat "$work/err" >&2; exit 1; }
  fi
  mv "$work/$name" "$bin.tmp" && mv "$bin.tmp" "$bin"
fi
tool_link "$bin" "$name"
