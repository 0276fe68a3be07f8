#!/usr/bin/env bash
# Builds out/gpu-prefix.tar.xz: the host libraries the GPU check build (cmake/GpuTestsOnly.cmake:
# the trainer, tests/gpu, the GEMM anchor) needs on a machine that has CUDA but none of them and
# no package registry. Taken from Debian 12 packages (apt-get download + dpkg -x), trimmed to
# headers, shared libraries, CMake package files and Open MPI's components and help texts, in
# Debian's own layout (so the CMake files and library links relocate), then packed with xz so
# the prefix fits the working tree carried to the GPU machine. tools/gpu-check.sh unpacks it.
# Run it here, on the Debian machine.
#
#   tools/gpu-prefix.sh [OUT_TARBALL]     # default out/gpu-prefix.tar.xz; prints both sizes
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tarball=${1:-$root/out/gpu-prefix.tar.xz}
packages=(
  # logging and BLAS (the kernel tests' CPU references)
  libfmt9 libfmt-dev libspdlog1.10 libspdlog-dev libopenblas0-pthread libopenblas-pthread-dev
  libgfortran5 libquadmath0
  # the trainer's host libraries (cmake/Dependencies.cmake)
  libyaml-cpp0.7 libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libpcre2-8-0 libpcre2-dev
  libutf8proc2 libutf8proc-dev libxxhash0 libxxhash-dev
  # Open MPI (lib/dist bootstraps on it; one rank runs as a singleton over shared memory) and
  # what its libraries and the components a singleton loads link; the network transports
  # (libfabric, UCX, verbs, PSM) stay out, with their components
  libopenmpi3 libopenmpi-dev openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libmunge2 libnuma1 libudev1
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for package in "${packages[@]}"; do
  (cd "$work" && apt-get download "$package" >/dev/null 2>&1) \
    || { echo "gpu-prefix: apt-get download failed for $package" >&2; exit 1; }
done
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done

prefix=$work/gpu-prefix
lib=usr/lib/x86_64-linux-gnu
keep=(
  usr/include/fmt usr/include/spdlog usr/include/yaml-cpp usr/include/CLI usr/include/nlohmann
  usr/include/pcre2.h usr/include/utf8proc.h usr/include/xxhash.h
  usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h
  usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h
  $lib/cmake/fmt $lib/cmake/spdlog $lib/cmake/yaml-cpp usr/share/cmake/CLI11
  usr/share/cmake/nlohmann_json
  $lib/openmpi/include $lib/openmpi/lib $lib/pmix2 usr/share/openmpi
)
shopt -s nullglob
cd "$work/root"
# Shared libraries only: the static OpenBLAS archive alone is 58 MB.
for name in libfmt libspdlog libyaml-cpp libpcre2-8 libutf8proc libxxhash libgfortran libquadmath \
            libmpi libopen-rte libopen-pal libhwloc libevent_core libevent_pthreads libpmix \
            libmunge libnuma libudev; do
  found=($lib/$name.so* $lib/$name-*.so* lib/x86_64-linux-gnu/$name.so* usr/lib/$name.so*)
  [[ ${#found[@]} -gt 0 ]] || { echo "gpu-prefix: no $name in the packages" >&2; exit 1; }
  keep+=("${found[@]}")
done
keep+=($lib/openblas-pthread/libopenblas*.so*)
for path in "${keep[@]}"; do
  [[ -e "$path" || -L "$path" ]] || { echo "gpu-prefix: $path missing from the packages" >&2; exit 1; }
  target=${path#/}
  [[ $target == lib/* ]] && target=usr/$target  # a few packages still install to /lib
  mkdir -p "$prefix/$(dirname "$target")"
  cp -a "$path" "$prefix/$target"
done
# Not needed to build or run one rank: Fortran and Java bindings, static archives, and the
# components of network transports whose libraries are left out.
rm -rf "$prefix/$lib"/openmpi/lib/{libmpi_java*,libmpi_mpifh*,libmpi_usempi*,*.a,*.la} \
       "$prefix/$lib"/openmpi/include/*.mod "$prefix/$lib"/openmpi/lib/openmpi3/*.la
for transport in ofi ucx psm psm2 openib usnic uct verbs; do
  rm -f "$prefix/$lib"/openmpi/lib/openmpi3/mca_*_"$transport"*.so \
        "$prefix/$lib"/openmpi/lib/libmca_common_"$transport"*
done
# The dev link Debian points at /etc/alternatives: point it at the library instead.
ln -sfn libmpi.so.40 "$prefix/$lib/libmpi.so"
# cudnn-frontend's headers (cuDNN's fused attention), unpacked by install-deps.sh from the pinned
# wheel: the GPU machine has no registry.
frontend=$root/build/third_party/cudnn-frontend/include
[[ -f $frontend/cudnn_frontend.h ]] || "$root/tools/install-deps.sh"
if [[ -f $frontend/cudnn_frontend.h ]]; then
  cp -a "$frontend"/. "$prefix/usr/include/"
else
  echo "gpu-prefix: no cudnn-frontend headers: the GPU check builds without cuDNN" >&2
fi
mkdir -p "$(dirname "$tarball")"
tar -C "$work" -cJf "$tarball" gpu-prefix
echo "gpu-prefix: $(du -sh "$prefix" | cut -f1) unpacked, $(du -h "$tarball" | cut -f1) packed: $tarball"
