#!/usr/bin/env bash
# The GPU step benchmark with its same-run anchors (docs/benchmarks/gpu.md), phase 5 of
# tools/gpu-check.sh. For each bin size (4,096 and 32,768 tokens):
#   1. dyncp: the trainer itself, one rank, `dist.device: cuda`, `mixed_precision: bf16_mixed`,
#      Qwen3-30B-A3B-shaped layers (hidden 2048, 32/4 heads of 128, 128 experts top-8, expert
#      FFN 768, vocabulary 151,936; LAYERS layers), mock_varlen samples packed into bins of that
#      size: tokens/s and model TFLOP/s by Megatron's formula (the metrics' tokens_per_s and
#      tflops_per_device, median over the steps after the first), peak GPU memory (nvidia-smi,
#      above the idle baseline) against the `--dry-run` estimate of the same command;
#   2. GEMM anchor: bench_gemm (kernels/gemm.hpp's cuBLASLt, bf16 x bf16 -> fp32) at the
#      layer's shapes for that many tokens; the FLOP-weighted rate over the shapes is the ceiling;
#   3. HF anchor: transformers' Qwen3MoeForCausalLM of the same shape and depth on the same GPU,
#      eager bf16, on the first bin's sequences (tools/bench/model/bench_hf.py), when torch and
#      transformers import; otherwise a line says it was skipped.
# Step 1 runs once per attention backend of DYNCP_BENCH_ATTENTION_BACKENDS (default "fused
# flash": cuDNN's fused attention and our own kernel, model.attention_backend); a backend the
# trainer refuses at start-up (exit 2: no cuDNN, shapes cuDNN rejects) is reported with its
# reason, not counted as a failure.
# Then the targets, each met / NOT met / not measured: dyncp >= 2x HF's tokens/s, model TFLOP/s
# >= 40% of the GEMM anchor's rate, peak memory within 10% of the estimate. Exit 0 when every
# measurement ran (targets are reported, not enforced); 1 when a run failed.
# DYNCP_BENCH_KEEP=DIR: keep results.jsonl and the dry runs (dry-run-<bin>.txt) in DIR.
#
#   tools/bench/gpu_step.sh BUILD_DIR [LAYERS] [STEPS]       # GPU-check build (default 4 layers, 4 steps)
#   DYNCP_BENCH_EMULATE=1 tools/bench/gpu_step.sh build      # tiny shapes, emulated backend:
#       the same plumbing on a machine without a GPU (the numbers mean nothing)
set -euo pipefail
build_dir=${1:?usage: gpu_step.sh BUILD_DIR [LAYERS] [STEPS]}
layers=${2:-4}
steps=${3:-4}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-gpu-step.XXXXXX")
sampler_pid=
trap '[[ -n $sampler_pid ]] && kill "$sampler_pid" 2>/dev/null; rm -rf "$work"' EXIT

if [[ ${DYNCP_BENCH_EMULATE:-0} == 1 ]]; then
  train=$build_dir/apps/dyncp-train/dyncp-train-emulated
  gemm=$build_dir/tools/bench/gpu/bench_gemm_emulated
  bins=(64 128)
  layers=${2:-2}
  steps=${3:-3}
  # The tiny recipe's own widths (head_dim 16: the bf16 attention kernel's sizes).
  shape=(model.num_hidden_layers="$layers" model.head_dim=16)
  gemm_shape=(--hidden 64 --q-heads 4 --kv-heads 2 --head-dim 16 --experts 8 --top-k 2
              --expert-ffn 48 --vocab 512 --repeats 2)
  mean=48
else
  train=$build_dir/apps/dyncp-train/dyncp-train
  gemm=$build_dir/tools/bench/gpu/bench_gemm
  bins=(4096 32768)
  shape=(model.vocab_size=151936 model.hidden_size=2048 model.intermediate_size=6144
         model.num_hidden_layers="$layers" model.num_attention_heads=32 model.num_key_value_heads=4
         model.head_dim=128 model.num_experts=128 model.num_experts_per_tok=8
         model.moe_intermediate_size=768 model.rope_theta=1000000.0
         model.max_position_embeddings=40960)
  gemm_shape=(--repeats 10)
  mean=1024
fi
for binary in "$train" "$gemm"; do
  [[ -x $binary ]] || { echo "gpu_step: $binary is not built" >&2; exit 1; }
done
have_smi=0
command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1 && have_smi=1
have_hf=0
python3 -c 'import torch, transformers' 2>/dev/null && have_hf=1

results=$work/results.jsonl
failed=0
for bin in "${bins[@]}"; do
  # One rank, no CP or EP; samples of mean `mean` tokens packed into bins of `bin` tokens, about
  # four bins per step.
  recipe=(--config "$root/configs/smoke/tiny_mock.yaml" "${shape[@]}"
          model.context_parallel_size=1 model.expert_model_parallel_size=1
          model.dynamic_context_parallel=false model.seq_length="$bin"
          model.max_seqlen_per_dp_cp_rank="$bin" model.moe_router_load_balancing_type=none
          dataset.mock_length_distribution="lognormal(min=16,max=$bin,mean=$mean,sigma=1.0)"
          dataset.mock_num_samples=4096 train.global_batch_size=$((4 * bin / mean))
          train.train_iters="$steps" dist.device=cuda mixed_precision=bf16_mixed
          logger.log_interval=1)
  "$train" "${recipe[@]}" --dry-run >"$work/dry-run-$bin.txt" 2>&1 \
    || { cat "$work/dry-run-$bin.txt"; echo "gpu_step: the dry run failed" >&2; exit 1; }
  estimate_mib=$(awk '$1 == "total" {print $2; exit}' "$work/dry-run-$bin.txt")
  baseline_mib=0
  if [[ $have_smi == 1 ]]; then
    baseline_mib=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    (while true; do
       nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1
       sleep 0.2
     done) >"$work/memory-$bin.txt" &
    sampler_pid=$!
  fi
  for backend in ${DYNCP_BENCH_ATTENTION_BACKENDS:-fused flash}; do
  run=$bin-$backend
  rc=0
  OPENBLAS_NUM_THREADS=8 "$train" "${recipe[@]}" model.attention_backend="$backend" \
    logger.metrics_path="$work/metrics-$run.jsonl" >"$work/train-$run.log" 2>&1 || rc=$?
  if [[ $rc == 2 ]]; then
    reason=$(grep -m1 "model.attention_backend" "$work/train-$run.log" || echo "exit 2")
    echo "gpu_step: attention_backend=$backend refused at $bin-token bins: $reason"
    python3 -c 'import json, sys; print(json.dumps({"impl": "dyncp", "bin_tokens": int(sys.argv[1]), "attention_backend": sys.argv[2], "refused": sys.argv[3]}))' \
      "$bin" "$backend" "$reason" >>"$results"
    continue
  elif [[ $rc != 0 ]]; then
    tail -30 "$work/train-$run.log"
    echo "gpu_step: dyncp-train failed at $bin-token bins (attention_backend=$backend)" >&2
    failed=1
    continue
  fi
  peak_mib=
  [[ $have_smi == 1 ]] && peak_mib=$(sort -n "$work/memory-$bin.txt" | tail -1)
  python3 - "$work/metrics-$run.jsonl" "$work/train-$run.log" "$bin" "$estimate_mib" \
    "${peak_mib:-}" "$baseline_mib" "$backend" >>"$results" <<'PY' || failed=1
import json, re, statistics, sys
metrics, log, bin_tokens, estimate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
peak, baseline, backend = sys.argv[5], float(sys.argv[6]), sys.argv[7]
rows = [json.loads(line) for line in open(metrics)]
timed = rows[1:] or rows  # the first step pays the arenas, cuBLASLt's heuristics, cuDNN's plans
measured = re.search(r"memory: measured ([0-9.]+) MiB", open(log).read())
chosen = re.search(r"attention: (.*)", open(log).read())
print(json.dumps({
    "impl": "dyncp", "bin_tokens": bin_tokens, "steps": len(timed),
    "attention_backend": backend, "attention": chosen.group(1) if chosen else None,
    "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
    "model_tflops": statistics.median(r["tflops_per_device"] for r in timed),
    "step_ms": statistics.median(r["elapsed_ms"] for r in timed),
    # Per phase (compute, cp_comm, ep_comm, grad_sync, optimizer, ...): the measured side of
    # the modelled step's table (tools/bench/step_model_vs_measured.py).
    "time_ms": {key: statistics.median(r["time_ms"][key] for r in timed)
                for key in timed[0]["time_ms"]},
    "microbatches": statistics.median(r["microbatches"] for r in timed),
    "real_tokens_per_step": statistics.median(r["real_tokens"] for r in timed),
    "estimate_mib": estimate,
    # nvidia-smi's peak above the idle baseline (CUDA context and library handles included);
    # without nvidia-smi (emulation), the trainer's own count of its buffers.
    "peak_mib": float(peak) - baseline if peak else None,
    "trainer_measured_mib": float(measured.group(1)) if measured else None}))
PY
  done
  if [[ -n $sampler_pid ]]; then
    kill "$sampler_pid" 2>/dev/null || true
    wait "$sampler_pid" 2>/dev/null || true
    sampler_pid=
  fi
  "$gemm" --tokens "$bin" "${gemm_shape[@]}" | sed "s/^{/{\"bin_tokens\": $bin, /" >>"$results" \
    || { echo "gpu_step: bench_gemm failed" >&2; failed=1; }
  if [[ $have_hf == 1 ]]; then
    # The HF side needs the shape as config.json and a bin of token ids: the first bin that
    # bench_model draws from the same mock_varlen law.
    "$build_dir/tools/bench/model/bench_model" --size qwen3-30b-a3b --layers "$layers" \
      --bin-tokens "$bin" --mock-varlen "lognormal(min=16,max=$bin,mean=$mean,sigma=1.0)" \
      --write-batch "$work/batch-$bin.json" --write-config "$work/config-$bin.json" --write-only
    python3 "$root/tools/bench/model/bench_hf.py" --config "$work/config-$bin.json" \
      --batch "$work/batch-$bin.json" --device cuda --dtype bf16 --steps 3 --size qwen3-30b-a3b \
      | sed "s/^{/{\"bin_tokens_requested\": $bin, /" >>"$results" \
      || { echo "gpu_step: the HF anchor failed" >&2; failed=1; }
  fi
done
[[ $have_hf == 1 ]] || echo "gpu_step: HF anchor skipped: python3 cannot import torch and transformers here"
cat "$results"
# DYNCP_BENCH_KEEP=DIR keeps the results and each bin's dry run (with its modelled step table)
# for tools/bench/step_model_vs_measured.py (tools/gpu-check.sh's phase 6).
if [[ -n ${DYNCP_BENCH_KEEP:-} ]]; then
  mkdir -p "$DYNCP_BENCH_KEEP"
  cp "$results" "$work"/dry-run-*.txt "$DYNCP_BENCH_KEEP/"
fi
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def verdict(value, target, higher=True):
    if value is None:
        return "not measured"
    return "met" if (value >= target if higher else value <= target) else "NOT met"
print("targets:")
for ours in (r for r in rows if r["impl"] == "dyncp"):
    t = ours["bin_tokens"]
    if "refused" in ours:
        print(f"  {t}-token bins, attention_backend={ours['attention_backend']}: refused: {ours['refused']}")
        continue
    gemm = next((r for r in rows if r["impl"] == "gemm-anchor" and r.get("bin_tokens") == t
                 and r["name"] == "all_shapes"), None)
    hf = next((r for r in rows if r["impl"] == "hf-transformers"
               and r.get("bin_tokens_requested") == t), None)
    print(f"  {t}-token bins, attention_backend={ours['attention_backend']} ({ours['attention']}): "
          f"dyncp {ours['tokens_per_s']:.0f} tokens/s, "
          f"{ours['model_tflops']:.2f} model TFLOP/s, {ours['step_ms']:.1f} ms/step")
    speedup = ours["tokens_per_s"] / hf["tokens_per_s"] if hf else None
    print(f"    >= 2x HF transformers eager: " + (f"{speedup:.2f}x ({hf['tokens_per_s']:.0f} tokens/s): "
          if hf else "HF anchor not run: ") + verdict(speedup, 2.0))
    share = ours["model_tflops"] / gemm["tflops"] if gemm else None
    print(f"    >= 40% of the GEMM rate: " + (f"{100 * share:.1f}% of {gemm['tflops']:.2f} TFLOP/s: "
          if gemm else "no GEMM anchor: ") + verdict(share, 0.40))
    peak = ours["peak_mib"]
    what = "nvidia-smi peak"
    if peak is None and ours["trainer_measured_mib"] is not None:
        peak, what = ours["trainer_measured_mib"], "the trainer's own buffers (no nvidia-smi)"
    error = abs(peak - ours["estimate_mib"]) / ours["estimate_mib"] if peak is not None else None
    print(f"    peak memory within 10% of the --dry-run estimate: " +
          (f"{what} {peak:.0f} MiB vs {ours['estimate_mib']:.0f} MiB ({100 * error:.1f}% off): "
           if error is not None else "") + verdict(error, 0.10, higher=False))
PY
exit $failed
