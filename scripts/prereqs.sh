#!/usr/bin/env bash
# The system prerequisites of `make test`, each detected by the file that is actually used, and
# installed with apt when missing (root). One line per prerequisite: what it is, what was looked at,
# and whether it was there, installed, or is missing with what would install it.
#
#   scripts/prereqs.sh [--check] [NAME...]
#
# NAME is any of: python-venv cc make flock initdb postgres.h pg_dump go cargo etcd buildah mmdebstrap (default: all).
# --check only reports; it never installs, and exits 1 when anything is missing.
# `make demo` needs none of this: it runs on Python alone.
set -euo pipefail

check_only=0
if [ "${1:-}" = "--check" ]; then check_only=1; shift; fi
all=(python-venv cc make flock initdb postgres.h pg_dump go cargo etcd buildah mmdebstrap)
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${all[@]}")

missing=0
apt_updated=0
say() { echo "prereqs: $*" >&2; }

apt_install() {
  if [ "$apt_updated" = 0 ]; then
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    apt_updated=1
  fi
  # The headers package recommends nothing the build uses; buildah and mmdebstrap need theirs.
  local opts=()
  case "$1" in postgresql-server-dev-*) opts=(--no-install-recommends) ;; esac
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${opts[@]}" "$@" >/dev/null
}

# The PostgreSQL server the tests run: the newest installed major's bin folder.
pg_bindir() {
  local initdb
  initdb=$(command -v initdb 2>/dev/null || true)
  [ -n "$initdb" ] || initdb=$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$initdb" ] && dirname "$(readlink -f "$initdb")"
}

# need NAME WHAT PROBE PACKAGE...: PROBE is a shell test that holds when the prerequisite is there.
need() {
  local name=$1 what=$2 probe=$3
  shift 3
  if eval "$probe"; then
    say "ok       $name ($what)"
    return 0
  fi
  if [ "$check_only" = 1 ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "MISSING  $name ($what): install $* (apt, as root)"
    missing=1
    return 0
  fi
  say "missing  $name ($what): installing $*"
  if apt_install "$@" && eval "$probe"; then
    say "installed $name ($*)"
  else
    say "FAILED   $name: apt could not install $*, or it did not provide $what"
    missing=1
  fi
}

pg_major() { "$(pg_bindir)/postgres" --version | sed -E 's/.* ([0-9]+)\..*/\1/'; }

declare -A seen=()
check() {
  [ -z "${seen[$1]:-}" ] || return 0
  seen[$1]=1
  case $1 in
    python-venv)
      need python-venv "python3 -m venv with ensurepip" \
        'python3 -c "import ensurepip, venv" 2>/dev/null' "python3-venv" ;;
    cc)
      need cc "a C compiler, cc" 'command -v cc >/dev/null' gcc libc6-dev ;;
    make)
      need make "make" 'command -v make >/dev/null' make ;;
    flock)
      need flock "flock, for the build caches' locks" 'command -v flock >/dev/null' util-linux ;;
    initdb)
      need initdb "the PostgreSQL server's initdb" '[ -n "$(pg_bindir)" ]' postgresql ;;
    postgres.h)
      # Headers of the exact server version the tests run: pgvector is built against them.
      local major version
      check initdb
      [ -n "$(pg_bindir)" ] || return 0
      major=$(pg_major)
      version=$(dpkg-query -W -f='${Version}' "postgresql-$major" 2>/dev/null || true)
      need postgres.h "pg_config --includedir-server of PostgreSQL $major" \
        "[ -f \"\$(/usr/lib/postgresql/$major/bin/pg_config --includedir-server 2>/dev/null)/postgres.h\" ]" \
        "postgresql-server-dev-$major${version:+=$version}" ;;
    pg_dump)
      # The documented backup and restore (docs/deploy.md) run in the upgrade tests, with the server's major.
      check initdb
      [ -n "$(pg_bindir)" ] || return 0
      need pg_dump "pg_dump and pg_restore of PostgreSQL $(pg_major)" \
        '[ -x "$(pg_bindir)/pg_dump" ] && [ -x "$(pg_bindir)/pg_restore" ]' "postgresql-client-$(pg_major)" ;;
    go)
      # Go comes with the machine: Debian's golang is too old for the pinned tools.
      if command -v go >/dev/null; then
        say "ok       go ($(go env GOVERSION))"
      else
        say "MISSING  go: install Go 1.24 or newer from go.dev and put it on PATH"
        missing=1
      fi ;;
    etcd)
      # The store of the real kube-apiserver the chart tests start (tests/support/kube.py).
      need etcd "etcd, the store of the tests' kube-apiserver" 'command -v etcd >/dev/null' etcd-server ;;
    cargo)
      # Rust comes with the machine like Go: it builds tools/symcc/ (`memgov policy prove`).
      if command -v cargo >/dev/null; then
        say "ok       cargo ($(cargo --version))"
      else
        say "MISSING  cargo: install Rust 1.89 or newer from rustup.rs and put cargo on PATH"
        missing=1
      fi ;;
    buildah)
      need buildah "buildah, which builds the image from the Containerfile" 'command -v buildah >/dev/null' buildah ;;
    mmdebstrap)
      need mmdebstrap "mmdebstrap, which builds the image's stand-in bases" \
        'command -v mmdebstrap >/dev/null' mmdebstrap ;;
    *)
      say "unknown prerequisite $1 (known: ${all[*]})"
      exit 2 ;;
  esac
}

for name in "${wanted[@]}"; do check "$name"; done
exit "$missing"
