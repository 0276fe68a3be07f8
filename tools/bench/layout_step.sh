#!/usr/bin/env bash
# Static versus dynamic CP on the same mock data, same global batches, same ranks:
# median CPU step time, tokens/s, padded tokens and bytes moved per step (counted in the Comm
# layer). Dynamic CP runs twice: padding each sequence for its group (packing.alignment
# per_group, the default) and with Megatron's pool rule (2 x dp x cp for every sequence).
#   tools/bench/layout_step.sh BUILD_DIR RANKS CP CAP [STEPS] [MOCK_LENGTH_DISTRIBUTION]
# e.g. tools/bench/layout_step.sh build 4 2 128 20 ; tools/bench/layout_step.sh build 8 4 64 20
#      tools/bench/layout_step.sh build 8 4 64 20 "lognormal(min=16,max=256,mean=48,sigma=0.8)"
set -euo pipefail
build=${1:?build dir}; ranks=${2:?ranks}; cp=${3:?cp}; cap=${4:?max_seqlen_per_dp_cp_rank}; steps=${5:-20}
distribution=${6:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
common=(--config "$root/configs/smoke/tiny_mock.yaml" train.train_iters="$steps" train.global_batch_size=32
        model.context_parallel_size="$cp" model.expert_model_parallel_size=1
        model.max_seqlen_per_dp_cp_rank="$cap" logger.log_interval=1000)
if [[ -n "$distribution" ]]; then common+=(dataset.mock_length_distribution="$distribution"); fi
mpirun -np "$ranks" "$build/apps/dyncp-train/dyncp-train" "${common[@]}" \
  model.dynamic_context_parallel=false model.sequence_packing_scheduler=dp_balanced \
  logger.metrics_path="$work/static.jsonl" >"$work/static.log" 2>&1
mpirun -np "$ranks" "$build/apps/dyncp-train/dyncp-train" "${common[@]}" \
  model.dynamic_context_parallel=true model.sequence_packing_scheduler=default_dynamic_cp \
  logger.metrics_path="$work/dynamic.jsonl" >"$work/dynamic.log" 2>&1
mpirun -np "$ranks" "$build/apps/dyncp-train/dyncp-train" "${common[@]}" \
  model.dynamic_context_parallel=true model.sequence_packing_scheduler=default_dynamic_cp \
  packing.alignment=pool logger.metrics_path="$work/dynamic_pool.jsonl" >"$work/dynamic_pool.log" 2>&1
python3 - "$work" "$ranks" "$cp" <<'PY'
import json, statistics, sys
work, ranks, cp = sys.argv[1], sys.argv[2], sys.argv[3]
def summary(name):
    rows = [json.loads(l) for l in open(f"{work}/{name}.jsonl")][2:]  # skip warm-up steps
    return {"step_ms": statistics.median(r["elapsed_ms"] for r in rows),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
            "comm_mib": statistics.median(r["comm_bytes"] for r in rows) / 2**20,
            "cp_comm_ms": statistics.median(r["time_ms"]["cp_comm"] for r in rows),
            "real_tokens": statistics.median(r["real_tokens"] for r in rows),
            "padded_tokens": statistics.median(r["padded_tokens"] for r in rows),
            "microbatches": statistics.median(r["microbatches"] for r in rows)}
s, d, p = summary("static"), summary("dynamic"), summary("dynamic_pool")
print(f"ranks {ranks}, static cp {cp}: " + json.dumps({"static": s, "dynamic": d,
      "dynamic_pool_alignment": p,
      "dynamic_over_static_step_time": d["step_ms"] / s["step_ms"],
      "dynamic_over_static_bytes": d["comm_mib"] / s["comm_mib"],
      "per_group_over_pool_step_time": d["step_ms"] / p["step_ms"],
      "per_group_over_pool_padded_tokens": d["padded_tokens"] / p["padded_tokens"]}))
PY
