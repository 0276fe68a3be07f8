#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (from Debian: clang, libclang-rt-dev; installed by
# tools/install-deps.sh) into ${DYNCP_FUZZ_BUILD_DIR:-build-fuzz} and runs each for a bounded
# number of inputs over a scratch copy of its committed seed corpus (tests/fuzz/corpus/<name>).
# By default (CI, tools/test.sh) a run is reproducible: libFuzzer's random seed is fixed and
# each target runs a fixed number of inputs, so the same commit explores the same inputs and
# a red run is a finding that reruns the same way, never a new input met by chance.
#   DYNCP_FUZZ_RUNS      inputs per target (default: its line in tests/fuzz/ci_runs.txt, about
#                        10 s each); 0: no bound on inputs
#   DYNCP_FUZZ_SEED      libFuzzer -seed (default 1); 0: a fresh random seed every run
#   DYNCP_FUZZ_SECONDS   wall-time cap per target (default 30), a guard against a slow machine;
#                        a target stopped by it says so (it ran a prefix of the same inputs)
#   DYNCP_FUZZ_JOBS      targets fuzzed at once (default: DYNCP_BUILD_JOBS, else the cores)
# Open-ended fuzzing by hand (new inputs each run; docs/data.md, Fuzzing):
#   DYNCP_FUZZ_RUNS=0 DYNCP_FUZZ_SEED=0 DYNCP_FUZZ_SECONDS=600 tools/fuzz.sh
# Only the fuzz targets and the libraries they link are built (target dyncp_fuzzers).
# A crash, a leak, a timeout (> 10 s on one input) or an out-of-memory (> 2 GiB) fails the run;
# the input that caused it is kept under <build>/fuzz-findings/<name>/ and printed. Add it to
# the target's corpus as a regression input (fuzz_replay:<name> then replays it in every build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${DYNCP_FUZZ_BUILD_DIR:-$root/build-fuzz}
seed=${DYNCP_FUZZ_SEED:-1}
seconds=${DYNCP_FUZZ_SECONDS:-30}
# runs_for NAME: the inputs NAME runs (libFuzzer's -runs; -1 is no bound).
runs_for() {
  local runs=${DYNCP_FUZZ_RUNS:-}
  [[ -n $runs ]] || runs=$(awk -v name="$1" '$1 == name { print $2 }' "$root/tests/fuzz/ci_runs.txt")
  runs=${runs:-20000}
  ((runs > 0)) || runs=-1
  echo "$runs"
}
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

# A fixed seed alone does not fix the inputs: the comparisons libFuzzer learns from include
# addresses, which ASLR moves from run to run (two runs diverged within a few hundred inputs).
# With a fixed seed the targets run with address randomisation off (setarch -R, util-linux),
# and then two runs explore exactly the same inputs.
no_aslr=()
if [[ $seed != 0 ]] && setarch "$(uname -m)" -R true 2>/dev/null; then
  no_aslr=(setarch "$(uname -m)" -R)
fi

findings=$build_dir/fuzz-findings
rm -rf "$findings"
# fuzz_one NAME: runs one target; its exit status says whether it found anything.
fuzz_one() {
  local name=$1 binary=$build_dir/tests/fuzz/fuzz_$1 runs
  runs=$(runs_for "$1")
  local scratch=$build_dir/fuzz-corpus/$name log=$findings/$name.log
  rm -rf "$scratch"
  mkdir -p "$scratch" "$findings/$name"
  cp "$root/tests/fuzz/corpus/$name"/* "$scratch/"
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "${no_aslr[@]}" "$binary" -print_final_stats=1 -seed="$seed" -runs="$runs" \
    -max_total_time="$seconds" \
    -reload=0 -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$findings/$name/" "$scratch" >"$log" 2>&1
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
      executed=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}')
      runs=$(runs_for "$name")
      note=""
      ((runs < 0 || ${executed:-0} >= runs)) || note=" (stopped by the ${seconds} s cap first)"
      echo "fuzz: $name: $executed inputs (seed $seed), no finding$note"
    else
      echo "fuzz: $name: FAILED (seed $seed, runs $(runs_for "$name")); inputs in $findings/$name/, log $log"
      tail -30 "$log"
      status=1
    fi
  done
done
echo "fuzz: ${#names[@]} targets fuzzed in $((SECONDS - started)) s"
exit $status
