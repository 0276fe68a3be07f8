#!/usr/bin/env bash
# The training loop on the GPU path against the CPU path, run by ctest with the emulated CUDA
# backend (dyncp-train-emulated runs kernels/ on the host, device memory unreadable by host
# code):
#   gpu_e2e_test.sh DYNCP_TRAIN DYNCP_TRAIN_EMULATED SOURCE_DIR CASE
# CASE:
#   matches_cpu   one rank, fp32: the same recipe on dist.device cpu and cuda; every step's
#                 loss and gradient norm agree to 1e-5 relative (the model step itself is
#                 checked tensor by tensor in tests/gpu/model_step_test.cpp)
#   checkpoints   a checkpoint saved by the GPU path resumes on the CPU path and the other way
#                 round; each resumed run's first loss equals, to 1e-5, the loss the saving
#                 run's own device reaches at that step
#   refusals      what the GPU path does not run yet exits 2 naming the key
#   four_ranks    mpirun -np 4, dynamic CP over dp 2 x cp 2 with EP 2, fp32: the trainer on the
#                 emulated GPU (tensors over the emulated NCCL, metadata over MPI) and on the
#                 CPU give every step's loss and gradient norm to 1e-5
set -euo pipefail
cpu_train=$1
gpu_train=$2
source_dir=$3
case_name=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/dyncp-gpu-e2e-$case_name.XXXXXX")
trap 'rm -rf "$work"' EXIT
recipe=$source_dir/configs/smoke/tiny_mock.yaml
# One rank, static layout; a small batch keeps the emulated run to seconds per step.
one_rank=(model.context_parallel_size=1 model.expert_model_parallel_size=1
          model.dynamic_context_parallel=false model.max_seqlen_per_dp_cp_rank=256
          model.moe_router_load_balancing_type=none train.global_batch_size=4
          dataset.mock_length_distribution="lognormal(min=16,max=96,mean=48,sigma=0.5)")
run() {
  local binary=$1 device=$2
  shift 2
  OPENBLAS_NUM_THREADS=1 "$binary" --config "$recipe" "${one_rank[@]}" dist.device="$device" "$@"
}
compare() {  # compare A.jsonl B.jsonl FIRST_ITERATION: loss and grad norm per step, 1e-5
  python3 - "$@" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
first = int(sys.argv[3])
b_by_iter = {r["iteration"]: r for r in b}
checked = 0
for r in a:
    if r["iteration"] < first or r["iteration"] not in b_by_iter:
        continue
    s = b_by_iter[r["iteration"]]
    for key in ("loss", "grad_norm"):
        rel = abs(r[key] - s[key]) / max(abs(s[key]), 1e-30)
        print(f"iteration {r['iteration']} {key}: {r[key]!r} vs {s[key]!r} (relative {rel:.2e})")
        assert rel <= 1e-5, (key, r, s)
    checked += 1
assert checked >= 1, "no common iterations"
PY
}

case $case_name in
  matches_cpu)
    run "$cpu_train" cpu train.train_iters=3 logger.metrics_path="$work/cpu.jsonl" >"$work/cpu.log" 2>&1
    run "$gpu_train" cuda train.train_iters=3 logger.metrics_path="$work/gpu.jsonl" >"$work/gpu.log" 2>&1 \
      || { cat "$work/gpu.log"; exit 1; }
    grep -q "device: emulated CUDA device 0" "$work/gpu.log"
    compare "$work/gpu.jsonl" "$work/cpu.jsonl" 1
    echo "matches_cpu: 3 steps on the emulated GPU equal the CPU steps to 1e-5"
    ;;
  checkpoints)
    # Each device trains 2 steps and saves; the other device resumes for step 3. Step 3's loss
    # after the resume must be what the saving device itself reaches at step 3 (to the CPU /
    # GPU round-off), so the checkpoint carried the whole state across.
    for pair in "gpu cuda cpu cpu" "cpu cpu gpu cuda"; do
      read -r save_name save_device load_name load_device <<<"$pair"
      save_binary=$cpu_train; [[ $save_name == gpu ]] && save_binary=$gpu_train
      load_binary=$cpu_train; [[ $load_name == gpu ]] && load_binary=$gpu_train
      ckpt=$work/ckpt-$save_name
      run "$save_binary" "$save_device" train.train_iters=3 scheduler.lr_decay_iters=3 \
        logger.metrics_path="$work/$save_name-full.jsonl" >"$work/$save_name-full.log" 2>&1
      run "$save_binary" "$save_device" train.train_iters=2 scheduler.lr_decay_iters=3 \
        checkpoint.save="$ckpt" checkpoint.save_interval=2 >"$work/$save_name-save.log" 2>&1
      run "$load_binary" "$load_device" train.train_iters=3 scheduler.lr_decay_iters=3 \
        checkpoint.load="$ckpt" logger.metrics_path="$work/$load_name-resumed.jsonl" \
        >"$work/$load_name-resume.log" 2>&1 || { cat "$work/$load_name-resume.log"; exit 1; }
      grep -q "resumed from" "$work/$load_name-resume.log"
      compare "$work/$load_name-resumed.jsonl" "$work/$save_name-full.jsonl" 3
      echo "checkpoints: saved on $save_name, resumed on $load_name"
    done
    ;;
  four_ranks)
    mpiexec=${DYNCP_MPIEXEC:-mpirun}
    layout=(model.context_parallel_size=2 model.expert_model_parallel_size=2
            model.dynamic_context_parallel=true model.max_seqlen_per_dp_cp_rank=48
            model.seq_length=96 model.moe_router_load_balancing_type=none
            train.global_batch_size=8 train.train_iters=2
            dataset.mock_length_distribution="lognormal(min=16,max=96,mean=40,sigma=0.5)")
    for pair in "cpu $cpu_train" "cuda $gpu_train"; do
      read -r device binary <<<"$pair"
      OPENBLAS_NUM_THREADS=1 "$mpiexec" -np 4 "$binary" --config "$recipe" "${layout[@]}" \
        dist.device="$device" logger.metrics_path="$work/$device.jsonl" >"$work/$device.log" 2>&1 \
        || { cat "$work/$device.log"; exit 1; }
    done
    grep -q "cp2:" "$work/cuda.log"  # a microbatch ran on a CP group of two
    compare "$work/cuda.jsonl" "$work/cpu.jsonl" 1
    echo "four_ranks: dynamic CP + EP on 4 emulated GPUs equal the CPU run to 1e-5"
    ;;
  refusals)
    expect() {  # expect REGEX ARGS...: exit 2 and the message
      local pattern=$1
      shift
      set +e
      output=$(run "$gpu_train" cuda "$@" 2>&1)
      rc=$?
      set -e
      [[ $rc == 2 ]] || { echo "$output"; echo "exit $rc, expected 2"; exit 1; }
      grep -Eq -- "$pattern" <<<"$output" || { echo "$output"; echo "no /$pattern/"; exit 1; }
      echo "refused: $pattern"
    }
    expect "model.moe_router_load_balancing_type: the MoE aux-loss ops have no CUDA kernels" \
      model.moe_router_load_balancing_type=aux_loss
    expect "optimizer.exp_avg_dtype: bf16 Adam moments have no CUDA kernel" \
      optimizer.use_precision_aware_optimizer=true optimizer.exp_avg_dtype=bfloat16
    DYNCP_EMULATED_GPUS=0 expect "dist.device: cuda: this binary has no CUDA backend or sees no GPU"
    ;;
  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
