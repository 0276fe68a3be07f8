#!/usr/bin/env bash
# Builds out/gpu-prefix/: the host libraries the GPU test build needs (spdlog, fmt, OpenBLAS
# and OpenBLAS's Fortran runtime), taken from Debian 12 packages (apt-get download + dpkg -x)
# and trimmed to headers, shared libraries and CMake package files. tools/gpu-check.sh builds
# against it on a machine that has CUDA but none of these (docs/cuda.md). Run it here, on the
# Debian machine; the prefix travels with the working tree (about 40 MiB, mostly OpenBLAS).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${1:-$root/out/gpu-prefix}
packages=(libfmt9 libfmt-dev libspdlog1.10 libspdlog-dev libopenblas0-pthread
          libopenblas-pthread-dev libgfortran5 libquadmath0)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${packages[@]}" >/dev/null 2>&1) \
  || { echo "gpu-prefix: apt-get download failed for: ${packages[*]}" >&2; exit 1; }
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done

rm -rf "$prefix"
# Debian's own layout under $prefix/usr, so the CMake package files (which locate themselves
# relative to their folder) and the library symlinks stay valid.
keep=(
  usr/include/fmt usr/include/spdlog
  usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h
  usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h
  usr/lib/x86_64-linux-gnu/cmake/fmt usr/lib/x86_64-linux-gnu/cmake/spdlog
)
shopt -s nullglob
cd "$work/root"
# Shared libraries only: the static OpenBLAS archive alone is 58 MB.
keep+=(usr/lib/x86_64-linux-gnu/libfmt.so* usr/lib/x86_64-linux-gnu/libspdlog.so*
       usr/lib/x86_64-linux-gnu/libgfortran.so.5* usr/lib/x86_64-linux-gnu/libquadmath.so.0*
       usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas*.so*)
for path in "${keep[@]}"; do
  [[ -e "$path" || -L "$path" ]] || { echo "gpu-prefix: $path missing from the packages" >&2; exit 1; }
  mkdir -p "$prefix/$(dirname "$path")"
  cp -a "$path" "$prefix/$path"
done
du -sh "$prefix"
