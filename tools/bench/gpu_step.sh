#!/usr/bin/env bash
# The GPU step benchmark with its same-run anchors (docs/benchmarks/gpu.md):
#   1. dyncp: Qwen3-30B-A3B-shaped layers (hidden 2048, 32/4 heads of 128, 128 experts top-8,
#      expert FFN 768; depth reduced) forward + backward on bins of 4,096 tokens drawn from
#      mock_varlen: tokens/s, model TFLOP/s (Megatron's formula) and the phase breakdown;
#   2. the bf16 GEMM rate at the layer's projection and expert shapes (tools/bench/gpu/gemm_anchor.py);
#   3. HF transformers' Qwen3MoeForCausalLM with the same shape and depth on the same first bin,
#      eager PyTorch, bf16 (tools/bench/model/bench_hf.py).
# Prints one JSON line per measurement, then a summary with the ratios.
#
#   tools/bench/gpu_step.sh BUILD_DIR [LAYERS] [STEPS]
#   DEVICE=cpu tools/bench/gpu_step.sh BUILD_DIR   # shrunken shapes on the CPU: checks the script
set -euo pipefail
build_dir=${1:?usage: gpu_step.sh BUILD_DIR [LAYERS] [STEPS]}
layers=${2:-4}
steps=${3:-5}
device=${DEVICE:-cuda}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

lengths="lognormal:mean=1024,sigma=1.0,min=64,max=4096"
bin_tokens=4096
bins=4
shape=(--size qwen3-30b-a3b --layers "$layers")
gemm=()
dtype=bf16
if [[ $device == cpu ]]; then  # shapes small enough for a 2-core check of the script
  lengths="lognormal:mean=128,sigma=1.0,min=16,max=512"
  bin_tokens=512
  bins=2
  shape=(--size tiny --layers "$layers")
  gemm=(--tokens 512 --hidden 64 --q-heads 4 --kv-heads 2 --head-dim 16 --experts 8 --top-k 2
        --expert-ffn 48 --repeats 3)
  dtype=fp32
fi

results="$work/results.jsonl"
set +e
"$build_dir/tools/bench/model/bench_model" "${shape[@]}" --device "$device" \
  --bin-tokens "$bin_tokens" --bins "$bins" --mock-varlen "$lengths" --steps "$steps" \
  --write-batch "$work/batch.json" --write-config "$work/config.json" | grep '^{' >>"$results"
dyncp_status=${PIPESTATUS[0]}
set -e
if [[ $dyncp_status -ne 0 ]]; then  # bench_model wrote the bins and config before failing
  echo "gpu_step: the dyncp side did not run on $device (exit $dyncp_status); anchors only" >&2
fi
python3 "$here/gpu/gemm_anchor.py" --device "$device" "${gemm[@]}" >>"$results"
python3 "$here/model/bench_hf.py" --config "$work/config.json" --batch "$work/batch.json" \
  --device "$device" --dtype "$dtype" --steps "$steps" --size "${shape[1]}" >>"$results"
cat "$results"
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
ours = next((r for r in rows if r["impl"] == "dyncp"), None)
hf = next(r for r in rows if r["impl"] == "hf-transformers")
gemms = {r["name"]: r["tflops"] for r in rows if r["impl"] == "gemm-anchor"}
print("summary:")
print(f"  HF transformers: {hf['tokens_per_s']:.0f} tokens/s")
print("  GEMM anchor TFLOP/s: " + ", ".join(f"{k} {v:.1f}" for k, v in gemms.items()))
if ours:
    print(f"  dyncp: {ours['tokens_per_s']:.0f} tokens/s = {ours['tokens_per_s'] / hf['tokens_per_s']:.2f}x HF;"
          f" {ours['model_tflops']:.1f} model TFLOP/s; phases (s/step): attention "
          f"{ours['attention_s']:.3f}, experts {ours['experts_s']:.3f}, other {ours['other_s']:.3f}")
else:
    print("  dyncp: not measured on this device")
PY
