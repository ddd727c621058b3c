#!/usr/bin/env bash
# Build one Rust tool of this repository into the shared cache (once per content) and link it into .tools/bin.
# usage: scripts/rust-tool.sh NAME FOLDER
#   FOLDER holds the crate with its committed Cargo.lock; the binary is named by a hash of
#   Cargo.toml, Cargo.lock and src/, so an edit rebuilds it. The build directory is kept in the
#   cache too, so a rebuild after an edit is incremental.
set -euo pipefail
name=$1 folder=$2
. "$(dirname "$0")/tool-cache.sh"
hash=$(cd "$folder" && cat Cargo.toml Cargo.lock $(find src -type f | sort) | sha256sum | cut -c1-16)
bin="$cache/$name-$hash"
if tool_wanted "$bin" "$cache/$name.lock"; then
  command -v cargo >/dev/null || { echo "cargo is required to build $name (rustup.rs, or apt install cargo)" >&2; exit 1; }
  echo "building $name $hash (cached in $cache; a first build takes 5-10 minutes)"
  CARGO_TARGET_DIR="$cache/$name-target" cargo build --quiet --locked --release --manifest-path "$folder/Cargo.toml"
  cp "$cache/$name-target/release/$name" "$bin.tmp" && mv "$bin.tmp" "$bin"
fi
tool_link "$bin" "$name"
