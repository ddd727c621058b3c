#!/usr/bin/env bash
# Build memgov's image on a machine with no registry and no container runtime, from the same
# Containerfile, and write it as an OCI archive (the image smoke test unpacks and runs it).
#
# The two pinned bases cannot be pulled here, so stand-ins are built from Debian 12's package
# archive with mmdebstrap (both real bases are Debian 12 images):
#   build: Debian 12 minbase with python3, python3-venv, python3-pip and ca-certificates (as
#          debian:12-slim after the Containerfile's apt-get step), trusting the extra CA
#          certificates this machine trusts (/usr/local/share/ca-certificates): CI's egress
#          inspects TLS, so pip inside the build could not reach PyPI otherwise;
#   run:   Debian 12's python3.11 and the libraries it needs, unpacked without maintainer
#          scripts, so no shell; dpkg and tar, pulled in by dependencies, are removed as
#          distroless has neither.
# buildah runs the Containerfile's steps with chroot isolation, which needs no OCI runtime.
# usage: scripts/image-ci.sh OUT.tar   (root; stand-ins are cached in ~/.cache/memgov-image)
set -euo pipefail
out=$(realpath -m "$1")
cd "$(dirname "$0")/.."
cache=${MEMGOV_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memgov-image}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache" "$(dirname "$out")"

# stand_in NAME VARIANT PACKAGES HOOK_OPTION -> prints the local image name
stand_in() {
  local name=$1 variant=$2 packages=$3 hook=$4 key tar image ctr
  key=$(printf '%s|%s|%s|%s|bookworm' "$name" "$variant" "$packages" "$hook" | sha256sum | cut -c1-12)
  tar="$cache/$name-$key.tar"
  image="localhost/memgov-ci-$name:$key"
  if ! buildah inspect --type image "$image" >/dev/null 2>&1; then
    if [ ! -s "$tar" ]; then
      mmdebstrap --quiet --variant="$variant" --include="$packages" "$hook" \
        bookworm "$cache/$name-$key.partial.tar" "$mirror" >&2
      mv "$cache/$name-$key.partial.tar" "$tar"
    fi
    ctr=$(buildah from scratch)
    buildah add "$ctr" "$tar" / >/dev/null
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
    buildah commit --quiet "$ctr" "$image" >/dev/null
    buildah rm "$ctr" >/dev/null
  fi
  echo "$image"
}

local_cas=/usr/local/share/ca-certificates
build_base=$(stand_in build minbase python3,python3-venv,python3-pip,ca-certificates \
  "--customize-hook=for ca in $local_cas/*.crt; do [ -e \"\$ca\" ] && cp \"\$ca\" \"\$1$local_cas/\"; done; chroot \"\$1\" update-ca-certificates >/dev/null # $(cat $local_cas/*.crt 2>/dev/null | sha256sum | cut -c1-12)")
# The extract variant runs no customize hooks; the extract hook sees the unpacked files.
run_base=$(stand_in run extract python3.11-minimal,libpython3.11-stdlib \
  '--extract-hook=cd "$1" && rm -f bin/tar usr/bin/dpkg* usr/bin/update-alternatives usr/sbin/dpkg* usr/sbin/rmt-tar usr/sbin/tarcat sbin/start-stop-daemon')

buildah build --quiet --isolation chroot --network host --layers --pull=never \
  --build-arg "BUILD_BASE=$build_base" --build-arg "RUN_BASE=$run_base" \
  --tag localhost/memgov:ci --file Containerfile . >&2
# An unchanged build (every layer from the cache) is the image the archive already holds.
id=$(buildah images --quiet --no-trunc localhost/memgov:ci)
if [ ! -s "$out" ] || [ "$(cat "$out.id" 2>/dev/null)" != "$id" ]; then
  rm -f "$out" "$out.id"
  buildah push --quiet localhost/memgov:ci "oci-archive:$out:memgov:ci" >&2
  echo "$id" >"$out.id"
fi
echo "$out"
