#!/usr/bin/env bash
# Model forward+backward tokens/s: ours (bench_model) against HF transformers on PyTorch, same
# bins, same thread count, in one run. Usage:
#   tools/bench/model/run_model_bench.sh BUILD_DIR [THREADS] [STEPS]
# Prints one JSON line per (size, implementation). Needs PyPI torch + transformers for the
# reference side.
set -euo pipefail
build_dir=${1:?usage: run_model_bench.sh BUILD_DIR [THREADS] [STEPS]}
threads=${2:-1}
steps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
for size in tiny small; do
  "$build_dir/tools/bench/model/bench_model" --size "$size" --bin-tokens 2048 --steps "$steps" \
    --write-batch "$work/$size.batch.json" --write-config "$work/$size.config.json" | grep '^{'
  python3 "$here/bench_hf.py" --config "$work/$size.config.json" --batch "$work/$size.batch.json" \
    --threads "$threads" --steps "$steps" --size "$size"
done
