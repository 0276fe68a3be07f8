#!/usr/bin/env bash
# The README's first command: install what is missing, build (CPU), make the demo data, and
# train a tiny Qwen3-MoE on 4 ranks with dynamic context parallelism and expert parallelism.
# Prints where the metrics, the loss plot, the checkpoints and the HF export are.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/tools/install-deps.sh"
build_dir=${DYNCP_BUILD_DIR:-$root/build}
DYNCP_BUILD_DIR=$build_dir "$root/tools/build.sh" -DDYNCP_TESTS=OFF

out=runs/demo
rm -rf "$out"
python3 tools/make_demo_data.py --out "$out"
# Held-out samples of the same tasks (another seed; the training tokenizer is used for them).
python3 tools/make_demo_data.py --out "$out/heldout" --seed 2 --num-samples 400

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
mpirun -np 4 "$build_dir/apps/dyncp-train/dyncp-train" --config configs/demo/tiny_moe.yaml "$@"

# The plot needs matplotlib: the system's, else the tools' own venv (PyPI, made once).
plot_python=python3
if ! python3 -c "import matplotlib" 2>/dev/null; then
  "$root/tools/python-test-env.sh" "$build_dir/python-env" && plot_python=$build_dir/python-env/bin/python
fi
"$plot_python" tools/plot_metrics.py "$out/metrics.jsonl" --out "$out/metrics.png" || true
python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
first = sum(r["loss"] for r in rows[:5]) / 5
last = sum(r["loss"] for r in rows[-5:]) / 5
print(f"demo: loss {first:.3f} over the first 5 steps -> {last:.3f} over the last 5 "
      f"({len(rows)} steps, each on samples the model had not seen)")
PY
echo "demo: metrics     $root/$out/metrics.jsonl"
[[ -f "$out/metrics.png" ]] && echo "demo: plot        $root/$out/metrics.png"
echo "demo: checkpoints $root/$out/checkpoints (latest: $(cat "$out/checkpoints/latest"))"
echo "demo: HF export   $root/$out/hf"
