#!/usr/bin/env bash
# Tensor parallelism on the CPU trainer: the same mock data and global batches on RANKS ranks at
# tp 1 (data parallel only), tp 2 and tp 4, with and without sequence parallelism: median step
# time, tokens/s, the TP communication time, bytes moved per step and the parameters + optimizer
# and activation memory each rank measured. The tiny Qwen3-MoE of the smoke recipe with 4 K/V
# heads (tp 4 must divide them), no CP, no EP.
#   tools/bench/tp_step.sh BUILD_DIR [RANKS] [STEPS]      e.g. tools/bench/tp_step.sh build 4 20
set -euo pipefail
build=${1:?build dir}; ranks=${2:-4}; steps=${3:-20}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
common=(--config "$root/configs/smoke/tiny_mock.yaml" train.train_iters="$steps"
        train.global_batch_size=32 model.num_key_value_heads=4 model.context_parallel_size=1
        model.dynamic_context_parallel=false model.sequence_packing_scheduler=dp_balanced
        model.max_seqlen_per_dp_cp_rank=256 model.expert_model_parallel_size=1
        model.expert_tensor_parallel_size=1 checkpoint.save= logger.log_interval=1000)
run() {  # run NAME TP SP
  mpirun -np "$ranks" "$build/apps/dyncp-train/dyncp-train" "${common[@]}" \
    model.tensor_model_parallel_size="$2" model.sequence_parallel="$3" \
    logger.metrics_path="$work/$1.jsonl" </dev/null >"$work/$1.log" 2>&1 \
    || { cat "$work/$1.log"; exit 1; }
}
run tp1 1 false
run tp2 2 false
run tp2_sp 2 true
if (( ranks % 4 == 0 )); then
  run tp4 4 false
  run tp4_sp 4 true
fi
python3 - "$work" "$ranks" <<'PY'
import json, os, re, statistics, sys
work, ranks = sys.argv[1], sys.argv[2]
names = [n for n in ("tp1", "tp2", "tp2_sp", "tp4", "tp4_sp") if os.path.exists(f"{work}/{n}.jsonl")]
def summary(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl")][2:]  # skip warm-up steps
    log = open(f"{work}/{name}.log").read()
    memory = re.search(r"memory: measured ([\d.]+) MiB \(parameters, gradients, optimizer "
                       r"([\d.]+) MiB \+ activation arenas high-water ([\d.]+) MiB\)", log)
    return {"step_ms": statistics.median(r["elapsed_ms"] for r in rows),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
            "tp_comm_ms": statistics.median(r["time_ms"]["tp_comm"] for r in rows),
            "comm_mib": statistics.median(r["comm_bytes"] for r in rows) / 2**20,
            "state_mib": float(memory.group(2)), "activations_mib": float(memory.group(3)),
            "losses": [r["loss"] for r in rows]}
runs = {n: summary(n) for n in names}
base = runs["tp1"]
for n in names:
    r = runs[n]
    worst = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], base["losses"]))
    print(f"{n:7s} step {r['step_ms']:8.1f} ms ({r['step_ms'] / base['step_ms']:.2f}x)  "
          f"tokens/s {r['tokens_per_s']:8.0f}  tp comm {r['tp_comm_ms']:7.1f} ms  "
          f"sent {r['comm_mib']:6.2f} MiB/step  state {r['state_mib']:5.2f} MiB  "
          f"activations {r['activations_mib']:5.2f} MiB  loss vs tp1 {worst:.1e}")
PY
