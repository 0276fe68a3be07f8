#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (from Debian: clang, libclang-rt-dev; installed by
# tools/install-deps.sh) into ${DYNCP_FUZZ_BUILD_DIR:-build-fuzz} and runs each for a bounded
# time over a scratch copy of its committed seed corpus (tests/fuzz/corpus/<name>).
#   DYNCP_FUZZ_SECONDS   seconds per target (default 10)
#   DYNCP_FUZZ_JOBS      targets fuzzed at once (default: DYNCP_BUILD_JOBS, else the cores)
# Only the fuzz targets and the libraries they link are built (target dyncp_fuzzers).
# A crash, a leak, a timeout (> 10 s on one input) or an out-of-memory (> 2 GiB) fails the run;
# the input that caused it is kept under <build>/fuzz-findings/<name>/ and printed. Add it to
# the target's corpus as a regression input (fuzz_replay:<name> then replays it in every build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${DYNCP_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${DYNCP_FUZZ_SECONDS:-10}
jobs=${DYNCP_FUZZ_JOBS:-${DYNCP_BUILD_JOBS:-$(nproc)}}
command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (run tools/install-deps.sh)"; exit 1; }
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
generator=()
command -v ninja >/dev/null 2>&1 && [[ ! -f "$build_dir/Makefile" ]] && generator=(-G Ninja)
started=$SECONDS
CC=clang CXX=clang++ cmake -S "$root" -B "$build_dir" "${generator[@]}" -DDYNCP_FUZZ=ON \
  -DDYNCP_TESTS=ON -DDYNCP_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log"; exit 1; }
cmake --build "$build_dir" --target dyncp_fuzzers --parallel "${DYNCP_BUILD_JOBS:-$(nproc)}"
echo "fuzz: targets built in $((SECONDS - started)) s"

findings=$build_dir/fuzz-findings
rm -rf "$findings"
# fuzz_one NAME: runs one target; its exit status says whether it found anything.
fuzz_one() {
  local name=$1 binary=$build_dir/tests/fuzz/fuzz_$1
  local scratch=$build_dir/fuzz-corpus/$name log=$findings/$name.log
  rm -rf "$scratch"
  mkdir -p "$scratch" "$findings/$name"
  cp "$root/tests/fuzz/corpus/$name"/* "$scratch/"
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$binary" -print_final_stats=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$findings/$name/" "$scratch" >"$log" 2>&1
}
names=()
for binary in "$build_dir"/tests/fuzz/fuzz_*; do
  [[ -x $binary && $binary != *_replay ]] && names+=("${binary##*/fuzz_}")
done
((${#names[@]} > 0)) || { echo "fuzz: no fuzz targets were built"; exit 1; }
started=$SECONDS
status=0
for ((first = 0; first < ${#names[@]}; first += jobs)); do
  pids=()
  for name in "${names[@]:first:jobs}"; do
    fuzz_one "$name" &
    pids+=("$!")
  done
  for i in "${!pids[@]}"; do
    name=${names[first + i]}
    log=$findings/$name.log
    if wait "${pids[$i]}"; then
      echo "fuzz: $name: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}') runs in ${seconds} s, no finding"
    else
      echo "fuzz: $name: FAILED; inputs in $findings/$name/, log $log"
      tail -30 "$log"
      status=1
    fi
  done
done
echo "fuzz: ${#names[@]} targets fuzzed in $((SECONDS - started)) s"
exit $status
