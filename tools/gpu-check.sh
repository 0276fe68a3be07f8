#!/usr/bin/env bash
# One command for a GPU machine: builds the CUDA kernels and tests/gpu (DYNCP_GPU_TESTS_ONLY,
# no yaml-cpp / CLI11 / MPI / Catch2 needed) and runs them: every kernel against its CPU op,
# and NcclComm on one rank. Host libraries come from out/gpu-prefix (tools/gpu-prefix.sh,
# made on a Debian machine and carried along). Exit 0 only when every GPU test passed.
#
#   tools/gpu-check.sh                 # build into build-gpu-check/ and run
#   DYNCP_GPU_CHECK_ALLOW_SKIP=1 ...   # on a machine without a GPU: build, accept "skipped"
#   DYNCP_GPU_CHECK_SANITIZE=1 ...     # then also run the tests under compute-sanitizer
# Logs go to $OUT/gpu-check.log too when OUT is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=${DYNCP_GPU_PREFIX:-$root/out/gpu-prefix}
build_dir=${DYNCP_GPU_BUILD_DIR:-$root/build-gpu-check}
log=${OUT:+$OUT/gpu-check.log}
log=${log:-$build_dir/gpu-check.log}
mkdir -p "$build_dir" "$(dirname "$log")"
exec > >(tee "$log") 2>&1
start=$(date +%s)
phase() { echo "== $1 ($(($(date +%s) - start)) s)"; }

if [[ ! -d "$prefix/usr/include/spdlog" ]]; then
  echo "gpu-check: no host-library prefix at $prefix: run tools/gpu-prefix.sh on a Debian 12" \
       "machine and bring out/gpu-prefix along (or set DYNCP_GPU_PREFIX)" >&2
  exit 2
fi
nvcc=$(command -v nvcc || true)
[[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
[[ -n "$nvcc" ]] || { echo "gpu-check: nvcc not found (PATH or /usr/local/cuda/bin)" >&2; exit 2; }

# NCCL: the toolkit's, the system's, or the one inside Python's nvidia-nccl wheel.
nccl_home=${NCCL_HOME:-}
if [[ -z "$nccl_home" ]]; then
  for dir in "$(dirname "$(dirname "$nvcc")")" /usr /usr/local; do
    if [[ -f "$dir/include/nccl.h" ]]; then nccl_home=$dir; break; fi
  done
fi
if [[ -z "$nccl_home" ]] && command -v python3 >/dev/null; then
  nccl_home=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
fi
[[ -n "$nccl_home" ]] || { echo "gpu-check: nccl.h not found; set NCCL_HOME" >&2; exit 2; }
export NCCL_HOME=$nccl_home

# cuBLAS(Lt): normally in the toolkit; otherwise Python's nvidia-cublas wheel, which ships only
# versioned libraries, so link names are made for it in the build folder.
cuda_root=$(dirname "$(dirname "$nvcc")")
extra_flags=() shim=$build_dir/shim
if [[ ! -f "$cuda_root/include/cublasLt.h" ]] && command -v python3 >/dev/null; then
  cublas_home=$(python3 -c 'import nvidia.cublas as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  if [[ -n "$cublas_home" && -f "$cublas_home/include/cublasLt.h" ]]; then
    mkdir -p "$shim"
    for lib in "$cublas_home"/lib/libcublas*.so.* "$NCCL_HOME"/lib/libnccl.so.*; do
      if [[ -e "$lib" ]]; then ln -sfn "$lib" "$shim/$(basename "${lib%%.so.*}").so"; fi
    done
    extra_flags=(-DCMAKE_CXX_FLAGS="-I$cublas_home/include" -DCMAKE_CUDA_FLAGS="-I$cublas_home/include"
                 -DCMAKE_LIBRARY_PATH="$shim;$NCCL_HOME/lib")
    export LD_LIBRARY_PATH=$cublas_home/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "cuBLAS from $cublas_home"
  fi
fi

phase "environment"
"$nvcc" --version | tail -2
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
cmake --version | head -1
echo "NCCL_HOME=$NCCL_HOME prefix=$prefix"

phase "configure"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DDYNCP_GPU_TESTS_ONLY=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_LIBRARY_PATH="$NCCL_HOME/lib" "${extra_flags[@]}" | grep -E '^-- dyncp|Error' || true
[[ -f "$build_dir/CMakeCache.txt" && -f "$build_dir/tests/gpu/CTestTestfile.cmake" ]] \
  || { echo "gpu-check: configure failed" >&2; exit 1; }

phase "build"
cmake --build "$build_dir" --parallel "$(nproc)"

phase "run tests/gpu"
multiarch=$prefix/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$multiarch:$multiarch/openblas-pthread:$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-8}
set +e
"$build_dir/tests/gpu/dyncp_gpu_tests"
rc=$?
set -e
# Optional: the memory and shared-memory race checkers over the tests, also after a failure
# (they locate a bad access that a wrong number only hints at; slow; Firecracker
# machines support them, gVisor ones do not).
if [[ "${DYNCP_GPU_CHECK_SANITIZE:-0}" == 1 && $rc -ne 77 ]]; then
  sanitizer=$(command -v compute-sanitizer || echo "$cuda_root/bin/compute-sanitizer")
  # memcheck over every test; racecheck (much slower) over the shared-memory-heavy attention.
  for run in "memcheck:" "racecheck:attention"; do
    tool=${run%%:*} filter=${run#*:}
    phase "compute-sanitizer --tool $tool ${filter:-(all tests)}"
    if ! timeout 300 "$sanitizer" --tool "$tool" --error-exitcode 9 \
        "$build_dir/tests/gpu/dyncp_gpu_tests" $filter >"$build_dir/sanitizer-$tool.log" 2>&1; then
      tail -40 "$build_dir/sanitizer-$tool.log"
      echo "gpu-check: compute-sanitizer $tool reported errors" && rc=1
    else
      tail -2 "$build_dir/sanitizer-$tool.log"
    fi
  done
fi
phase "done"
if [[ $rc -eq 77 ]]; then
  echo "gpu-check: no GPU visible, tests skipped"
  [[ "${DYNCP_GPU_CHECK_ALLOW_SKIP:-0}" == 1 ]] && exit 0
  exit 3
fi
echo "gpu-check: $([[ $rc -eq 0 ]] && echo passed || echo FAILED)"
exit $rc
