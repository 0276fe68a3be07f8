#!/usr/bin/env bash
# Configure and build into ${DYNCP_BUILD_DIR:-build}. Extra arguments go to cmake's configure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${DYNCP_BUILD_DIR:-$root/build}
# ccache (when installed) hashes paths relative to the checkout, set up by CMakeLists.txt, so a
# fresh clone in a new folder (CI) reuses the objects of another checkout.
generator=()
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$build_dir/Makefile" ]]; then
  generator=(-G Ninja)
fi
cmake -S "$root" -B "$build_dir" "${generator[@]}" -DDYNCP_WERROR=ON "$@" >"$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log"; exit 1; }
grep -E '^-- dyncp:' "$build_dir.configure.log" || true
cmake --build "$build_dir" --parallel "${DYNCP_BUILD_JOBS:-$(nproc)}"
