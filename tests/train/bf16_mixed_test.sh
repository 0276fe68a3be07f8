#!/usr/bin/env bash
# mixed_precision: bf16_mixed end to end (docs/precision.md), run by ctest:
#   bf16_mixed_test.sh DYNCP_TRAIN DYNCP_TRAIN_EMULATED SOURCE_DIR CASE
# CASE:
#   cpu     50 steps of the tiny Qwen3-MoE on one CPU rank, bf16_mixed and fp32 from the same
#           weights and batches: every step's loss within 2e-2 relative of fp32's (the tolerance
#           docs/precision.md derives), and bf16 really differs from fp32
#   gpu     the same 50 steps with bf16_mixed on the emulated GPU (the bf16 cuBLASLt products,
#           bf16 attention and cross-entropy kernels): the same bound against the CPU fp32 run,
#           and every step within 1e-2 of the CPU bf16_mixed run
#   tp      tensor parallelism under bf16_mixed: 20 steps at tp 2 with sequence parallelism on two
#           emulated GPU ranks (the vocabulary-parallel kernels, TP sums over NCCL) within 2e-2
#           of the one-rank CPU fp32 run and within 1e-2 of the one-rank GPU bf16_mixed run;
#           the same at tp 2 without SP on two CPU ranks against one-rank CPU bf16_mixed
#   resume  bf16_mixed on CPU: 4 steps straight equal, bit for bit, 2 steps + checkpoint +
#           2 resumed steps (the checkpoint holds the fp32 master weights and moments); the
#           same on the emulated GPU
set -euo pipefail
cpu_train=$1
gpu_train=$2
source_dir=$3
case_name=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-bf16-$case_name.XXXXXX")
trap 'rm -rf "$work"' EXIT
recipe=$source_dir/configs/smoke/tiny_mock.yaml
# Learnable token data (each sample counts up from a random start in a random stride, modulo
# the vocabulary), so the loss curve falls and the runs are compared on real training dynamics.
python3 - "$work/tokens.jsonl" <<'PY'
import json, random, sys
rng = random.Random(7)
with open(sys.argv[1], "w") as out:
    for _ in range(256):
        start, stride, length = rng.randrange(512), rng.choice([1, 2, 3, 5]), rng.randrange(12, 29)
        out.write(json.dumps({"input_ids": [(start + stride * i) % 512 for i in range(length)]}) + "\n")
PY
# One rank, short sequences, two per step, head_dim 16 (a size the bf16 attention kernel takes):
# an emulated step takes well under a second.
tiny=(model.context_parallel_size=1 model.expert_model_parallel_size=1
      model.dynamic_context_parallel=false model.seq_length=64 model.max_seqlen_per_dp_cp_rank=64
      model.head_dim=16 model.moe_router_load_balancing_type=none train.global_batch_size=2
      dataset.type=token_jsonl dataset.data_path="$work/tokens.jsonl"
      dataset.cache_dir="$work/cache" optimizer.lr=3e-3 scheduler.lr_warmup_iters=2
      logger.log_interval=10)
run() {  # run BINARY DEVICE PRECISION NAME ARGS...: metrics in $work/NAME.jsonl
  local binary=$1 device=$2 precision=$3 name=$4
  shift 4
  OPENBLAS_NUM_THREADS=1 "$binary" --config "$recipe" "${tiny[@]}" dist.device="$device" \
    mixed_precision="$precision" logger.metrics_path="$work/$name.jsonl" "$@" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
}
run_ranks() {  # run_ranks RANKS BINARY DEVICE PRECISION NAME ARGS...: under mpirun
  local ranks=$1
  shift
  local binary=$1 device=$2 precision=$3 name=$4
  shift 4
  OPENBLAS_NUM_THREADS=1 mpirun -np "$ranks" "$binary" --config "$recipe" "${tiny[@]}" \
    dist.device="$device" mixed_precision="$precision" logger.metrics_path="$work/$name.jsonl" \
    checkpoint.save= "$@" </dev/null >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
}
compare() {  # compare A B TOLERANCE MODE: per-step loss of A against B
  # MODE within: every |loss_a - loss_b| / loss_b <= TOLERANCE, and some step differs;
  # MODE bitwise: every step's loss and grad norm identical.
  python3 - "$work/$1.jsonl" "$work/$2.jsonl" "$3" "$4" <<'PY'
import json, sys
a = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1]))}
b = {r["iteration"]: r for r in map(json.loads, open(sys.argv[2]))}
tolerance, mode = float(sys.argv[3]), sys.argv[4]
common = sorted(set(a) & set(b))
assert common, "no common iterations"
worst = max(abs(a[i]["loss"] - b[i]["loss"]) / abs(b[i]["loss"]) for i in common)
worst_norm = max(abs(a[i]["grad_norm"] - b[i]["grad_norm"]) / abs(b[i]["grad_norm"]) for i in common)
print(f"{len(common)} steps: loss {b[common[0]]['loss']:.4f} -> {b[common[-1]]['loss']:.4f}; "
      f"worst relative loss difference {worst:.2e}, grad norm {worst_norm:.2e} ({mode} {tolerance})")
if mode == "bitwise":
    for i in common:
        assert (a[i]["loss"], a[i]["grad_norm"]) == (b[i]["loss"], b[i]["grad_norm"]), (i, a[i], b[i])
else:
    assert worst <= tolerance, f"loss differs by {worst:.2e} > {tolerance}"
    assert worst > 0, "bf16_mixed gave exactly the fp32 losses: the precision had no effect"
PY
}
steps=(train.train_iters=50 scheduler.lr_decay_iters=50)

case $case_name in
  cpu)
    run "$cpu_train" cpu fp32 cpu-fp32 "${steps[@]}"
    run "$cpu_train" cpu bf16_mixed cpu-bf16 "${steps[@]}"
    grep -q "precision: bf16_mixed" "$work/cpu-bf16.log"
    compare cpu-bf16 cpu-fp32 2e-2 within
    ;;
  gpu)
    run "$cpu_train" cpu fp32 cpu-fp32 "${steps[@]}"
    run "$cpu_train" cpu bf16_mixed cpu-bf16 "${steps[@]}"
    start=$SECONDS
    run "$gpu_train" cuda bf16_mixed gpu-bf16 "${steps[@]}"
    echo "emulated GPU, 50 bf16_mixed steps: $((SECONDS - start)) s"
    grep -q "device: emulated CUDA device 0" "$work/gpu-bf16.log"
    grep -q "precision: bf16_mixed" "$work/gpu-bf16.log"
    compare gpu-bf16 cpu-fp32 2e-2 within
    compare gpu-bf16 cpu-bf16 1e-2 within
    ;;
  tp)
    short=(train.train_iters=20 scheduler.lr_decay_iters=20)
    tensor_parallel=(model.tensor_model_parallel_size=2 model.expert_tensor_parallel_size=1)
    run "$cpu_train" cpu fp32 cpu-fp32 "${short[@]}"
    run "$cpu_train" cpu bf16_mixed cpu-bf16 "${short[@]}"
    run "$gpu_train" cuda bf16_mixed gpu-bf16 "${short[@]}"
    run_ranks 2 "$gpu_train" cuda bf16_mixed gpu-tp2-bf16 "${short[@]}" "${tensor_parallel[@]}" \
      model.sequence_parallel=true
    grep -q "tp 2 (sequence parallel)" "$work/gpu-tp2-bf16.log"
    compare gpu-tp2-bf16 cpu-fp32 2e-2 within
    compare gpu-tp2-bf16 gpu-bf16 1e-2 within
    run_ranks 2 "$cpu_train" cpu bf16_mixed cpu-tp2-bf16 "${short[@]}" "${tensor_parallel[@]}"
    compare cpu-tp2-bf16 cpu-fp32 2e-2 within
    compare cpu-tp2-bf16 cpu-bf16 1e-2 within
    ;;
  resume)
    for pair in "$cpu_train cpu" "$gpu_train cuda"; do
      read -r binary device <<<"$pair"
      limit=(scheduler.lr_decay_iters=4)
      run "$binary" "$device" bf16_mixed "$device-straight" train.train_iters=4 "${limit[@]}"
      run "$binary" "$device" bf16_mixed "$device-first" train.train_iters=2 "${limit[@]}" \
        checkpoint.save="$work/ckpt-$device" checkpoint.save_interval=2
      run "$binary" "$device" bf16_mixed "$device-resumed" train.train_iters=4 "${limit[@]}" \
        checkpoint.load="$work/ckpt-$device" checkpoint.save="$work/ckpt-$device"
      grep -q "resumed from" "$work/$device-resumed.log"
      compare "$device-resumed" "$device-straight" 0 bitwise
      echo "resume on $device: steps 3-4 after the checkpoint equal the uninterrupted run"
    done
    ;;
  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
