# Sourced by the scripts that build a pinned tool once into the shared cache and link it into .tools/bin.
# After sourcing: $cache is the cache folder; `tool_wanted BIN LOCK` is true when BIN must still be
# built, and then holds LOCK (two checkouts building the same tool: the second waits for the first
# and finds its result); `tool_link BIN NAME` links it.
cache=${MEMGOV_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memgov-tools}
mkdir -p "$cache" .tools/bin

tool_wanted() {
  [ -x "$1" ] && return 1
  exec 9>"$2"
  flock 9
  [ ! -x "$1" ]
}

tool_link() {
  ln -sf "$1" ".tools/bin/$2"
}
