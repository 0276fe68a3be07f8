#!/usr/bin/env bash
# Configure and build into ${DYNCP_BUILD_DIR:-build}. Extra arguments go to cmake's configure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${DYNCP_BUILD_DIR:-$root/build}
# Let ccache reuse objects compiled from another checkout of the same sources (CI builds a
# fresh clone in a new folder): paths are hashed relative to the checkout.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
generator=()
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$build_dir/Makefile" ]]; then
  generator=(-G Ninja)
fi
cmake -S "$root" -B "$build_dir" "${generator[@]}" -DDYNCP_WERROR=ON "$@" >"$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log"; exit 1; }
grep -E '^-- dyncp:' "$build_dir.configure.log" || true
cmake --build "$build_dir" --parallel "${DYNCP_BUILD_JOBS:-$(nproc)}"
