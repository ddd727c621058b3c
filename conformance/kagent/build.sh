#!/usr/bin/env bash
# Build the real-kagent conformance inputs once and cache them; print where they are.
#
#   conformance/kagent/build.sh server [V]   kagent's controller HTTP server of release V (our main.go in its tree)
#   conformance/kagent/build.sh client [V]   a venv with release V's kagent-adk/kagent-core (kagent's Python runtime)
#   conformance/kagent/build.sh runtime [V]  a driver of release V's Go runtime memory code (our runtime/main.go)
#   conformance/kagent/build.sh pgvector     pgvector 0.8.6 for the installed PostgreSQL server
#   conformance/kagent/build.sh release V    everything release V's tests use (server, runtime, client, pgvector)
#   conformance/kagent/build.sh all          every release
#
# V is a supported kagent release: 0.9 (v0.9.11, with kagent-adk 0.9.11; the default) or 0.10
# (v0.10.0-rc3, with kagent-adk 0.10.4). Inputs come from $MEMGOV_VENDOR_DIR (default:
# ../shared/vendor next to the repository) and are checked against pinned sha256 sums. Each result
# lives under $MEMGOV_CONFORMANCE_CACHE (default ~/.cache/memgov-conformance) in a folder named by
# the hash of everything it was built from, so an unchanged input is never rebuilt and a changed
# one never reuses a stale build.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
vendor=${MEMGOV_VENDOR_DIR:-$(cd "$repo/.." && pwd)/shared/vendor}
cache=${MEMGOV_CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memgov-conformance}

RELEASES="0.9 0.10"
PGVECTOR_TARBALL=pgvector-v0.8.6.tar.gz
PGVECTOR_SHA256=6fb777e18d7e95e1ecec85c7a5fbd1633d504278019a1da0fd09a6b294c74547

# release V: the pins of one supported kagent release (its Go sources, what /version reports, the
# build tag that picks our harness's per-release file, the major version of Google's Go ADK its
# runtime imports, and its Python runtime's requirements).
release() {
  case "$1" in
    0.9)
      KAGENT_TARBALL=kagent-v0.9.11-go.tar.gz
      KAGENT_SHA256=0d9d7b78be6081b8c407347da02f0378a80a3c4ed4a3b53833a26d3ce37a2887
      KAGENT_VERSION=v0.9.11 KAGENT_COMMIT=14dcbfc KAGENT_BUILD_DATE=2026-07-01 GO_TAGS= ADK_MODULE=google.golang.org/adk
      ;;
    0.10)
      KAGENT_TARBALL=kagent-v0.10.0-rc3-go.tar.gz
      KAGENT_SHA256=32b588cdfcbe23fe7bb4bbdab3a7e42769020be1e1d2e502a3ebf91d56cdba97
      KAGENT_VERSION=v0.10.0-rc3 KAGENT_COMMIT=7c52fff KAGENT_BUILD_DATE=2026-08-18 GO_TAGS=kagent_v0_10
      ADK_MODULE=google.golang.org/adk/v2
      ;;
    *) echo "unknown kagent release $1 (supported: $RELEASES)" >&2; exit 2 ;;
  esac
  CLIENT_REQUIREMENTS=$here/client-requirements-$1.txt
}

log() { echo "conformance: $*" >&2; }

sha() { sha256sum "$@" | awk '{print $1}'; }

# key PARTS... -> a short hash naming one cached build
key() { printf '%s\n' "$@" | sha256sum | cut -c1-16; }

checked_input() {
  local file="$vendor/$1" want=$2
  [ -f "$file" ] || { log "missing $file (set MEMGOV_VENDOR_DIR)"; exit 2; }
  [ "$(sha "$file")" = "$want" ] || { log "$file does not match its pinned sha256"; exit 2; }
  echo "$file"
}

# once OUT DONE STEP...: unless OUT/DONE exists, run STEP... WORK DEST under OUT's lock, with
# WORK a scratch folder and DEST a fresh folder that becomes OUT only when the step succeeded.
# Two test runs may start at once: the second waits for the lock and finds the result.
once() {
  local out=$1 done=$2
  shift 2
  [ -e "$out/$done" ] && return 0
  lock "$out"
  [ -e "$out/$done" ] && return 0
  work=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  "$@" "$work" "$out.tmp"  # set -e: a failing step stops here, the EXIT trap drops the scratch folder
  rm -rf "$out" && mv "$out.tmp" "$out"
  rm -rf "$work" && trap - EXIT
}

# lock OUT: one build of OUT at a time (another checkout building it is waited for); builds of
# different outputs run side by side.
lock() {
  mkdir -p "$cache"
  exec 9>"$1.lock"
  flock 9
}

# go_step NAME PACKAGE WORK DEST: our SOURCES (main.go, and the per-release files beside it) as the
# main package at PACKAGE inside kagent's module tree, built with kagent's own go.mod/go.sum. Our
# sources import Google's Go ADK as v0.9.11 does (google.golang.org/adk/...); v0.10 moved to its
# v2 module, with the same packages and the API our runtime driver uses, so the import path is
# the one thing rewritten.
# kagent's release builds link its agent runtime images' digests into the controller; v0.9.11's
# translator refuses every declarative Agent (POST /api/agents answers 400) without one. No image
# is ever pulled here, so a placeholder digest stands in for the one a release build links.
RUNTIME_DIGEST="-X github.com/kagent-dev/kagent/go/core/internal/controller/translator/agent.PythonADKImageDigest=sha256:$(printf '%064d' 0)"

go_step() {
  local name=$1 package=$2 work=$3 dest=$4 pkg=github.com/kagent-dev/kagent/go/core/internal/version
  log "building $name from kagent $KAGENT_VERSION with $(go env GOVERSION) (first build: minutes)"
  tar -xzf "$vendor/$KAGENT_TARBALL" -C "$work"
  mkdir -p "$work/go/$package"
  cp "${SOURCES[@]}" "$work/go/$package/"
  sed -i "s#\"google.golang.org/adk/#\"$ADK_MODULE/#" "$work/go/$package"/*.go
  (cd "$work/go" && go build -trimpath -tags "$GO_TAGS" -o "$dest/$name" \
    -ldflags "-X $pkg.Version=$KAGENT_VERSION -X $pkg.GitCommit=$KAGENT_COMMIT -X $pkg.BuildDate=$KAGENT_BUILD_DATE $RUNTIME_DIGEST" \
    "./$package")
}

# build_go NAME PACKAGE SOURCE...: print the path of the cached binary, building it first if needed.
build_go() {
  local name=$1 package=$2 out
  shift 2
  SOURCES=("$@")
  checked_input "$KAGENT_TARBALL" "$KAGENT_SHA256" >/dev/null
  command -v go >/dev/null || { log "go is required to build $name"; exit 2; }
  out="$cache/$name-$KAGENT_VERSION-$(key "$KAGENT_SHA256" "$(cat "${SOURCES[@]}" | sha256sum)" "$GO_TAGS" "$ADK_MODULE" "$RUNTIME_DIGEST" "$(go env GOVERSION)")"
  once "$out" "$name" go_step "$name" "$package"
  echo "$out/$name"
}

pg_bindir() {
  local initdb
  initdb=$(command -v initdb || ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1)
  [ -n "$initdb" ] || { log "no PostgreSQL server installed (run make pg)"; exit 2; }
  dirname "$initdb"
}

# pg_config of the installed server's major version. pgvector compiles against postgres.h, which only
# postgresql-server-dev-N ships (pgxs.mk and pg_config come with the client package): scripts/prereqs.sh
# detects it by that file and installs the headers pinned to the server's exact version.
ensure_pg_config() {
  local bindir=$1 major
  major=$("$bindir/postgres" --version | sed -E 's/.* ([0-9]+)\..*/\1/')
  "$repo/scripts/prereqs.sh" postgres.h >&2 || exit 2
  echo "/usr/lib/postgresql/$major/bin/pg_config"
}

# pgvector_step PG_CONFIG WORK DEST: pgvector built against that server, staged under DEST/stage.
pgvector_step() {
  local pg_config=$1 work=$2 dest=$3
  log "building pgvector 0.8.6 for $("$pg_config" --version)"
  tar -xzf "$vendor/$PGVECTOR_TARBALL" -C "$work"
  make -s -C "$work/pgvector-v0.8.6" PG_CONFIG="$pg_config" with_llvm=no >/dev/null
  make -s -C "$work/pgvector-v0.8.6" PG_CONFIG="$pg_config" with_llvm=no DESTDIR="$dest/stage" install >/dev/null
}

build_pgvector() {
  local bindir pg_config out libdir sharedir f target
  checked_input "$PGVECTOR_TARBALL" "$PGVECTOR_SHA256" >/dev/null
  bindir=$(pg_bindir)
  pg_config=$(ensure_pg_config "$bindir")
  out="$cache/pgvector-$(key "$PGVECTOR_SHA256" "$("$bindir/postgres" --version)")"
  once "$out" stage pgvector_step "$pg_config"
  # The server loads extensions only from its own folders: copy the staged files there when they differ.
  libdir=$("$pg_config" --pkglibdir)
  sharedir=$("$pg_config" --sharedir)/extension
  for f in "$out/stage$libdir/vector.so" "$out/stage$sharedir"/vector*; do
    case "$f" in */vector.so) target="$libdir/vector.so" ;; *) target="$sharedir/$(basename "$f")" ;; esac
    cmp -s "$f" "$target" || install -m 0644 "$f" "$target"
  done
  echo "$out"
}

build_client() {
  local python out adk
  python=${MEMGOV_CONFORMANCE_PYTHON:-python3}
  adk=$(sed -n 's/^kagent-adk==//p' "$CLIENT_REQUIREMENTS")
  out="$cache/client-$adk-$(key "$(sha "$CLIENT_REQUIREMENTS")" "$("$python" -c 'import sys; print(sys.version)')")"
  # A venv cannot move (its scripts name their folder), so it is built in place and marked done.
  if [ ! -f "$out/.done" ]; then
    lock "$out"
    if [ ! -f "$out/.done" ]; then
      log "installing kagent-adk $adk into $out (first install: a minute or two)"
      rm -rf "$out"
      "$python" -m venv "$out"
      "$out/bin/pip" install -q --upgrade pip
      "$out/bin/pip" install -q -r "$CLIENT_REQUIREMENTS"
      touch "$out/.done"
    fi
  fi
  echo "$out/bin/python"
}

build_server() { build_go memgov-conformance core/cmd/memgov-conformance "$here"/main.go "$here"/kagent_v0_*.go; }

build_runtime() { build_go memgov-runtime adk/cmd/memgov-runtime "$here/runtime/main.go"; }

build_release() {
  release "$1"
  build_server
  build_runtime
  build_client
  build_pgvector
}

part=${1:-all}
version=${2:-0.9}
case "$part" in
  server) release "$version"; build_server ;;
  client) release "$version"; build_client ;;
  runtime) release "$version"; build_runtime ;;
  pgvector) build_pgvector ;;
  release) build_release "$version" ;;
  all) for v in $RELEASES; do build_release "$v"; done ;;
  *) echo "usage: $0 [server [V]|client [V]|runtime [V]|pgvector|release V|all] (V: ${RELEASES// /, })" >&2; exit 2 ;;
esac
