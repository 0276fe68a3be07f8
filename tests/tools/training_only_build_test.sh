#!/usr/bin/env bash
# A build by hand for training compiles only what training runs, through the shared ccache:
#
#   training_only_build_test.sh SOURCE_ROOT
#
# Configures the tree with -DDYNCP_TESTS=OFF (configure only) and checks that `all` holds the
# five dyncp-* tools and none of the tests, the emulated CUDA backend, dyncp-train-emulated or
# the benchmarks; and that, with ccache installed, every compile runs through it with paths
# hashed relative to the checkout (README.md, "Building by hand").
set -euo pipefail
root=$(cd "$1" && pwd)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
scratch=$(mktemp -d /tmp/dyncp_training_only.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if ! cmake -S "$root" -B "$scratch" "${generator[@]}" -DDYNCP_TESTS=OFF -DDYNCP_CUDA=OFF \
     >"$scratch.configure.log" 2>&1; then
  cat "$scratch.configure.log"
  exit 1
fi
rm -f "$scratch.configure.log"
if [[ ${#generator[@]} -eq 0 ]]; then
  echo "training_only_build_test needs ninja (apt-get install ninja-build)" >&2
  exit 1
fi
commands=$(ninja -C "$scratch" -t commands all)
compiles=$(grep -c -- ' -c ' <<<"$commands" || true)
for tool in dyncp-train dyncp-plan dyncp-data dyncp-check dyncp-export; do
  grep -q -- "-o apps/$tool/$tool " <<<"$commands" || fail "$tool is not built"
done
for unwanted in kernels/emulation tests/ tools/bench dyncp-train-emulated dyncp_ops_cuda_emulated; do
  if grep -q -- "$unwanted" <<<"$commands"; then fail "$unwanted is built by a training-only build"; fi
done
if command -v ccache >/dev/null 2>&1; then
  through=$(grep -- ' -c ' <<<"$commands" | grep -c -- "CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=1 .*ccache" || true)
  ((through == compiles)) || fail "$through of $compiles compiles go through ccache with CCACHE_BASEDIR"
fi
echo "training-only build: $compiles compile steps"
((failures == 0)) || { echo "$failures failure(s)"; exit 1; }
