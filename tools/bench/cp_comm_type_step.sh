#!/usr/bin/env bash
# The four CP exchanges compared on the same mock data, same global batches, same ranks:
# model.cp_comm_type all_gather, p2p (the ring), a2a (all-to-all, Ulysses) and a2a+p2p
# (all-to-all inside pairs of ranks, a ring across them: hierarchical sizes [2, CP/2]), static
# or dynamic CP, on a short-heavy or a long-heavy length mix. The tiny recipe runs with 8 query
# heads over 2 K/V heads so that an all-to-all group of up to 8 can share them (K/V heads
# replicated from 4 ranks on). Prints, per exchange, the median step time, bytes moved per step
# (counted in the Comm layer, summed over ranks), CP communication time, and the largest
# relative loss difference against all_gather.
#   tools/bench/cp_comm_type_step.sh BUILD_DIR RANKS CP CAP STEPS static|dynamic short|long
# e.g. tools/bench/cp_comm_type_step.sh build 8 4 64 12 dynamic long
set -euo pipefail
build=${1:?build dir}; ranks=${2:?ranks}; cp=${3:?cp}; cap=${4:?max_seqlen_per_dp_cp_rank}
steps=${5:-20}; mode=${6:-static}; mix=${7:-short}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
layout=(model.dynamic_context_parallel=false model.sequence_packing_scheduler=dp_balanced)
if [[ $mode == dynamic ]]; then
  layout=(model.dynamic_context_parallel=true model.sequence_packing_scheduler=default_dynamic_cp)
fi
case $mix in
  short) lengths="lognormal(min=16,max=256,mean=48,sigma=0.8)" ;;
  long) lengths="lognormal(min=64,max=256,mean=200,sigma=0.3)" ;;
  *) echo "mix: short or long" >&2; exit 2 ;;
esac
inner=$(( cp >= 2 ? 2 : 1 ))
for exchange in all_gather p2p a2a a2a+p2p; do
  extra=()
  [[ $exchange == a2a+p2p ]] && extra=("model.hierarchical_context_parallel_sizes=[$inner, $((cp / inner))]")
  name=${exchange/+/_}
  mpirun -np "$ranks" "$build/apps/dyncp-train/dyncp-train" --config "$root/configs/smoke/tiny_mock.yaml" \
    train.train_iters="$steps" train.global_batch_size=32 model.context_parallel_size="$cp" \
    model.num_attention_heads=8 model.num_key_value_heads=2 \
    model.expert_model_parallel_size=1 model.max_seqlen_per_dp_cp_rank="$cap" \
    "dataset.mock_length_distribution=$lengths" \
    logger.log_interval=1000 "${layout[@]}" model.cp_comm_type="$exchange" "${extra[@]}" \
    logger.metrics_path="$work/$name.jsonl" >"$work/$name.log" 2>&1 \
    || { cat "$work/$name.log"; exit 1; }
done
python3 - "$work" "$ranks" "$cp" "$mode" "$mix" <<'PY'
import json, statistics, sys
work, ranks, cp, mode, mix = sys.argv[1:6]
def rows(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
def summary(name):
    r = rows(name)[2:]  # skip warm-up steps
    return {"step_ms": statistics.median(x["elapsed_ms"] for x in r),
            "comm_mib": round(statistics.median(x["comm_bytes"] for x in r) / 2**20, 2),
            "cp_comm_ms": statistics.median(x["time_ms"]["cp_comm"] for x in r),
            "microbatches": statistics.median(x["microbatches"] for x in r)}
gather = rows("all_gather")
result = {}
for name in ("all_gather", "p2p", "a2a", "a2a_p2p"):
    s = summary(name)
    s["worst_relative_loss_difference"] = max(
        abs(o["loss"] - g["loss"]) / abs(g["loss"]) for g, o in zip(gather, rows(name)))
    result[name] = s
print(f"ranks {ranks}, cp {cp}, {mode}, {mix}-heavy: " + json.dumps(result))
PY
