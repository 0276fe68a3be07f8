#!/usr/bin/env bash
# CP attention exchanges compared on the same mock data, same global batches, same ranks:
# model.cp_comm_type all_gather versus p2p (the ring), static or dynamic CP. Prints, per
# exchange, the median step time, bytes moved per step (counted in the Comm layer, summed over
# ranks), CP communication time, and the largest relative loss difference between the two.
#   tools/bench/cp_comm_type_step.sh BUILD_DIR RANKS CP CAP STEPS static|dynamic
# e.g. tools/bench/cp_comm_type_step.sh build 4 2 128 20 static
set -euo pipefail
build=${1:?build dir}; ranks=${2:?ranks}; cp=${3:?cp}; cap=${4:?max_seqlen_per_dp_cp_rank}
steps=${5:-20}; mode=${6:-static}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
layout=(model.dynamic_context_parallel=false model.sequence_packing_scheduler=dp_balanced)
if [[ $mode == dynamic ]]; then
  layout=(model.dynamic_context_parallel=true model.sequence_packing_scheduler=default_dynamic_cp)
fi
for exchange in all_gather p2p; do
  mpirun -np "$ranks" "$build/apps/dyncp-train/dyncp-train" --config "$root/configs/smoke/tiny_mock.yaml" \
    train.train_iters="$steps" train.global_batch_size=32 model.context_parallel_size="$cp" \
    model.expert_model_parallel_size=1 model.max_seqlen_per_dp_cp_rank="$cap" \
    logger.log_interval=1000 "${layout[@]}" model.cp_comm_type="$exchange" \
    logger.metrics_path="$work/$exchange.jsonl" >"$work/$exchange.log" 2>&1
done
python3 - "$work" "$ranks" "$cp" "$mode" <<'PY'
import json, statistics, sys
work, ranks, cp, mode = sys.argv[1:5]
def rows(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
def summary(name):
    r = rows(name)[2:]  # skip warm-up steps
    return {"step_ms": statistics.median(x["elapsed_ms"] for x in r),
            "comm_mib": statistics.median(x["comm_bytes"] for x in r) / 2**20,
            "cp_comm_ms": statistics.median(x["time_ms"]["cp_comm"] for x in r),
            "microbatches": statistics.median(x["microbatches"] for x in r)}
gather, ring = rows("all_gather"), rows("p2p")
worst = max(abs(r["loss"] - g["loss"]) / abs(g["loss"]) for g, r in zip(gather, ring))
same_bytes = all(r["comm_bytes"] == g["comm_bytes"] for g, r in zip(gather, ring))
print(f"ranks {ranks}, cp {cp}, {mode}: " + json.dumps({
    "all_gather": summary("all_gather"), "p2p": summary("p2p"),
    "bytes_equal_every_step": same_bytes, "worst_relative_loss_difference": worst}))
PY
